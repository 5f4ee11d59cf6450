"""TAG beams for both teams: the closest valid enemy in range, cone and line of sight is hit;
damage falls linearly from the shooter's tag damage at the optimal range to the minimum at
max range. Every shot of a step is aimed before any damage lands, so neither team shoots first."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from mission_gym.sim.geometry import segment_blocked, wrap_angle
from mission_gym.sim.layout import (
    C_TAG_CD,
    C_TAG_HALF,
    C_TAG_LOS,
    C_TAG_MIN,
    C_TAG_ON,
    C_TAG_OPT,
    C_TAG_RANGE,
    P_TAG_DMG,
    P_TEAM,
    U_ALIVE,
    U_FIRED,
    U_HEAD,
    U_INTEG,
    U_SPEED,
    U_TAG_CD,
    U_TAG_REQ,
    U_TARGET,
    U_X,
    U_Y,
)
from mission_gym.sim.sensing import both_grounded


@njit(cache=True)
def tag_damage(base: float, dist: float, cfg: np.ndarray) -> float:
    """Damage of a hit at ``dist`` by a shooter whose full tag damage is ``base``."""
    opt = cfg[C_TAG_OPT]
    rng = cfg[C_TAG_RANGE]
    if dist <= opt or rng <= opt:
        return base
    frac = min((dist - opt) / (rng - opt), 1.0)
    return base + (cfg[C_TAG_MIN] - base) * frac


@njit(cache=True)
def find_tag_target(
    u: np.ndarray, up: np.ndarray, e: int, i: int, circles: np.ndarray, rects: np.ndarray, cfg: np.ndarray
) -> tuple[int, float]:
    """The closest enemy that unit ``i``'s beam would hit now, and its distance (-1 if none)."""
    best = -1
    best_d = np.inf
    x = u[e, i, U_X]
    y = u[e, i, U_Y]
    for j in range(u.shape[1]):
        if up[j, P_TEAM] == up[i, P_TEAM] or u[e, j, U_ALIVE] == 0.0:
            continue
        dx = u[e, j, U_X] - x
        dy = u[e, j, U_Y] - y
        d = math.hypot(dx, dy)
        if d > cfg[C_TAG_RANGE] or d >= best_d:
            continue
        if abs(wrap_angle(math.atan2(dy, dx) - u[e, i, U_HEAD])) > cfg[C_TAG_HALF] + 1e-12:
            continue
        if cfg[C_TAG_LOS] > 0.0 and both_grounded(u, up, e, i, j):
            if segment_blocked(x, y, u[e, j, U_X], u[e, j, U_Y], circles, rects):
                continue
        best = j
        best_d = d
    return best, best_d


# Numba kernel: every unit of one env in one compiled pass; fire, then damage, then disable, in the spec's
# order so that simultaneous shots all land.
@njit(cache=True)
def resolve_tags(  # noqa: C901
    u: np.ndarray, up: np.ndarray, e: int, circles: np.ndarray, rects: np.ndarray, cfg: np.ndarray, stats: np.ndarray
) -> None:
    """Fire every ready, requested beam of env ``e`` and apply the damage.

    ``stats`` receives: attacker shots, attacker hits, defender shots, defender hits, attacker
    integrity lost, attackers disabled, defenders disabled.
    """
    stats[:] = 0.0
    n_u = u.shape[1]
    for i in range(n_u):
        u[e, i, U_FIRED] = 0.0
        u[e, i, U_TARGET] = -1.0
    if cfg[C_TAG_ON] == 0.0:
        return
    for i in range(n_u):
        if u[e, i, U_TAG_REQ] == 0.0 or u[e, i, U_ALIVE] == 0.0 or u[e, i, U_TAG_CD] > 0.0:
            continue
        u[e, i, U_FIRED] = 1.0
        u[e, i, U_TAG_CD] = cfg[C_TAG_CD]
        j, _ = find_tag_target(u, up, e, i, circles, rects, cfg)
        u[e, i, U_TARGET] = float(j)
        team = int(up[i, P_TEAM])
        stats[2 * team] += 1.0
        if j >= 0:
            stats[2 * team + 1] += 1.0
    for i in range(n_u):
        j = int(u[e, i, U_TARGET])
        if j < 0:
            continue
        d = math.hypot(u[e, j, U_X] - u[e, i, U_X], u[e, j, U_Y] - u[e, i, U_Y])
        dmg = tag_damage(up[i, P_TAG_DMG], d, cfg)
        before = u[e, j, U_INTEG]
        after = max(before - dmg, 0.0)
        u[e, j, U_INTEG] = after
        if up[j, P_TEAM] == 0.0:
            stats[4] += before - after
    for j in range(n_u):
        if u[e, j, U_ALIVE] > 0.0 and u[e, j, U_INTEG] <= 0.0:
            u[e, j, U_ALIVE] = 0.0
            u[e, j, U_SPEED] = 0.0
            stats[5 + int(up[j, P_TEAM])] += 1.0
