"""Rendering on hand-built snapshots: frame shape, colours where units and obstacles are, the raster."""

from __future__ import annotations

import copy
import sys
from typing import Any

import numpy as np
import pytest

from mission_gym.envs import rendering
from mission_gym.envs.rendering import HUD_BG, OBSTACLE, TEAM_COLORS, make_view, raster, render_frame


def unit(name: str, team: str, x: float, y: float, **extra: Any) -> dict[str, Any]:
    base = {
        "name": name,
        "team": team,
        "category": "ground",
        "x": x,
        "y": y,
        "heading": 0.0,
        "radius": 2.5,
        "integrity_frac": 1.0,
        "alive": True,
        "altitude": 0,
        "tagged": False,
        "tag_target": -1,
        "detected": False,
    }
    base.update(extra)
    return base


@pytest.fixture
def snap() -> dict[str, Any]:
    return {
        "arena": (200.0, 200.0),
        "circles": [(150.0, 60.0, 12.0)],
        "rects": [(100.0, 40.0, 25.0, 15.0, 0.0), (60.0, 160.0, 30.0, 4.0, 45.0)],
        "objective": (100.0, 100.0, 15.0),
        "capture_progress": 0.0,
        "capture_time": 15.0,
        "time": 12.5,
        "time_limit": 300.0,
        "outcome": None,
        "tag_range": 20.0,
        "tag_half_angle": 30.0,
        "units": [
            unit("UGV_A", "attacker", 30.0, 30.0),
            unit("UAV_A", "attacker", 30.0, 170.0, category="air", radius=0.5, altitude=1),
            unit("DEF_UGV", "defender", 170.0, 170.0),
            unit("DEF_DEAD", "defender", 170.0, 110.0, alive=False, integrity_frac=0.0),
        ],
    }


def pixel(frame: np.ndarray, snap: dict[str, Any], x: float, y: float) -> np.ndarray:
    h, w = frame.shape[:2]
    px, py = make_view(snap, w, h).to_px(x, y)
    return frame[int(py), int(px)].astype(int)


def close_to(a: np.ndarray, b: tuple[int, int, int], tol: int = 12) -> bool:
    return bool(np.all(np.abs(np.asarray(a) - np.asarray(b)) <= tol))


@pytest.mark.parametrize("size", [(600, 600), (320, 240), (64, 64), (800, 450)])
def test_frame_shape_and_dtype(snap: dict[str, Any], size: tuple[int, int]) -> None:
    frame = render_frame(snap, width=size[0], height=size[1])
    assert frame.shape == (size[1], size[0], 3)
    assert frame.dtype == np.uint8


def test_units_and_obstacles_appear_where_they_are(snap: dict[str, Any]) -> None:
    frame = render_frame(snap)
    # sampled a metre north of the centres: the heading line runs east from the centre
    assert close_to(pixel(frame, snap, 30.0, 31.0), TEAM_COLORS["attacker"])
    assert close_to(pixel(frame, snap, 170.0, 171.0), TEAM_COLORS["defender"])
    assert close_to(pixel(frame, snap, 170.0, 111.0), rendering.DISABLED)  # grey (crossed out at the centre)
    assert close_to(pixel(frame, snap, 150.0, 60.0), OBSTACLE)
    assert close_to(pixel(frame, snap, 100.0, 40.0), OBSTACLE)
    # the thin rect is rotated 45 degrees: a point along its diagonal is inside, one along its x axis is not
    assert close_to(pixel(frame, snap, 60.0 + 10.0, 160.0 + 10.0), OBSTACLE)
    assert not close_to(pixel(frame, snap, 60.0 + 12.0, 160.0), OBSTACLE)
    # the air unit is drawn in its team's lighter shade
    assert close_to(pixel(frame, snap, 30.0, 170.0), rendering.unit_color(snap["units"][1]), tol=30)


def test_north_is_up(snap: dict[str, Any]) -> None:
    view = make_view(snap, 600, 600)
    assert view.to_px(0.0, 200.0)[1] < view.to_px(0.0, 0.0)[1]
    frame = render_frame(snap)
    ys, _ = np.nonzero(np.all(np.abs(frame.astype(int) - TEAM_COLORS["defender"]) < 10, axis=-1))
    assert ys.mean() < 300  # the live defender at y=170 is in the top half


