"""Pictures of a Mission Gym game: RGB frames, a top-down debugging raster and a pygame window.

Everything here reads a *snapshot*, the plain dict :meth:`mission_gym.sim.MissionCore.snapshot`
returns, so rendering never touches the simulation arrays and can be tested on hand-built states::

    {"arena": (W, H), "circles": [(x, y, r), ...], "rects": [(x, y, width, height, angle_deg), ...],
     "objective": (x, y, radius), "capture_progress": s, "capture_time": s, "time": s, "time_limit": s,
     "outcome": None | "captured" | "all_disabled" | "timeout" | "stalled",
     "tag_range": m, "tag_half_angle": deg,
     "units": [{"name", "team", "category", "x", "y", "heading" (rad, 0 = east, CCW), "radius",
                "integrity_frac", "alive", "altitude", "tagged", "tag_target", "detected"}, ...]}

World coordinates have y pointing north; images have row 0 at the top, so y is flipped.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFont

Color = tuple[int, int, int]

BACKGROUND: Color = (238, 234, 222)
GRID: Color = (226, 221, 206)
BORDER: Color = (120, 113, 100)
OBSTACLE: Color = (92, 86, 78)
OBJECTIVE_FILL: tuple[int, int, int, int] = (250, 204, 21, 70)
OBJECTIVE_EDGE: Color = (202, 138, 4)
CAPTURE: Color = (22, 163, 74)
TEAM_COLORS: dict[str, Color] = {"attacker": (37, 99, 235), "defender": (220, 38, 38)}
DISABLED: Color = (156, 156, 156)
DETECTED: Color = (245, 158, 11)
HUD_BG: Color = (31, 41, 55)
HUD_TEXT: Color = (243, 244, 246)
OUTCOME_COLORS: dict[str, Color] = {
    "captured": (22, 163, 74),
    "all_disabled": (185, 28, 28),
    "timeout": (180, 83, 9),
    "stalled": (107, 114, 128),
}
SUPERSAMPLE = 2  # draw at 2x and downscale: Pillow's ImageDraw does not antialias
GRID_STEP_M = 20.0

__all__ = ["View", "HumanWindow", "make_view", "raster", "render_frame", "require_pygame"]


@dataclass(frozen=True)
class View:
    """Maps arena metres to image pixels (y flipped so north is up).

    :param scale: pixels per metre
    :param left: pixel column of x = 0
    :param top: pixel row of y = arena height
    :param arena_height: arena height in metres
    """

    scale: float
    left: float
    top: float
    arena_height: float

    def to_px(self, x: float, y: float) -> tuple[float, float]:
        """Pixel (column, row) of the world point (x, y)."""
        return self.left + x * self.scale, self.top + (self.arena_height - y) * self.scale

    def scaled(self, factor: float) -> View:
        """The same view for an image ``factor`` times larger."""
        return View(self.scale * factor, self.left * factor, self.top * factor, self.arena_height)


def hud_height(height: int) -> int:
    """Pixel rows reserved for the HUD band at the top of a frame of ``height`` rows (0 when too small)."""
    return 0 if height < 160 else int(min(40, max(22, round(0.06 * height))))


def make_view(snapshot: Mapping[str, Any], width: int, height: int) -> View:
    """The view :func:`render_frame` uses: the arena fitted below the HUD band, aspect kept, centred.

    :param snapshot: a core snapshot (only ``arena`` is read)
    :param width: frame width in pixels
    :param height: frame height in pixels
    """
    arena_w, arena_h = (float(v) for v in snapshot["arena"])
    hud = hud_height(height)
    margin = 2.0
    scale = min((width - 2 * margin) / arena_w, (height - hud - 2 * margin) / arena_h)
    left = (width - arena_w * scale) / 2.0
    top = hud + (height - hud - arena_h * scale) / 2.0
    return View(scale, left, top, arena_h)


@lru_cache(maxsize=16)
def get_font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    """Pillow's bundled font at ``size`` pixels (the fixed bitmap font where FreeType is missing)."""
    try:
        return ImageFont.load_default(size=size)
    except (TypeError, OSError, ImportError):  # old Pillow or no FreeType: the fixed bitmap font
        return ImageFont.load_default()


def _rect_corners(rect: Sequence[float]) -> np.ndarray:
    """World corners (4, 2) of a rotated rectangle ``(x, y, width, height, angle_deg)``."""
    x, y, w, h, angle = (float(v) for v in rect)
    a = math.radians(angle)
    c, s = math.cos(a), math.sin(a)
    local = np.array([[-w / 2, -h / 2], [w / 2, -h / 2], [w / 2, h / 2], [-w / 2, h / 2]])
    rot = np.array([[c, -s], [s, c]])
    return local @ rot.T + np.array([x, y])


