"""play_manual headless: key events posted into pygame's queue steer the attackers."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest

pygame = pytest.importorskip("pygame", reason="play_manual needs pygame (pip install mission_gym[play])")

from mission_gym.envs import MissionEnv  # noqa: E402
from mission_gym.envs.manual import KeyboardController, play  # noqa: E402
from mission_gym.scripts import play_manual  # noqa: E402
from mission_gym.sim.layout import A_STOP, A_TAG, ACTION_NAMES  # noqa: E402


@pytest.fixture(autouse=True)
def headless(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    monkeypatch.setenv("SDL_AUDIODRIVER", "dummy")


def key(kind: int, k: int, mod: int = 0) -> Any:
    return pygame.event.Event(kind, key=k, mod=mod)


def positions(snapshot: dict[str, Any]) -> dict[str, np.ndarray]:
    return {u["name"]: np.array([u["x"], u["y"]]) for u in snapshot["units"] if u["team"] == "attacker"}


def test_injected_keys_move_the_selected_units() -> None:
    env = MissionEnv()
    env.reset(seed=0)
    start = positions(env.unwrapped.core.snapshot(0))
    script = {
        1: [key(pygame.KEYDOWN, pygame.K_d)],  # unit 1 (UGV_A) east, held
        2: [key(pygame.KEYDOWN, pygame.K_2)],  # select UGV_B: UGV_A keeps going east
        3: [key(pygame.KEYDOWN, pygame.K_DOWN)],  # UGV_B south
        30: [key(pygame.KEYDOWN, pygame.K_SPACE)],  # UGV_B stops to fire a tag
    }
    summary = play(env, seed=0, fps=0, max_frames=36, before_frame=lambda i: [pygame.event.post(e) for e in script.get(i, [])])
    assert summary.frames == 36 and not summary.quit
    end = positions(summary.last_snapshot)
    moved = {name: end[name] - start[name] for name in start}
    assert moved["UGV_A"][0] > 10 and abs(moved["UGV_A"][1]) < 5, moved  # east
    assert moved["UGV_B"][1] < -10 and abs(moved["UGV_B"][0]) < 5, moved  # south
    assert np.linalg.norm(moved["UAV_A"]) < 1 and np.linalg.norm(moved["UAV_B"]) < 1, moved  # never commanded
    env.close()


def test_reset_and_quit_keys() -> None:
    env = MissionEnv()
    script = {
        1: [key(pygame.KEYDOWN, pygame.K_w)],
        10: [key(pygame.KEYDOWN, pygame.K_r)],
        12: [key(pygame.KEYDOWN, pygame.K_ESCAPE)],
    }
    summary = play(
        env, seed=1, fps=0, max_frames=100, before_frame=lambda i: [pygame.event.post(e) for e in script.get(i, [])]
    )
    assert summary.quit and summary.frames == 13
    assert summary.last_snapshot is not None and summary.last_snapshot["time"] <= 0.5  # the reset restarted the clock
    env.close()


def test_controller_mapping() -> None:
    c = KeyboardController(4, pygame)
    c.handle(key(pygame.KEYDOWN, pygame.K_UP))
    c.handle(key(pygame.KEYDOWN, pygame.K_RIGHT))
    assert ACTION_NAMES[c.action()[0]] == "NE"
    c.handle(key(pygame.KEYUP, pygame.K_UP))
    assert ACTION_NAMES[c.action()[0]] == "E"
    c.handle(key(pygame.KEYUP, pygame.K_RIGHT))
    assert c.action()[0] == A_STOP
    c.handle(key(pygame.KEYDOWN, pygame.K_TAB))
    assert c.selected == 1
    c.handle(key(pygame.KEYDOWN, pygame.K_TAB, mod=pygame.KMOD_SHIFT))
    assert c.selected == 0
    c.handle(key(pygame.KEYDOWN, pygame.K_0))
    c.handle(key(pygame.KEYDOWN, pygame.K_a))
    assert [ACTION_NAMES[a] for a in c.action()] == ["W"] * 4
    c.handle(key(pygame.KEYDOWN, pygame.K_SPACE))
    assert list(c.action()) == [A_TAG] * 4 and list(c.action()) == [A_STOP] * 4  # one shot, then stopped
    c.handle(key(pygame.KEYDOWN, pygame.K_9))  # no attacker 9: ignored
    assert c.selected is None
    assert c.handle(key(pygame.KEYDOWN, pygame.K_r)) == "reset" and c.handle(key(pygame.KEYDOWN, pygame.K_q)) == "quit"


def test_cli_runs_headless(capsys: pytest.CaptureFixture[str]) -> None:
    assert play_manual.main(["--max-frames", "3", "--fps", "1000", "--seed", "0"]) == 0
    assert "episodes finished" in capsys.readouterr().out


def test_missing_pygame_is_a_clear_exit_2(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "pygame", None)
    assert play_manual.main(["--max-frames", "1"]) == 2
    err = capsys.readouterr().err
    assert "pip install 'mission_gym[play]'" in err and len(err.strip().splitlines()) == 1


def test_help_documents_the_keys(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        play_manual.main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for word in ("arrows/WASD", "Tab", "space", "SCAN", "reset", "Esc"):
        assert word in out