def test_hud_band_and_outcome_banner(snap: dict[str, Any]) -> None:
    frame = render_frame(snap)
    assert close_to(frame[2, 300], HUD_BG, tol=2)
    won = copy.deepcopy(snap)
    won["outcome"] = "captured"
    won_frame = render_frame(won)
    assert close_to(pixel(won_frame, snap, 100.0, 100.0), rendering.OUTCOME_COLORS["captured"], tol=2)


def test_tag_cone_and_capture_arc_drawn(snap: dict[str, Any]) -> None:
    before = render_frame(snap).astype(int)
    fired = copy.deepcopy(snap)
    fired["units"][0].update(tagged=True, tag_target=2)
    fired["capture_progress"] = 7.5
    after = render_frame(fired).astype(int)
    # inside the cone (east of the shooter, heading 0) the ground is tinted
    assert not close_to(pixel(after, snap, 45.0, 30.0), tuple(pixel(before, snap, 45.0, 30.0)), tol=3)
    # the arc runs clockwise from north: the east side of the ring is drawn, the west side not yet
    view = make_view(snap, 600, 600)
    ring = 15.0 + 2.0 / view.scale  # the 4 px arc is drawn inside a ring 4 px outside the zone
    assert close_to(pixel(after, snap, 100.0 + ring, 100.0), rendering.CAPTURE, tol=40)
    assert not close_to(pixel(after, snap, 100.0 - ring, 100.0), rendering.CAPTURE, tol=40)


def test_too_small_frame_is_refused(snap: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="too small"):
        render_frame(snap, width=8, height=8)


def test_raster_channels(snap: dict[str, Any]) -> None:
    r = raster(snap, size=50)  # 4 m cells
    assert r.shape == (4, 50, 50) and r.dtype == np.float32
    assert set(np.unique(r)) <= {0.0, 1.0}

    def cell(x: float, y: float) -> tuple[int, int]:
        return int((200.0 - y) / 4.0), int(x / 4.0)

    assert r[0][cell(150, 60)] == 1 and r[0][cell(100, 40)] == 1 and r[0][cell(10, 10)] == 0
    assert r[1][cell(100, 100)] == 1 and r[1][cell(100, 120)] == 0
    assert r[2][cell(30, 30)] == 1 and r[2][cell(30, 170)] == 1 and r[2].sum() <= 8
    assert r[3][cell(170, 170)] == 1 and r[3][cell(170, 110)] == 0  # disabled units are not shown
    with pytest.raises(ValueError):
        raster(snap, size=0)


def test_human_window_headless(monkeypatch: pytest.MonkeyPatch, snap: dict[str, Any]) -> None:
    pytest.importorskip("pygame")
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    window = rendering.HumanWindow(fps=None)
    try:
        events = window.show(render_frame(snap, 200, 200))
        assert isinstance(events, list)
        assert window._screen.get_size() == (200, 200)
    finally:
        window.close()
        window.close()


def test_missing_pygame_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pygame", None)  # makes `import pygame` raise ImportError
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'mission_gym\[play\]'"):
        rendering.HumanWindow()


def test_env_renders_frames_and_raster() -> None:
    envs = pytest.importorskip("mission_gym.envs")
    env = envs.MissionEnv(render_mode="rgb_array")
    env.reset(seed=0)
    env.step(env.action_space.sample())
    frame = env.render()
    assert frame is not None and frame.shape == (600, 600, 3) and frame.dtype == np.uint8
    assert frame.std() > 10
    r = env.raster(32)
    assert r.shape == (4, 32, 32) and r[2].sum() >= 1 and r[3].sum() >= 1 and r[0].sum() > 10
    env.close()


def test_env_human_mode_headless(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pygame")
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    envs = pytest.importorskip("mission_gym.envs")
    env = envs.MissionEnv(render_mode="human")
    env.metadata = {**env.metadata, "render_fps": 1000}  # do not pace the test
    env.reset(seed=0)
    env.step(env.action_space.sample())
    assert env.render() is None and env._window is not None and env._window._screen is not None
    env.close()
