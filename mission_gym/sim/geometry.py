"""Geometry kernels: obstacle overlap, line of sight and ray casts against circles and rotated
rectangles. Obstacles come as ``circles (C, 3) = x, y, r`` and ``rects (R, 6) = x, y, half_w,
half_h, cos(angle), sin(angle)``."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

RECT_X, RECT_Y, RECT_HW, RECT_HH, RECT_COS, RECT_SIN = 0, 1, 2, 3, 4, 5


def pack_rects(rects: list[tuple[float, float, float, float, float]]) -> np.ndarray:
    """``(x, y, width, height, angle_deg)`` tuples -> the ``(R, 6)`` array the kernels take."""
    out = np.zeros((len(rects), 6))
    for i, (x, y, w, h, angle) in enumerate(rects):
        a = math.radians(angle)
        out[i] = (x, y, 0.5 * w, 0.5 * h, math.cos(a), math.sin(a))
    return out


@njit(cache=True)
def wrap_angle(a: float) -> float:
    """Angle in (-pi, pi]."""
    two_pi = 2.0 * math.pi
    a = (a + math.pi) - two_pi * math.floor((a + math.pi) / two_pi)
    return a - math.pi


@njit(cache=True, inline="always")
def _circle_overlap(x: float, y: float, radius: float, circles: np.ndarray, i: int) -> bool:
    dx = x - circles[i, 0]
    dy = y - circles[i, 1]
    rr = circles[i, 2] + radius
    return dx * dx + dy * dy < rr * rr


@njit(cache=True, inline="always")
def _rect_overlap(x: float, y: float, radius: float, rects: np.ndarray, i: int) -> bool:
    dx = x - rects[i, RECT_X]
    dy = y - rects[i, RECT_Y]
    c = rects[i, RECT_COS]
    s = rects[i, RECT_SIN]
    lx = c * dx + s * dy
    ly = -s * dx + c * dy
    hw = rects[i, RECT_HW]
    hh = rects[i, RECT_HH]
    ex = lx - min(max(lx, -hw), hw)
    ey = ly - min(max(ly, -hh), hh)
    return ex * ex + ey * ey < radius * radius


@njit(cache=True)
def overlaps_obstacle(x: float, y: float, radius: float, circles: np.ndarray, rects: np.ndarray) -> bool:
    """Whether a disc of ``radius`` at (x, y) overlaps any obstacle."""
    for i in range(circles.shape[0]):
        if _circle_overlap(x, y, radius, circles, i):
            return True
    for i in range(rects.shape[0]):
        if _rect_overlap(x, y, radius, rects, i):
            return True
    return False


@njit(cache=True)
def overlaps_listed(
    x: float,
    y: float,
    radius: float,
    circles: np.ndarray,
    rects: np.ndarray,
    near_c: np.ndarray,
    n_c: int,
    near_r: np.ndarray,
    n_r: int,
) -> bool:
    """:func:`overlaps_obstacle` restricted to the listed obstacles (see :func:`near_obstacles`)."""
    for n in range(n_c):
        if _circle_overlap(x, y, radius, circles, near_c[n]):
            return True
    for n in range(n_r):
        if _rect_overlap(x, y, radius, rects, near_r[n]):
            return True
    return False


@njit(cache=True)
def near_obstacles(
    x: float, y: float, reach: float, circles: np.ndarray, rects: np.ndarray, near_c: np.ndarray, near_r: np.ndarray
) -> tuple[int, int]:
    """List into ``near_c``/``near_r`` the obstacles that come within ``reach`` of (x, y); returns their counts.

    Hot loops test only these, which is most of the speed of the movement and lidar kernels.
    """
    n_c = 0
    for i in range(circles.shape[0]):
        r = reach + circles[i, 2]
        if (circles[i, 0] - x) ** 2 + (circles[i, 1] - y) ** 2 < r * r:
            near_c[n_c] = i
            n_c += 1
    n_r = 0
    for i in range(rects.shape[0]):
        r = reach + math.hypot(rects[i, RECT_HW], rects[i, RECT_HH])
        if (rects[i, RECT_X] - x) ** 2 + (rects[i, RECT_Y] - y) ** 2 < r * r:
            near_r[n_r] = i
            n_r += 1
    return n_c, n_r


@njit(cache=True)
def _segment_hits_box(x0: float, y0: float, x1: float, y1: float, hw: float, hh: float) -> bool:
    """Slab test of the segment (x0,y0)-(x1,y1) against the box [-hw,hw] x [-hh,hh]."""
    t0 = 0.0
    t1 = 1.0
    dx = x1 - x0
    dy = y1 - y0
    for axis in range(2):
        p = x0 if axis == 0 else y0
        d = dx if axis == 0 else dy
        h = hw if axis == 0 else hh
        if abs(d) < 1e-12:
            if p < -h or p > h:
                return False
        else:
            ta = (-h - p) / d
            tb = (h - p) / d
            if ta > tb:
                ta, tb = tb, ta
            t0 = max(t0, ta)
            t1 = min(t1, tb)
            if t0 > t1:
                return False
    return True


@njit(cache=True)
def segment_blocked(x0: float, y0: float, x1: float, y1: float, circles: np.ndarray, rects: np.ndarray) -> bool:
    """Whether the segment between two points crosses any obstacle (line of sight is blocked)."""
    dx = x1 - x0
    dy = y1 - y0
    len2 = dx * dx + dy * dy
    for i in range(circles.shape[0]):
        cx = circles[i, 0] - x0
        cy = circles[i, 1] - y0
        t = 0.0
        if len2 > 0.0:
            t = min(max((cx * dx + cy * dy) / len2, 0.0), 1.0)
        ex = cx - t * dx
        ey = cy - t * dy
        r = circles[i, 2]
        if ex * ex + ey * ey < r * r:
            return True
    for i in range(rects.shape[0]):
        c = rects[i, RECT_COS]
        s = rects[i, RECT_SIN]
        ax = x0 - rects[i, RECT_X]
        ay = y0 - rects[i, RECT_Y]
        bx = x1 - rects[i, RECT_X]
        by = y1 - rects[i, RECT_Y]
        if _segment_hits_box(
            c * ax + s * ay, -s * ax + c * ay, c * bx + s * by, -s * bx + c * by, rects[i, RECT_HW], rects[i, RECT_HH]
        ):
            return True
    return False


# Numba kernel in the lidar's inner loop: walls, circles and rectangles in one compiled pass, the branches are
# the slab and quadratic tests.
@njit(cache=True)
def _ray_cast(  # noqa: C901
    x: float,
    y: float,
    dx: float,
    dy: float,
    max_range: float,
    circles: np.ndarray,
    rects: np.ndarray,
    width: float,
    height: float,
    near_c: np.ndarray,
    n_c: int,
    near_r: np.ndarray,
    n_r: int,
) -> float:
    """Distance along the unit ray (dx, dy) to the first wall or listed obstacle, capped at ``max_range``."""
    best = max_range
    # arena walls
    if dx > 1e-12:
        best = min(best, (width - x) / dx)
    elif dx < -1e-12:
        best = min(best, -x / dx)
    if dy > 1e-12:
        best = min(best, (height - y) / dy)
    elif dy < -1e-12:
        best = min(best, -y / dy)
    for n in range(n_c):
        i = near_c[n]
        ox = x - circles[i, 0]
        oy = y - circles[i, 1]
        r = circles[i, 2]
        b = ox * dx + oy * dy
        c = ox * ox + oy * oy - r * r
        if c <= 0.0:
            return 0.0  # inside the obstacle
        if b >= 0.0:
            continue  # outside and pointing away
        disc = b * b - c
        if disc >= 0.0:
            t = -b - math.sqrt(disc)
            if t < best:
                best = t
    for n in range(n_r):
        i = near_r[n]
        c = rects[i, RECT_COS]
        s = rects[i, RECT_SIN]
        px = x - rects[i, RECT_X]
        py = y - rects[i, RECT_Y]
        lx = c * px + s * py
        ly = -s * px + c * py
        ldx = c * dx + s * dy
        ldy = -s * dx + c * dy
        hw = rects[i, RECT_HW]
        hh = rects[i, RECT_HH]
        t0 = 0.0
        t1 = best
        hit = True
        for axis in range(2):
            p = lx if axis == 0 else ly
            d = ldx if axis == 0 else ldy
            h = hw if axis == 0 else hh
            if abs(d) < 1e-12:
                if p < -h or p > h:
                    hit = False
                    break
            else:
                ta = (-h - p) / d
                tb = (h - p) / d
                if ta > tb:
                    ta, tb = tb, ta
                t0 = max(t0, ta)
                t1 = min(t1, tb)
                if t0 > t1:
                    hit = False
                    break
        if hit and t0 < best:
            best = t0
    return max(best, 0.0)


@njit(cache=True)
def ray_fan(
    x: float,
    y: float,
    heading: float,
    n_rays: int,
    max_range: float,
    circles: np.ndarray,
    rects: np.ndarray,
    width: float,
    height: float,
    near_c: np.ndarray,
    near_r: np.ndarray,
    out: np.ndarray,
) -> None:
    """``n_rays`` evenly spaced rays from ``heading``, written to ``out[:n_rays]`` as ranges / max_range.

    Obstacles out of reach are dropped once for the whole fan, so each ray tests only the few
    that can matter (``near_c``/``near_r`` are scratch index arrays at least as long as the obstacle lists).
    """
    n_c, n_r = near_obstacles(x, y, max_range, circles, rects, near_c, near_r)
    dx = math.cos(heading)
    dy = math.sin(heading)
    cs = math.cos(2.0 * math.pi / n_rays)
    ss = math.sin(2.0 * math.pi / n_rays)
    for r in range(n_rays):
        out[r] = _ray_cast(x, y, dx, dy, max_range, circles, rects, width, height, near_c, n_c, near_r, n_r) / max_range
        dx, dy = dx * cs - dy * ss, dx * ss + dy * cs  # rotate to the next ray without more trig