def _shade(color: Color, factor: float) -> Color:
    """``color`` blended towards white (factor > 0) or black (factor < 0)."""
    target = 255 if factor > 0 else 0
    f = abs(factor)
    return tuple(int(round(c + (target - c) * f)) for c in color)  # type: ignore[return-value]


def _integrity_color(frac: float) -> Color:
    if frac > 0.5:
        return (34, 197, 94)
    if frac > 0.3:
        return (234, 179, 8)
    return (239, 68, 68)


def unit_color(unit: Mapping[str, Any]) -> Color:
    """Body colour of a unit: its team's colour (lighter for air units), grey once disabled."""
    if not unit["alive"]:
        return DISABLED
    base = TEAM_COLORS.get(str(unit["team"]), (80, 80, 80))
    return _shade(base, 0.25) if unit["category"] == "air" else base


def render_frame(snapshot: Mapping[str, Any], width: int = 600, height: int = 600, labels: bool = True) -> np.ndarray:
    """Draw one frame of the game.

    Obstacles, the objective zone with its capture-progress arc, units as team-coloured shapes
    (ground: discs, air: triangles with a shadow offset by altitude) with a heading line and an
    integrity bar, disabled units greyed, an amber ring round units the enemy currently detects,
    tag cones of units that fired this step (with a line to the unit hit), and a HUD with sim
    time, capture progress, units alive and the outcome.

    :param snapshot: a core snapshot (see the module docstring)
    :param width: frame width in pixels
    :param height: frame height in pixels
    :param labels: write unit names next to the units (only when the frame is large enough)
    :return: an RGB image ``(height, width, 3)`` of dtype uint8
    """
    if width < 16 or height < 16:
        raise ValueError(f"frame size {width}x{height} is too small; use at least 16x16 pixels")
    k = SUPERSAMPLE
    view = make_view(snapshot, width, height).scaled(k)
    img = Image.new("RGB", (width * k, height * k), BACKGROUND)
    draw = ImageDraw.Draw(img, "RGBA")  # RGBA fills blend onto the RGB image
    _draw_arena(draw, snapshot, view, k)
    _draw_objective_fill(draw, snapshot, view)
    _draw_tag_cones(draw, snapshot, view)
    _draw_objective_edge(draw, snapshot, view, k)
    _draw_obstacles(draw, snapshot, view)
    _draw_tag_lines(draw, snapshot, view, k)
    _draw_units(draw, snapshot, view, k, labels=labels and width >= 400)
    img = img.reduce(k)
    draw = ImageDraw.Draw(img)
    if snapshot.get("outcome"):
        _draw_outcome_banner(draw, snapshot, width, height)
    _draw_hud(draw, snapshot, width, hud_height(height))
    return np.asarray(img, dtype=np.uint8)


def _draw_arena(draw: ImageDraw.ImageDraw, snap: Mapping[str, Any], view: View, k: int) -> None:
    arena_w, arena_h = (float(v) for v in snap["arena"])
    x0, y0 = view.to_px(0.0, arena_h)
    x1, y1 = view.to_px(arena_w, 0.0)
    for gx in np.arange(GRID_STEP_M, arena_w, GRID_STEP_M):
        px, _ = view.to_px(gx, 0.0)
        draw.line([(px, y0), (px, y1)], fill=GRID, width=k)
    for gy in np.arange(GRID_STEP_M, arena_h, GRID_STEP_M):
        _, py = view.to_px(0.0, gy)
        draw.line([(x0, py), (x1, py)], fill=GRID, width=k)
    draw.rectangle([x0, y0, x1, y1], outline=BORDER, width=2 * k)


def _circle_box(view: View, x: float, y: float, r_px: float) -> list[float]:
    px, py = view.to_px(x, y)
    return [px - r_px, py - r_px, px + r_px, py + r_px]


def _draw_objective_fill(draw: ImageDraw.ImageDraw, snap: Mapping[str, Any], view: View) -> None:
    ox, oy, r = (float(v) for v in snap["objective"])
    draw.ellipse(_circle_box(view, ox, oy, r * view.scale), fill=OBJECTIVE_FILL)


