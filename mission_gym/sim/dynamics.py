"""Unit dynamics: commands to targets, turning, acceleration, movement, obstacle collision and
arena bounds, with integrity degradation."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from mission_gym.sim.geometry import near_obstacles, overlaps_listed, wrap_angle
from mission_gym.sim.layout import (
    A_SCAN,
    A_TAG,
    C_CMD_SPEED,
    C_DT,
    C_H,
    C_MOB_FRAC,
    C_REPEAT,
    C_SCAN_CD,
    C_SCAN_DUR,
    C_SCAN_ON,
    C_TAG_ON,
    C_W,
    P_ACCEL,
    P_AIR,
    P_INTEG0,
    P_MAX_SPEED,
    P_RADIUS,
    P_TURN,
    U_ALIVE,
    U_ALT,
    U_COLLIDED,
    U_DIST,
    U_HEAD,
    U_INTEG,
    U_SCAN_CD,
    U_SCAN_T,
    U_SPEED,
    U_TAG_CD,
    U_TAG_REQ,
    U_TGT_HEAD,
    U_TGT_SPEED,
    U_X,
    U_Y,
)

# compass headings of actions 1..8 (N, NE, E, SE, S, SW, W, NW), radians CCW from east
_DIRECTIONS = np.array([90.0, 45.0, 0.0, -45.0, -90.0, -135.0, 180.0, 135.0]) * (math.pi / 180.0)


@njit(cache=True)
def mobility_factor(u: np.ndarray, up: np.ndarray, e: int, i: int, cfg: np.ndarray) -> float:
    """0.5 once integrity has fallen to the mobility threshold, else 1."""
    return 0.5 if u[e, i, U_INTEG] <= cfg[C_MOB_FRAC] * up[i, P_INTEG0] else 1.0


@njit(cache=True)
def count_down(timer: float, dt: float) -> float:
    """A timer after one tick; what float rounding leaves (3.0 - 60 * 0.05 is about 2e-15) counts as 0,
    so a 3 s cooldown is over after exactly 60 ticks of 0.05 s."""
    timer -= dt
    return timer if timer > 1e-9 else 0.0


@njit(cache=True)
def apply_attacker_command(u: np.ndarray, up: np.ndarray, e: int, i: int, action: int, cfg: np.ndarray) -> None:
    """Turn one agent command into target heading/speed, a tag request or a scan."""
    u[e, i, U_TAG_REQ] = 0.0
    if u[e, i, U_ALIVE] == 0.0:
        u[e, i, U_TGT_SPEED] = 0.0
        return
    if 1 <= action <= 8:
        u[e, i, U_TGT_HEAD] = _DIRECTIONS[action - 1]
        u[e, i, U_TGT_SPEED] = cfg[C_CMD_SPEED] * up[i, P_MAX_SPEED]
        return
    # STOP, TAG and SCAN all stop the unit; a switched-off feature acts as STOP
    u[e, i, U_TGT_HEAD] = u[e, i, U_HEAD]
    u[e, i, U_TGT_SPEED] = 0.0
    if action == A_TAG and cfg[C_TAG_ON] > 0.0:
        u[e, i, U_TAG_REQ] = 1.0
    elif action == A_SCAN and cfg[C_SCAN_ON] > 0.0 and u[e, i, U_SCAN_CD] <= 0.0:
        u[e, i, U_SCAN_T] = cfg[C_SCAN_DUR]
        u[e, i, U_SCAN_CD] = cfg[C_SCAN_CD]


@njit(cache=True)
def list_near_obstacles(
    u: np.ndarray,
    up: np.ndarray,
    e: int,
    circles: np.ndarray,
    rects: np.ndarray,
    cfg: np.ndarray,
    near_c: np.ndarray,
    n_c: np.ndarray,
    near_r: np.ndarray,
    n_r: np.ndarray,
) -> None:
    """Per unit of env ``e``, the obstacles it could touch during this env step (``near_*[unit, :n_*[unit]]``)."""
    travel = cfg[C_DT] * cfg[C_REPEAT]
    for i in range(u.shape[1]):
        reach = up[i, P_RADIUS] + up[i, P_MAX_SPEED] * travel + 1e-6
        n_c[i], n_r[i] = near_obstacles(u[e, i, U_X], u[e, i, U_Y], reach, circles, rects, near_c[i], near_r[i])


@njit(cache=True)
def tick_units(
    u: np.ndarray,
    up: np.ndarray,
    e: int,
    circles: np.ndarray,
    rects: np.ndarray,
    cfg: np.ndarray,
    near_c: np.ndarray,
    n_c: np.ndarray,
    near_r: np.ndarray,
    n_r: np.ndarray,
) -> None:
    """Advance every unit of env ``e`` by one physics tick (obstacle lists from :func:`list_near_obstacles`)."""
    dt = cfg[C_DT]
    width = cfg[C_W]
    height = cfg[C_H]
    for i in range(u.shape[1]):
        u[e, i, U_TAG_CD] = count_down(u[e, i, U_TAG_CD], dt)
        u[e, i, U_SCAN_CD] = count_down(u[e, i, U_SCAN_CD], dt)
        u[e, i, U_SCAN_T] = count_down(u[e, i, U_SCAN_T], dt)
        if u[e, i, U_ALIVE] == 0.0:
            u[e, i, U_SPEED] = 0.0
            continue
        f = mobility_factor(u, up, e, i, cfg)
        max_speed = up[i, P_MAX_SPEED] * f
        # heading toward target at no more than the turn rate
        head = u[e, i, U_HEAD]
        diff = wrap_angle(u[e, i, U_TGT_HEAD] - head)
        max_turn = up[i, P_TURN] * f * dt
        if abs(diff) <= max_turn:
            head = u[e, i, U_TGT_HEAD]
        else:
            head = head + max_turn if diff > 0.0 else head - max_turn
        head = wrap_angle(head)
        u[e, i, U_HEAD] = head
        # speed toward target at no more than the acceleration, within [0, max]
        speed = u[e, i, U_SPEED]
        target = min(u[e, i, U_TGT_SPEED], max_speed)
        max_dv = up[i, P_ACCEL] * f * dt
        dv = target - speed
        if dv > max_dv:
            dv = max_dv
        elif dv < -max_dv:
            dv = -max_dv
        speed = min(max(speed + dv, 0.0), max_speed)
        if speed <= 0.0:
            u[e, i, U_SPEED] = 0.0
            continue
        x = u[e, i, U_X]
        y = u[e, i, U_Y]
        r = up[i, P_RADIUS]
        nx = min(max(x + speed * math.cos(head) * dt, r), width - r)
        ny = min(max(y + speed * math.sin(head) * dt, r), height - r)
        blocks = up[i, P_AIR] == 0.0 or u[e, i, U_ALT] == 0.0
        if blocks and overlaps_listed(nx, ny, r, circles, rects, near_c[i], n_c[i], near_r[i], n_r[i]):
            u[e, i, U_SPEED] = 0.0
            u[e, i, U_COLLIDED] = 1.0  # one event per unit per env step, however many ticks
            continue
        u[e, i, U_SPEED] = speed
        u[e, i, U_DIST] += math.hypot(nx - x, ny - y)
        u[e, i, U_X] = nx
        u[e, i, U_Y] = ny
