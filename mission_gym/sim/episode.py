"""Episode bookkeeping: scenario reset with randomisation, capture, the reward terms, the four
outcomes and the episode metrics."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from mission_gym.sim.geometry import overlaps_obstacle
from mission_gym.sim.layout import (
    C_ATT_JIT,
    C_CAPTURE_TIME,
    C_CONTESTED,
    C_DEF_JIT,
    C_DELAY_HI,
    C_DELAY_LO,
    C_DELAY_ON,
    C_H,
    C_MAX_STEPS,
    C_MODES_ON,
    C_OBJ_JIT,
    C_OBJ_R,
    C_OBJ_X,
    C_OBJ_Y,
    C_P_GUARD,
    C_P_PATROL,
    C_SPREAD_DIST,
    C_STALL_CAP,
    C_STALL_DIST,
    C_STALL_S,
    C_W,
    C_WP_JIT,
    D_DELAY,
    D_MODE,
    D_WP,
    E_ATT_DISABLED,
    E_BEST_D,
    E_CAPTURE,
    E_COLLISIONS,
    E_DEF_DISABLED,
    E_DETECTED_STEPS,
    E_FIRST_DETECTION,
    E_IN_ZONE,
    E_INTEG_LOST,
    E_MARK_CAP,
    E_MARK_D,
    E_MARK_T,
    E_MIN_DEF_DIST_N,
    E_MIN_DEF_DIST_SUM,
    E_OBJ_X,
    E_OBJ_Y,
    E_OUTCOME,
    E_PREV_D,
    E_RINGS,
    E_STEP,
    E_TAG_ATT_A,
    E_TAG_ATT_D,
    E_TAG_HIT_A,
    E_TAG_HIT_D,
    E_TIME,
    E_TIME_IN_ZONE,
    E_TIME_TO_CAPTURE,
    E_ZONE_ENTERED,
    MODE_GUARD,
    MODE_INTERCEPT,
    MODE_PATROL,
    O_ALL_DISABLED,
    O_CAPTURED,
    O_NONE,
    O_STALLED,
    O_TIMEOUT,
    P_AIR,
    P_ALT0,
    P_HEAD0,
    P_INTEG0,
    P_RADIUS,
    P_X0,
    P_Y0,
    R_CAPTURE,
    R_COLLISION,
    R_DEF_DISABLED,
    R_DETECTED,
    R_DIST,
    R_INTEG_LOSS,
    R_OUTCOME,
    R_RING,
    R_SPREAD,
    R_TAG_HIT,
    R_TIME,
    R_UNIT_DISABLED,
    R_WIN,
    R_ZONE,
    U_ALIVE,
    U_ALT,
    U_COLLIDED,
    U_HEAD,
    U_INTEG,
    U_TARGET,
    U_TGT_HEAD,
    U_X,
    U_Y,
)
from mission_gym.sim.rng import uniform, uniform_range

_SPAWN_TRIES = 20


@njit(cache=True)
def closest_attacker_distance(u: np.ndarray, ev: np.ndarray, e: int, n_a: int) -> float:
    """Distance from the objective to the closest alive attacker (inf if none is alive)."""
    best = np.inf
    for a in range(n_a):
        if u[e, a, U_ALIVE] > 0.0:
            best = min(best, math.hypot(u[e, a, U_X] - ev[e, E_OBJ_X], u[e, a, U_Y] - ev[e, E_OBJ_Y]))
    return best


@njit(cache=True)
def reset_env(
    u: np.ndarray,
    up: np.ndarray,
    ev: np.ndarray,
    dm: np.ndarray,
    wps: np.ndarray,
    base_wps: np.ndarray,
    n_wp: np.ndarray,
    kd: np.ndarray,
    ka: np.ndarray,
    rt: np.ndarray,
    rsum: np.ndarray,
    e: int,
    n_a: int,
    circles: np.ndarray,
    rects: np.ndarray,
    cfg: np.ndarray,
    rings: np.ndarray,
    rng: np.ndarray,
) -> None:
    """Start a new episode in env ``e``, drawing all randomisation from its own stream."""
    w = cfg[C_W]
    h = cfg[C_H]
    u[e] = 0.0
    ev[e] = 0.0
    kd[e] = 0.0
    ka[e] = 0.0
    rt[e] = 0.0
    rsum[e] = 0.0
    j = cfg[C_OBJ_JIT]
    ev[e, E_OBJ_X] = min(max(cfg[C_OBJ_X] + uniform_range(rng, e, -j, j), 0.0), w)
    ev[e, E_OBJ_Y] = min(max(cfg[C_OBJ_Y] + uniform_range(rng, e, -j, j), 0.0), h)
    for i in range(u.shape[1]):
        j = cfg[C_ATT_JIT] if i < n_a else cfg[C_DEF_JIT]
        r = up[i, P_RADIUS]
        grounded = up[i, P_AIR] == 0.0 or up[i, P_ALT0] == 0.0
        x = up[i, P_X0]
        y = up[i, P_Y0]
        for _ in range(_SPAWN_TRIES):  # jittered spawns that land in an obstacle are drawn again
            cx = min(max(up[i, P_X0] + uniform_range(rng, e, -j, j), r), w - r)
            cy = min(max(up[i, P_Y0] + uniform_range(rng, e, -j, j), r), h - r)
            if not grounded or not overlaps_obstacle(cx, cy, r, circles, rects):
                x = cx
                y = cy
                break
        u[e, i, U_X] = x
        u[e, i, U_Y] = y
        u[e, i, U_HEAD] = up[i, P_HEAD0]
        u[e, i, U_TGT_HEAD] = up[i, P_HEAD0]
        u[e, i, U_INTEG] = up[i, P_INTEG0]
        u[e, i, U_ALIVE] = 1.0
        u[e, i, U_ALT] = up[i, P_ALT0]
        u[e, i, U_TARGET] = -1.0
    for d in range(dm.shape[1]):
        mode = MODE_PATROL
        if cfg[C_MODES_ON] > 0.0:
            p = uniform(rng, e)
            if p >= cfg[C_P_PATROL]:
                mode = MODE_GUARD if p < cfg[C_P_PATROL] + cfg[C_P_GUARD] else MODE_INTERCEPT
        dm[e, d, D_MODE] = mode
        dm[e, d, D_DELAY] = uniform_range(rng, e, cfg[C_DELAY_LO], cfg[C_DELAY_HI]) if cfg[C_DELAY_ON] > 0.0 else 0.0
        dm[e, d, D_WP] = 0.0
        j = cfg[C_WP_JIT]
        for k in range(n_wp[d]):
            wps[e, d, k, 0] = min(max(base_wps[d, k, 0] + uniform_range(rng, e, -j, j), 0.0), w)
            wps[e, d, k, 1] = min(max(base_wps[d, k, 1] + uniform_range(rng, e, -j, j), 0.0), h)
    d0 = closest_attacker_distance(u, ev, e, n_a)
    ev[e, E_PREV_D] = d0
    ev[e, E_BEST_D] = d0
    ev[e, E_MARK_D] = d0
    n_inside = 0
    for k in range(rings.shape[0]):
        if d0 <= rings[k]:
            n_inside += 1
    ev[e, E_RINGS] = n_inside  # rings already inside at spawn earn nothing
    ev[e, E_OUTCOME] = O_NONE
    ev[e, E_FIRST_DETECTION] = -1.0
    ev[e, E_TIME_TO_CAPTURE] = -1.0


@njit(cache=True)
def capture_tick(u: np.ndarray, up: np.ndarray, ev: np.ndarray, e: int, n_a: int, dt: float, cfg: np.ndarray) -> None:
    """Capture bookkeeping after one physics tick (the clock has already advanced)."""
    ox = ev[e, E_OBJ_X]
    oy = ev[e, E_OBJ_Y]
    r2 = cfg[C_OBJ_R] * cfg[C_OBJ_R]
    inside = False
    for a in range(n_a):
        if u[e, a, U_ALIVE] > 0.0 and (u[e, a, U_X] - ox) ** 2 + (u[e, a, U_Y] - oy) ** 2 <= r2:
            inside = True
            break
    if not inside:
        return
    ev[e, E_IN_ZONE] = 1.0
    ev[e, E_TIME_IN_ZONE] += dt
    if cfg[C_CONTESTED] > 0.0:
        for i in range(n_a, u.shape[1]):
            if u[e, i, U_ALIVE] > 0.0 and (u[e, i, U_X] - ox) ** 2 + (u[e, i, U_Y] - oy) ** 2 <= r2:
                return  # a defender in the zone pauses capture
    target = cfg[C_CAPTURE_TIME]
    cap = ev[e, E_CAPTURE] + dt
    if cap >= target - 1e-9:
        cap = target
        if ev[e, E_TIME_TO_CAPTURE] < 0.0:
            ev[e, E_TIME_TO_CAPTURE] = ev[e, E_TIME]
    ev[e, E_CAPTURE] = cap


# Numba kernel: the end of one env's step in one compiled function; its branches are the reward terms, stall
# and outcome rules in the spec's order, and a call per branch would cost the hot path.
@njit(cache=True)
def finish_step(  # noqa: C901
    u: np.ndarray,
    up: np.ndarray,
    ev: np.ndarray,
    rt: np.ndarray,
    rsum: np.ndarray,
    e: int,
    n_a: int,
    capture_before: float,
    tag_stats: np.ndarray,
    any_detected: bool,
    weights: np.ndarray,
    penalties: np.ndarray,
    rings: np.ndarray,
    cfg: np.ndarray,
) -> float:
    """Reward terms, stall tracking, outcome and metrics at the end of env ``e``'s step; returns the reward."""
    n_u = u.shape[1]
    ev[e, E_STEP] += 1.0
    t = ev[e, E_TIME]
    for k in range(rt.shape[1]):
        rt[e, k] = 0.0

    gained = ev[e, E_CAPTURE] - capture_before
    rt[e, R_CAPTURE] = weights[R_CAPTURE] * gained
    if ev[e, E_IN_ZONE] > 0.0 and ev[e, E_ZONE_ENTERED] == 0.0:
        ev[e, E_ZONE_ENTERED] = 1.0
        rt[e, R_ZONE] = weights[R_ZONE]

    d_now = closest_attacker_distance(u, ev, e, n_a)
    if d_now < np.inf:
        rt[e, R_DIST] = weights[R_DIST] * (ev[e, E_PREV_D] - d_now)
        ev[e, E_PREV_D] = d_now
        n_rings = int(ev[e, E_RINGS])
        while n_rings < rings.shape[0] and d_now <= rings[n_rings]:
            rt[e, R_RING] += weights[R_RING]
            n_rings += 1
        ev[e, E_RINGS] = n_rings

    # formation: at least two alive attackers, every pair farther apart than spread_distance
    n_alive = 0
    spread = True
    lim2 = cfg[C_SPREAD_DIST] * cfg[C_SPREAD_DIST]
    for a in range(n_a):
        if u[e, a, U_ALIVE] == 0.0:
            continue
        n_alive += 1
        for b in range(a + 1, n_a):
            if u[e, b, U_ALIVE] > 0.0 and (u[e, a, U_X] - u[e, b, U_X]) ** 2 + (u[e, a, U_Y] - u[e, b, U_Y]) ** 2 <= lim2:
                spread = False
    if n_alive >= 2 and spread:
        rt[e, R_SPREAD] = weights[R_SPREAD]

    collisions = 0.0
    for a in range(n_a):
        collisions += u[e, a, U_COLLIDED]
    rt[e, R_TAG_HIT] = weights[R_TAG_HIT] * tag_stats[1]
    rt[e, R_DEF_DISABLED] = weights[R_DEF_DISABLED] * tag_stats[6]
    rt[e, R_TIME] = weights[R_TIME]
    rt[e, R_COLLISION] = weights[R_COLLISION] * collisions
    rt[e, R_INTEG_LOSS] = weights[R_INTEG_LOSS] * tag_stats[4]
    rt[e, R_UNIT_DISABLED] = weights[R_UNIT_DISABLED] * tag_stats[5]
    if any_detected:
        rt[e, R_DETECTED] = weights[R_DETECTED]

    # stall: progress is capture gained or the best closest distance improving; never while in the zone
    if d_now < ev[e, E_BEST_D]:
        ev[e, E_BEST_D] = d_now
    if (
        ev[e, E_IN_ZONE] > 0.0
        or ev[e, E_CAPTURE] - ev[e, E_MARK_CAP] >= cfg[C_STALL_CAP]
        or ev[e, E_MARK_D] - ev[e, E_BEST_D] >= cfg[C_STALL_DIST]
    ):
        ev[e, E_MARK_T] = t
        ev[e, E_MARK_CAP] = ev[e, E_CAPTURE]
        ev[e, E_MARK_D] = ev[e, E_BEST_D]

    outcome = O_NONE
    if ev[e, E_CAPTURE] >= cfg[C_CAPTURE_TIME]:
        outcome = O_CAPTURED
        rt[e, R_WIN] = weights[R_WIN]
    elif n_alive == 0:
        outcome = O_ALL_DISABLED
    elif ev[e, E_STEP] >= cfg[C_MAX_STEPS]:
        outcome = O_TIMEOUT
    elif t - ev[e, E_MARK_T] >= cfg[C_STALL_S] - 1e-9:
        outcome = O_STALLED
    if outcome != O_NONE and outcome != O_CAPTURED:
        rt[e, R_OUTCOME] = penalties[outcome]
    ev[e, E_OUTCOME] = outcome

    # metrics
    ev[e, E_COLLISIONS] += collisions
    ev[e, E_INTEG_LOST] += tag_stats[4]
    ev[e, E_ATT_DISABLED] += tag_stats[5]
    ev[e, E_DEF_DISABLED] += tag_stats[6]
    ev[e, E_TAG_ATT_A] += tag_stats[0]
    ev[e, E_TAG_HIT_A] += tag_stats[1]
    ev[e, E_TAG_ATT_D] += tag_stats[2]
    ev[e, E_TAG_HIT_D] += tag_stats[3]
    if any_detected:
        ev[e, E_DETECTED_STEPS] += 1.0
        if ev[e, E_FIRST_DETECTION] < 0.0:
            ev[e, E_FIRST_DETECTION] = t
    min_dd = np.inf
    for a in range(n_a):
        if u[e, a, U_ALIVE] == 0.0:
            continue
        for i in range(n_a, n_u):
            if u[e, i, U_ALIVE] > 0.0:
                min_dd = min(min_dd, math.hypot(u[e, a, U_X] - u[e, i, U_X], u[e, a, U_Y] - u[e, i, U_Y]))
    if min_dd < np.inf:
        ev[e, E_MIN_DEF_DIST_SUM] += min_dd
        ev[e, E_MIN_DEF_DIST_N] += 1.0

    total = 0.0
    for k in range(rt.shape[1]):
        total += rt[e, k]
        rsum[e, k] += rt[e, k]
    return total