def _draw_objective_edge(draw: ImageDraw.ImageDraw, snap: Mapping[str, Any], view: View, k: int) -> None:
    ox, oy, r = (float(v) for v in snap["objective"])
    r_px = r * view.scale
    draw.ellipse(_circle_box(view, ox, oy, r_px), outline=OBJECTIVE_EDGE, width=2 * k)
    px, py = view.to_px(ox, oy)
    cross = 4 * k
    draw.line([(px - cross, py), (px + cross, py)], fill=OBJECTIVE_EDGE, width=k)
    draw.line([(px, py - cross), (px, py + cross)], fill=OBJECTIVE_EDGE, width=k)
    frac = _capture_fraction(snap)
    if frac > 0:
        # clockwise from north, like a clock hand filling up
        ring = r_px + 4 * k
        box = [px - ring, py - ring, px + ring, py + ring]
        draw.arc(box, start=-90.0, end=-90.0 + 360.0 * frac, fill=CAPTURE, width=4 * k)


def _capture_fraction(snap: Mapping[str, Any]) -> float:
    total = float(snap.get("capture_time") or 0.0)
    return 0.0 if total <= 0 else min(1.0, max(0.0, float(snap.get("capture_progress", 0.0)) / total))


def _draw_obstacles(draw: ImageDraw.ImageDraw, snap: Mapping[str, Any], view: View) -> None:
    for x, y, r in snap.get("circles", ()):
        draw.ellipse(_circle_box(view, float(x), float(y), float(r) * view.scale), fill=OBSTACLE)
    for rect in snap.get("rects", ()):
        corners = [view.to_px(cx, cy) for cx, cy in _rect_corners(rect)]
        draw.polygon(corners, fill=OBSTACLE)


def _draw_tag_cones(draw: ImageDraw.ImageDraw, snap: Mapping[str, Any], view: View) -> None:
    half = float(snap.get("tag_half_angle", 30.0))
    r_px = float(snap.get("tag_range", 20.0)) * view.scale
    for unit in snap["units"]:
        if not unit.get("tagged"):
            continue
        color = TEAM_COLORS.get(str(unit["team"]), (80, 80, 80))
        img_angle = -math.degrees(float(unit["heading"]))  # Pillow measures clockwise in image space
        box = _circle_box(view, float(unit["x"]), float(unit["y"]), r_px)
        draw.pieslice(box, start=img_angle - half, end=img_angle + half, fill=(*color, 70), outline=(*color, 150))


def _draw_tag_lines(draw: ImageDraw.ImageDraw, snap: Mapping[str, Any], view: View, k: int) -> None:
    units = snap["units"]
    for unit in units:
        target = int(unit.get("tag_target", -1))
        if not unit.get("tagged") or not 0 <= target < len(units):
            continue
        color = TEAM_COLORS.get(str(unit["team"]), (80, 80, 80))
        a = view.to_px(float(unit["x"]), float(unit["y"]))
        b = view.to_px(float(units[target]["x"]), float(units[target]["y"]))
        draw.line([a, b], fill=color, width=2 * k)
        burst = 7 * k
        draw.ellipse([b[0] - burst, b[1] - burst, b[0] + burst, b[1] + burst], outline=color, width=2 * k)


def _draw_units(draw: ImageDraw.ImageDraw, snap: Mapping[str, Any], view: View, k: int, labels: bool) -> None:
    # disabled first, then ground, then air, so live units and drones stay on top
    order = sorted(snap["units"], key=lambda u: (bool(u["alive"]), u["category"] == "air"))
    font = get_font(10 * k)
    for unit in order:
        x, y = view.to_px(float(unit["x"]), float(unit["y"]))
        air = unit["category"] == "air"
        r_px = max(float(unit["radius"]) * view.scale, (5.0 if air else 4.5) * k)
        color = unit_color(unit)
        heading = float(unit["heading"])
        dx, dy = math.cos(heading), -math.sin(heading)
        if air:
            shadow = (2.0 + 2.0 * max(0, int(unit.get("altitude", 1)))) * k
            sx, sy = x + shadow, y + shadow
            draw.ellipse([sx - r_px, sy - 0.6 * r_px, sx + r_px, sy + 0.6 * r_px], fill=(176, 170, 156))
            size = r_px * 1.5
            tip = (x + dx * size, y + dy * size)
            px, py = -dy, dx  # perpendicular
            back_l = (x - dx * size * 0.7 + px * size * 0.8, y - dy * size * 0.7 + py * size * 0.8)
            back_r = (x - dx * size * 0.7 - px * size * 0.8, y - dy * size * 0.7 - py * size * 0.8)
            draw.polygon(
                [tip, back_l, (x - dx * size * 0.25, y - dy * size * 0.25), back_r], fill=color, outline=(255, 255, 255)
            )
        else:
            draw.ellipse([x - r_px, y - r_px, x + r_px, y + r_px], fill=color, outline=_shade(color, -0.4), width=k)
            tip_len = r_px + 5 * k
            draw.line([(x, y), (x + dx * tip_len, y + dy * tip_len)], fill=(17, 24, 39), width=2 * k)
        if unit["alive"] and unit.get("detected"):
            ring = r_px + 3 * k
            draw.ellipse([x - ring, y - ring, x + ring, y + ring], outline=DETECTED, width=k)
        if not unit["alive"]:
            cross = r_px * 0.8
            draw.line([(x - cross, y - cross), (x + cross, y + cross)], fill=(64, 64, 64), width=k)
            draw.line([(x - cross, y + cross), (x + cross, y - cross)], fill=(64, 64, 64), width=k)
            continue
        bar_w = max(16 * k, 2.2 * r_px)
        bar_h = 3 * k
        top = y - r_px - 9 * k
        frac = min(1.0, max(0.0, float(unit.get("integrity_frac", 1.0))))
        draw.rectangle([x - bar_w / 2, top, x + bar_w / 2, top + bar_h], fill=(55, 55, 55))
        if frac > 0:
            draw.rectangle([x - bar_w / 2, top, x - bar_w / 2 + bar_w * frac, top + bar_h], fill=_integrity_color(frac))
        if labels:
            draw.text((x + r_px + 3 * k, y + 1 * k), str(unit["name"]), fill=(55, 65, 81), font=font)


