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


@njit(cache=True)
def overlaps_obstacle(x: float, y: float, radius: float, circles: np.ndarray, rects: np.ndarray) -> bool:
    """Whether a disc of ``radius`` at (x, y) overlaps any obstacle."""
    for i in range(circles.shape[0]):
        dx = x - circles[i, 0]
        dy = y - circles[i, 1]
        rr = circles[i, 2] + radius
        if dx * dx + dy * dy < rr * rr:
            return True
    for i in range(rects.shape[0]):
        dx = x - rects[i, RECT_X]
        dy = y - rects[i, RECT_Y]
        c = rects[i, RECT_COS]
        s = rects[i, RECT_SIN]
        lx = c * dx + s * dy
        ly = -s * dx + c * dy
        hw = rects[i, RECT_HW]
        hh = rects[i, RECT_HH]
        qx = min(max(lx, -hw), hw)
        qy = min(max(ly, -hh), hh)
        ex = lx - qx
        ey = ly - qy
        if ex * ex + ey * ey < radius * radius:
            return True
    return False


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


@njit(cache=True)
def ray_distance(
    x: float, y: float, angle: float, max_range: float, circles: np.ndarray, rects: np.ndarray, width: float, height: float
) -> float:
    """Distance along a ray from (x, y) to the first obstacle or arena wall, capped at ``max_range``."""
    dx = math.cos(angle)
    dy = math.sin(angle)
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
    for i in range(circles.shape[0]):
        ox = x - circles[i, 0]
        oy = y - circles[i, 1]
        r = circles[i, 2]
        b = ox * dx + oy * dy
        c = ox * ox + oy * oy - r * r
        if c <= 0.0:
            return 0.0  # inside the obstacle
        disc = b * b - c
        if disc >= 0.0:
            t = -b - math.sqrt(disc)
            if 0.0 <= t < best:
                best = t
    for i in range(rects.shape[0]):
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
