"""Sensors and detection: range, field of view, line of sight, radar noise, degradation and scan,
and each team's fog-of-war knowledge of the other."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from mission_gym.sim.geometry import segment_blocked, wrap_angle
from mission_gym.sim.layout import (
    A_EVER,
    A_SEEN_T,
    A_SINCE,
    A_VIS,
    A_X,
    A_Y,
    C_H,
    C_SCAN_MULT,
    C_SENS_FRAC,
    C_TAG_CD,
    C_W,
    E_TIME,
    K_EVER,
    K_HEAD,
    K_INTEG,
    K_SEEN_T,
    K_SPEED,
    K_TAG_CD,
    K_VIS,
    K_X,
    K_Y,
    KIND_RADAR,
    P_AIR,
    P_INTEG0,
    P_MAX_SPEED,
    S_HALF_FOV,
    S_KIND,
    S_LOS,
    S_RANGE,
    S_SIG_B,
    S_SIG_R,
    U_ALIVE,
    U_ALT,
    U_DETECTED,
    U_HEAD,
    U_INTEG,
    U_SCAN_T,
    U_SPEED,
    U_TAG_CD,
    U_X,
    U_Y,
)
from mission_gym.sim.rng import normal

NOT_SEEN, SEEN_EXACT, SEEN_RADAR = 0, 1, 2


@njit(cache=True)
def both_grounded(u: np.ndarray, up: np.ndarray, e: int, i: int, j: int) -> bool:
    """Line of sight matters only between two units that are both at altitude 0."""
    return (up[i, P_AIR] == 0.0 or u[e, i, U_ALT] == 0.0) and (up[j, P_AIR] == 0.0 or u[e, j, U_ALT] == 0.0)


# Numba kernel called per unit pair: each sensor's rules (range, field of view, line of sight, kind) in the
# spec's order, one compiled loop that stops at the first exact sighting.
@njit(cache=True)
def unit_sees(  # noqa: C901
    u: np.ndarray,
    up: np.ndarray,
    sp: np.ndarray,
    e: int,
    i: int,
    j: int,
    circles: np.ndarray,
    rects: np.ndarray,
    cfg: np.ndarray,
) -> tuple[int, int]:
    """Whether unit ``i`` detects unit ``j``: (NOT_SEEN | SEEN_EXACT | SEEN_RADAR, radar slot used)."""
    dx = u[e, j, U_X] - u[e, i, U_X]
    dy = u[e, j, U_Y] - u[e, i, U_Y]
    dist = math.hypot(dx, dy)
    bearing = math.atan2(dy, dx)
    off = abs(wrap_angle(bearing - u[e, i, U_HEAD]))
    scale = 1.0
    if u[e, i, U_INTEG] <= cfg[C_SENS_FRAC] * up[i, P_INTEG0]:
        scale *= 0.5
    if u[e, i, U_SCAN_T] > 0.0:
        scale *= cfg[C_SCAN_MULT]
    los_state = -1  # -1 unknown, 0 clear, 1 blocked
    radar_slot = -1
    for k in range(sp.shape[1]):
        kind = sp[i, k, S_KIND]
        if kind < 0.0:
            continue
        if dist > sp[i, k, S_RANGE] * scale:
            continue
        if off > sp[i, k, S_HALF_FOV] + 1e-12:
            continue
        if sp[i, k, S_LOS] > 0.0 and both_grounded(u, up, e, i, j):
            if los_state < 0:
                los_state = 1 if segment_blocked(u[e, i, U_X], u[e, i, U_Y], u[e, j, U_X], u[e, j, U_Y], circles, rects) else 0
            if los_state == 1:
                continue
        if int(kind) == KIND_RADAR:
            if radar_slot < 0:
                radar_slot = k
        else:
            return SEEN_EXACT, -1
    if radar_slot >= 0:
        return SEEN_RADAR, radar_slot
    return NOT_SEEN, -1


@njit(cache=True)
def team_detects(
    u: np.ndarray,
    up: np.ndarray,
    sp: np.ndarray,
    e: int,
    lo: int,
    hi: int,
    j: int,
    circles: np.ndarray,
    rects: np.ndarray,
    cfg: np.ndarray,
    rng: np.ndarray,
) -> tuple[bool, float, float]:
    """Whether any alive unit in ``[lo, hi)`` detects unit ``j``, and the position it reports
    (exact from a lidar or camera, else noisy in range and bearing from the first radar)."""
    radar_i = -1
    radar_k = -1
    for i in range(lo, hi):
        if u[e, i, U_ALIVE] == 0.0:
            continue
        seen, slot = unit_sees(u, up, sp, e, i, j, circles, rects, cfg)
        if seen == SEEN_EXACT:
            return True, u[e, j, U_X], u[e, j, U_Y]
        if seen == SEEN_RADAR and radar_i < 0:
            radar_i = i
            radar_k = slot
    if radar_i < 0:
        return False, 0.0, 0.0
    dx = u[e, j, U_X] - u[e, radar_i, U_X]
    dy = u[e, j, U_Y] - u[e, radar_i, U_Y]
    r = max(math.hypot(dx, dy) + sp[radar_i, radar_k, S_SIG_R] * normal(rng, e), 0.0)
    b = math.atan2(dy, dx) + sp[radar_i, radar_k, S_SIG_B] * normal(rng, e)
    x = min(max(u[e, radar_i, U_X] + r * math.cos(b), 0.0), cfg[C_W])  # reports never leave the arena
    y = min(max(u[e, radar_i, U_Y] + r * math.sin(b), 0.0), cfg[C_H])
    return True, x, y


@njit(cache=True)
def update_detection(
    u: np.ndarray,
    up: np.ndarray,
    sp: np.ndarray,
    ev: np.ndarray,
    kd: np.ndarray,
    ka: np.ndarray,
    e: int,
    n_a: int,
    circles: np.ndarray,
    rects: np.ndarray,
    cfg: np.ndarray,
    rng: np.ndarray,
) -> bool:
    """Refresh both teams' knowledge of env ``e``; returns whether any attacker is detected."""
    n_u = u.shape[1]
    t = ev[e, E_TIME]
    any_attacker_seen = False
    for a in range(n_a):
        seen = False
        x = 0.0
        y = 0.0
        if u[e, a, U_ALIVE] > 0.0:
            seen, x, y = team_detects(u, up, sp, e, n_a, n_u, a, circles, rects, cfg, rng)
        u[e, a, U_DETECTED] = 1.0 if seen else 0.0
        if seen:
            any_attacker_seen = True
            if ka[e, a, A_VIS] == 0.0:
                ka[e, a, A_SINCE] = t
            ka[e, a, A_VIS] = 1.0
            ka[e, a, A_EVER] = 1.0
            ka[e, a, A_SEEN_T] = t
            ka[e, a, A_X] = x
            ka[e, a, A_Y] = y
        else:
            ka[e, a, A_VIS] = 0.0
    for j in range(n_a, n_u):
        d = j - n_a
        seen = False
        x = 0.0
        y = 0.0
        if u[e, j, U_ALIVE] > 0.0:
            seen, x, y = team_detects(u, up, sp, e, 0, n_a, j, circles, rects, cfg, rng)
        u[e, j, U_DETECTED] = 1.0 if seen else 0.0
        if seen:
            kd[e, d, K_VIS] = 1.0
            kd[e, d, K_EVER] = 1.0
            kd[e, d, K_SEEN_T] = t
            kd[e, d, K_X] = x
            kd[e, d, K_Y] = y
            kd[e, d, K_HEAD] = u[e, j, U_HEAD]
            kd[e, d, K_INTEG] = u[e, j, U_INTEG] / up[j, P_INTEG0]
            kd[e, d, K_SPEED] = u[e, j, U_SPEED] / up[j, P_MAX_SPEED]
            kd[e, d, K_TAG_CD] = u[e, j, U_TAG_CD] / cfg[C_TAG_CD] if cfg[C_TAG_CD] > 0.0 else 0.0
        else:
            kd[e, d, K_VIS] = 0.0
            if u[e, j, U_ALIVE] == 0.0 and kd[e, d, K_EVER] > 0.0:
                kd[e, d, K_INTEG] = 0.0  # the attackers learn of a defender's loss
    return any_attacker_seen