def _draw_hud(draw: ImageDraw.ImageDraw, snap: Mapping[str, Any], width: int, hud: int) -> None:
    if hud <= 0:
        return
    draw.rectangle([0, 0, width, hud], fill=HUD_BG)
    font = get_font(max(10, int(hud * 0.5)))
    units = snap["units"]
    alive = {team: sum(1 for u in units if u["team"] == team and u["alive"]) for team in TEAM_COLORS}
    total = {team: sum(1 for u in units if u["team"] == team) for team in TEAM_COLORS}
    t, limit = float(snap.get("time", 0.0)), float(snap.get("time_limit", 0.0))
    cap, cap_total = float(snap.get("capture_progress", 0.0)), float(snap.get("capture_time", 0.0))
    teams = f"att {alive['attacker']}/{total['attacker']}  def {alive['defender']}/{total['defender']}"
    left, label = f"time {t:.1f}/{limit:.0f}s   {teams}", f"capture {cap:4.1f}/{cap_total:.0f}s"
    bar_w = max(40, int(width * 0.22))
    if draw.textlength(left + label, font=font) + bar_w + 40 > width:  # narrow frame: the short form
        left, label = f"{t:.0f}/{limit:.0f}s A{alive['attacker']} D{alive['defender']}", f"{cap:.0f}/{cap_total:.0f}s"
        bar_w = max(30, int(width * 0.15))
    text_y = hud / 2
    draw.text((6, text_y), left, fill=HUD_TEXT, font=font, anchor="lm")
    bar_h = max(6, int(hud * 0.35))
    x1 = width - 6
    x0 = x1 - bar_w
    frac = _capture_fraction(snap)
    draw.rectangle([x0, text_y - bar_h / 2, x1, text_y + bar_h / 2], outline=HUD_TEXT, fill=(55, 65, 81))
    if frac > 0:
        draw.rectangle([x0, text_y - bar_h / 2, x0 + bar_w * frac, text_y + bar_h / 2], fill=CAPTURE)
    draw.text((x0 - 5, text_y), label, fill=HUD_TEXT, font=font, anchor="rm")


def _draw_outcome_banner(draw: ImageDraw.ImageDraw, snap: Mapping[str, Any], width: int, height: int) -> None:
    outcome = str(snap["outcome"])
    text = outcome.replace("_", " ").upper()
    font = get_font(max(12, int(min(width, height) * 0.07)))
    cx, cy = width / 2, hud_height(height) + (height - hud_height(height)) * 0.5
    box = draw.textbbox((cx, cy), text, font=font, anchor="mm")
    pad = max(4, int(min(width, height) * 0.02))
    draw.rectangle([box[0] - pad, box[1] - pad, box[2] + pad, box[3] + pad], fill=OUTCOME_COLORS.get(outcome, HUD_BG))
    draw.text((cx, cy), text, fill=(255, 255, 255), font=font, anchor="mm")


