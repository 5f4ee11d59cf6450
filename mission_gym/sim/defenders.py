"""Scripted defenders: one decision per env step from the defender team's (fog-of-war) knowledge,
per-episode mode, reaction delay and jittered waypoints."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from mission_gym.sim.geometry import overlaps_obstacle, wrap_angle
from mission_gym.sim.layout import (
    A_EVER,
    A_SEEN_T,
    A_SINCE,
    A_VIS,
    A_X,
    A_Y,
    C_AIM_NOISE,
    C_ENGAGE,
    C_GUARD_R,
    C_MEMORY,
    C_RANDOM_MOVE,
    C_TAG_HALF,
    C_TAG_ON,
    C_V_CHASE,
    C_V_INTERCEPT,
    C_V_PATROL,
    C_WP_TOL,
    D_DELAY,
    D_MODE,
    D_WP,
    E_OBJ_X,
    E_OBJ_Y,
    E_TIME,
    MODE_GUARD,
    MODE_INTERCEPT,
    P_AIR,
    P_MAX_SPEED,
    P_RADIUS,
    U_ALIVE,
    U_ALT,
    U_HEAD,
    U_TAG_CD,
    U_TAG_REQ,
    U_TGT_HEAD,
    U_TGT_SPEED,
    U_X,
    U_Y,
)
from mission_gym.sim.rng import normal, uniform, uniform_range

_PROBE = 5.0  # m ahead that a ground defender checks for obstacles before committing to a heading
_DETOURS = np.array([0.0, 45.0, -45.0, 90.0, -90.0, 135.0, -135.0]) * (math.pi / 180.0)


@njit(cache=True)
def _steer(
    u: np.ndarray, up: np.ndarray, e: int, i: int, heading: float, speed: float, circles: np.ndarray, rects: np.ndarray
) -> None:
    """Command ``heading`` at ``speed``, turning aside when a ground unit would drive into an obstacle."""
    if speed > 0.0 and (up[i, P_AIR] == 0.0 or u[e, i, U_ALT] == 0.0):
        x = u[e, i, U_X]
        y = u[e, i, U_Y]
        r = up[i, P_RADIUS]
        for k in range(_DETOURS.shape[0]):
            h = heading + _DETOURS[k]
            if not overlaps_obstacle(x + _PROBE * math.cos(h), y + _PROBE * math.sin(h), r, circles, rects):
                heading = h
                break
    u[e, i, U_TGT_HEAD] = wrap_angle(heading)
    u[e, i, U_TGT_SPEED] = speed


# Numba kernel: every defender of one env in one compiled loop; the branches are the defender rules in the
# spec's order (random move, engage, guard, chase or intercept a seen or remembered attacker, patrol), each ending
# the unit's turn.
@njit(cache=True)
def defenders_decide(  # noqa: C901
    u: np.ndarray,
    up: np.ndarray,
    ev: np.ndarray,
    dm: np.ndarray,
    wps: np.ndarray,
    n_wp: np.ndarray,
    ka: np.ndarray,
    e: int,
    n_a: int,
    circles: np.ndarray,
    rects: np.ndarray,
    cfg: np.ndarray,
    rng: np.ndarray,
) -> None:
    """Set target heading/speed and tag requests of env ``e``'s defenders."""
    t = ev[e, E_TIME]
    for d in range(dm.shape[1]):
        i = n_a + d
        u[e, i, U_TAG_REQ] = 0.0
        if u[e, i, U_ALIVE] == 0.0:
            u[e, i, U_TGT_SPEED] = 0.0
            continue
        vmax = up[i, P_MAX_SPEED]
        x = u[e, i, U_X]
        y = u[e, i, U_Y]
        head = u[e, i, U_HEAD]
        if uniform(rng, e) < cfg[C_RANDOM_MOVE]:
            _steer(u, up, e, i, uniform_range(rng, e, -math.pi, math.pi), cfg[C_V_PATROL] * vmax, circles, rects)
            continue
        # the closest attacker the team sees now, once this defender's reaction delay has passed
        delay = dm[e, d, D_DELAY]
        best = -1
        best_d = np.inf
        for a in range(n_a):
            if u[e, a, U_ALIVE] == 0.0 or ka[e, a, A_VIS] == 0.0 or t - ka[e, a, A_SINCE] < delay - 1e-9:
                continue
            dist = math.hypot(ka[e, a, A_X] - x, ka[e, a, A_Y] - y)
            if dist < best_d:
                best = a
                best_d = dist
        noise = cfg[C_AIM_NOISE] * normal(rng, e)
        if best >= 0 and cfg[C_TAG_ON] > 0.0 and best_d <= cfg[C_ENGAGE] and u[e, i, U_TAG_CD] <= 0.0:
            bearing = math.atan2(ka[e, best, A_Y] - y, ka[e, best, A_X] - x)
            if abs(wrap_angle(bearing - head)) <= cfg[C_TAG_HALF]:
                u[e, i, U_TAG_REQ] = 1.0  # stop and shoot
                u[e, i, U_TGT_HEAD] = head
            else:
                u[e, i, U_TGT_HEAD] = wrap_angle(bearing + noise)  # turn to face it
            u[e, i, U_TGT_SPEED] = 0.0
            continue
        mode = int(dm[e, d, D_MODE])
        if mode == MODE_GUARD:
            ox = ev[e, E_OBJ_X] - x
            oy = ev[e, E_OBJ_Y] - y
            if math.hypot(ox, oy) > cfg[C_GUARD_R]:
                _steer(u, up, e, i, math.atan2(oy, ox) + noise, cfg[C_V_PATROL] * vmax, circles, rects)
            else:
                u[e, i, U_TGT_SPEED] = 0.0
                if best >= 0:
                    u[e, i, U_TGT_HEAD] = wrap_angle(math.atan2(ka[e, best, A_Y] - y, ka[e, best, A_X] - x) + noise)
            continue
        speed = (cfg[C_V_INTERCEPT] if mode == MODE_INTERCEPT else cfg[C_V_CHASE]) * vmax
        target = best
        if target < 0:  # the freshest remembered attacker
            freshest = -np.inf
            for a in range(n_a):
                if u[e, a, U_ALIVE] == 0.0 or ka[e, a, A_EVER] == 0.0:
                    continue
                if ka[e, a, A_VIS] > 0.0 and t - ka[e, a, A_SINCE] < delay - 1e-9:
                    continue  # seen now, but this defender has not reacted to it yet
                seen_t = ka[e, a, A_SEEN_T]
                if t - seen_t <= cfg[C_MEMORY] + 1e-9 and seen_t > freshest:
                    freshest = seen_t
                    target = a
        if target >= 0:
            tx = ka[e, target, A_X] - x
            ty = ka[e, target, A_Y] - y
            if math.hypot(tx, ty) < 0.5:  # arrived at a remembered spot: look around there
                u[e, i, U_TGT_SPEED] = 0.0
            else:
                _steer(u, up, e, i, math.atan2(ty, tx) + noise, speed, circles, rects)
            continue
        nw = n_wp[d]
        if nw == 0:
            u[e, i, U_TGT_SPEED] = 0.0
            continue
        k = int(dm[e, d, D_WP])
        wx = wps[e, d, k, 0] - x
        wy = wps[e, d, k, 1] - y
        if math.hypot(wx, wy) < cfg[C_WP_TOL]:
            k = (k + 1) % nw
            dm[e, d, D_WP] = k
            wx = wps[e, d, k, 0] - x
            wy = wps[e, d, k, 1] - y
        _steer(u, up, e, i, math.atan2(wy, wx) + noise, cfg[C_V_PATROL] * vmax, circles, rects)