def raster(snapshot: Mapping[str, Any], size: int = 64) -> np.ndarray:
    """A top-down raster of the state for debugging.

    Row 0 is the north edge (as in :func:`render_frame`); cell ``(i, j)`` covers the square whose
    centre is at ``x = (j + 0.5) * W / size``, ``y = H - (i + 0.5) * H / size``.

    :param snapshot: a core snapshot
    :param size: cells per side
    :return: float32 ``(4, size, size)`` of 0/1 values; channels obstacles, objective, attackers
        (alive), defenders (alive)
    """
    if size < 1:
        raise ValueError(f"raster size must be >= 1, got {size}")
    arena_w, arena_h = (float(v) for v in snapshot["arena"])
    cell_w, cell_h = arena_w / size, arena_h / size
    xs = (np.arange(size) + 0.5) * cell_w
    ys = arena_h - (np.arange(size) + 0.5) * cell_h
    gx, gy = np.meshgrid(xs, ys)  # (size, size): row i, column j
    out = np.zeros((4, size, size), dtype=np.float32)

    circles = np.asarray(snapshot.get("circles", ()), dtype=np.float64).reshape(-1, 3)
    if len(circles):
        d2 = (gx[None] - circles[:, 0, None, None]) ** 2 + (gy[None] - circles[:, 1, None, None]) ** 2
        out[0] = np.any(d2 <= circles[:, 2, None, None] ** 2, axis=0)
    rects = np.asarray(snapshot.get("rects", ()), dtype=np.float64).reshape(-1, 5)
    if len(rects):
        a = np.radians(rects[:, 4])[:, None, None]
        dx, dy = gx[None] - rects[:, 0, None, None], gy[None] - rects[:, 1, None, None]
        lx = dx * np.cos(a) + dy * np.sin(a)
        ly = -dx * np.sin(a) + dy * np.cos(a)
        inside = (np.abs(lx) <= rects[:, 2, None, None] / 2) & (np.abs(ly) <= rects[:, 3, None, None] / 2)
        out[0] = np.maximum(out[0], np.any(inside, axis=0))

    ox, oy, orad = (float(v) for v in snapshot["objective"])
    out[1] = (gx - ox) ** 2 + (gy - oy) ** 2 <= orad**2

    for channel, team in ((2, "attacker"), (3, "defender")):
        units = [u for u in snapshot["units"] if u["team"] == team and u["alive"]]
        if not units:
            continue
        pos = np.array([[float(u["x"]), float(u["y"]), float(u["radius"])] for u in units])
        d2 = (gx[None] - pos[:, 0, None, None]) ** 2 + (gy[None] - pos[:, 1, None, None]) ** 2
        body = np.any(d2 <= pos[:, 2, None, None] ** 2, axis=0)
        # the cell holding each centre, so units smaller than a cell still show
        col = np.clip((pos[:, 0] / cell_w).astype(np.int64), 0, size - 1)
        row = np.clip(((arena_h - pos[:, 1]) / cell_h).astype(np.int64), 0, size - 1)
        body[row, col] = True
        out[channel] = body
    return out


def require_pygame(purpose: str = "a window") -> Any:
    """Import pygame or raise a :class:`ModuleNotFoundError` that says how to install it.

    :param purpose: what pygame is needed for, for the message
    :return: the ``pygame`` module
    """
    from mission_gym.optional import require

    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    return require("pygame", purpose)


class HumanWindow:
    """A pygame window showing frames, for ``render_mode="human"`` and manual play.

    :param title: window caption
    :param fps: frames per second to pace :meth:`show` at (``None`` or 0: as fast as called)
    """

    def __init__(self, title: str = "Mission Gym", fps: float | None = None) -> None:
        self.pygame = require_pygame('render_mode="human"')
        self.title = title
        self.fps = fps
        self.closed = False
        self._screen: Any = None
        self._clock: Any = None

    def show(self, frame: np.ndarray) -> list[Any]:
        """Draw ``frame`` (H, W, 3 uint8), pace to ``fps`` and return the window's pending events.

        A window-close event sets :attr:`closed` (and is returned like any other event).

        :param frame: the RGB image to show
        :return: the pygame events received since the last call
        """
        pg = self.pygame
        height, width = frame.shape[:2]
        if self._screen is None or self._screen.get_size() != (width, height):
            if not pg.display.get_init():
                pg.display.init()
            self._screen = pg.display.set_mode((width, height))
            pg.display.set_caption(self.title)
            self._clock = pg.time.Clock()
        # surfarray is indexed (x, y): swap the image's row and column axes
        pg.surfarray.blit_array(self._screen, np.ascontiguousarray(frame.transpose(1, 0, 2)))
        pg.display.flip()
        events = pg.event.get()
        if any(e.type == pg.QUIT for e in events):
            self.closed = True
        if self.fps:
            self._clock.tick(self.fps)
        return events

    def close(self) -> None:
        """Close the window (safe to call twice)."""
        if self._screen is not None:
            self.pygame.display.quit()
            self._screen = None
