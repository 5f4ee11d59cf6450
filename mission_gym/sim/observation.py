"""The flat observation vector (layout in ``docs/environment.md``): per attacker its own state,
the objective and lidar rays; per defender slot what the attackers know of it; two globals."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from mission_gym.sim.geometry import ray_fan
from mission_gym.sim.layout import (
    C_BEARINGS_WORLD,
    C_CAPTURE_TIME,
    C_CRITIC_STATE,
    C_DEF_BEARINGS,
    C_DEF_MOTION,
    C_DEF_OBJECTIVE,
    C_H,
    C_LAST_SEEN_H,
    C_LIDAR_RANGE,
    C_LIDAR_RAYS,
    C_MAX_STEPS,
    C_SCAN_CD,
    C_STALL_S,
    C_TAG_CD,
    C_TAG_HALF,
    C_TAG_RANGE,
    C_W,
    D_MODE,
    E_CAPTURE,
    E_MARK_T,
    E_OBJ_X,
    E_OBJ_Y,
    E_STEP,
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
    P_BANDS,
    P_INTEG0,
    P_MAX_SPEED,
    U_ALIVE,
    U_ALT,
    U_HEAD,
    U_INTEG,
    U_SCAN_CD,
    U_SPEED,
    U_TAG_CD,
    U_X,
    U_Y,
)


@njit(cache=True)
def write_observation(
    obs: np.ndarray,
    u: np.ndarray,
    up: np.ndarray,
    ev: np.ndarray,
    kd: np.ndarray,
    dm: np.ndarray,
    e: int,
    n_a: int,
    circles: np.ndarray,
    rects: np.ndarray,
    cfg: np.ndarray,
    near_c: np.ndarray,
    near_r: np.ndarray,
) -> None:
    """Fill ``obs[e]`` (``near_c``/``near_r``: int64 scratch arrays as long as the obstacle lists)."""
    w = cfg[C_W]
    h = cfg[C_H]
    diag = math.hypot(w, h)
    n_rays = int(cfg[C_LIDAR_RAYS])
    lidar_range = cfg[C_LIDAR_RANGE]
    ox = ev[e, E_OBJ_X]
    oy = ev[e, E_OBJ_Y]
    # centroid of the alive attackers (all of them if none is alive)
    cx = 0.0
    cy = 0.0
    n = 0
    for a in range(n_a):
        if u[e, a, U_ALIVE] > 0.0:
            cx += u[e, a, U_X]
            cy += u[e, a, U_Y]
            n += 1
    if n == 0:
        for a in range(n_a):
            cx += u[e, a, U_X]
            cy += u[e, a, U_Y]
        n = n_a
    cx /= n
    cy /= n

    k = 0
    for a in range(n_a):
        x = u[e, a, U_X]
        y = u[e, a, U_Y]
        head = u[e, a, U_HEAD]
        obs[e, k + 0] = 2.0 * x / w - 1.0
        obs[e, k + 1] = 2.0 * y / h - 1.0
        obs[e, k + 2] = math.cos(head)
        obs[e, k + 3] = math.sin(head)
        obs[e, k + 4] = u[e, a, U_SPEED] / up[a, P_MAX_SPEED]
        obs[e, k + 5] = u[e, a, U_INTEG] / up[a, P_INTEG0]
        obs[e, k + 6] = u[e, a, U_TAG_CD] / cfg[C_TAG_CD] if cfg[C_TAG_CD] > 0.0 else 0.0
        obs[e, k + 7] = u[e, a, U_SCAN_CD] / cfg[C_SCAN_CD] if cfg[C_SCAN_CD] > 0.0 else 0.0
        obs[e, k + 8] = u[e, a, U_ALT] / max(up[a, P_BANDS] - 1.0, 1.0)
        obs[e, k + 9] = 1.0 - u[e, a, U_ALIVE]
        obs[e, k + 10] = (ox - x) / w
        obs[e, k + 11] = (oy - y) / h
        obs[e, k + 12] = math.hypot(ox - x, oy - y) / diag
        k += 13
        if n_rays > 0:
            ray_fan(x, y, head, n_rays, lidar_range, circles, rects, w, h, near_c, near_r, obs[e, k : k + n_rays])
            k += n_rays

    t = ev[e, E_TIME]
    horizon = cfg[C_LAST_SEEN_H]
    for d in range(kd.shape[1]):
        if kd[e, d, K_EVER] > 0.0:
            obs[e, k + 0] = (kd[e, d, K_X] - cx) / w
            obs[e, k + 1] = (kd[e, d, K_Y] - cy) / h
            obs[e, k + 2] = math.cos(kd[e, d, K_HEAD])
            obs[e, k + 3] = math.sin(kd[e, d, K_HEAD])
            obs[e, k + 4] = kd[e, d, K_INTEG]
            obs[e, k + 5] = kd[e, d, K_VIS]
            obs[e, k + 6] = min(t - kd[e, d, K_SEEN_T], horizon) / horizon
        else:
            for f in range(7):
                obs[e, k + f] = 0.0
        k += 7

    if cfg[C_DEF_BEARINGS] > 0.0:
        # per attacker x defender slot, the defender's last known position from the attacker: (forward, left)
        # in its own frame, or (east, north) with bearings_frame world, / (2 x tag range) clipped to [-1, 1],
        # distance / diagonal, and an in-beam flag (inside the tag range and cone); zeros for a disabled attacker
        # or a defender never seen
        reach = 2.0 * cfg[C_TAG_RANGE]
        world = cfg[C_BEARINGS_WORLD] > 0.0
        for a in range(n_a):
            x = u[e, a, U_X]
            y = u[e, a, U_Y]
            ch = math.cos(u[e, a, U_HEAD])
            sh = math.sin(u[e, a, U_HEAD])
            for d in range(kd.shape[1]):
                if kd[e, d, K_EVER] > 0.0 and u[e, a, U_ALIVE] > 0.0 and kd[e, d, K_INTEG] > 0.0:
                    dx = kd[e, d, K_X] - x
                    dy = kd[e, d, K_Y] - y
                    fwd = ch * dx + sh * dy
                    left = -sh * dx + ch * dy
                    dist = math.hypot(dx, dy)
                    obs[e, k + 0] = min(max((dx if world else fwd) / reach, -1.0), 1.0)
                    obs[e, k + 1] = min(max((dy if world else left) / reach, -1.0), 1.0)
                    obs[e, k + 2] = dist / diag
                    in_beam = dist <= cfg[C_TAG_RANGE] and abs(math.atan2(left, fwd)) <= cfg[C_TAG_HALF]
                    obs[e, k + 3] = 1.0 if in_beam else 0.0
                else:
                    for f in range(4):
                        obs[e, k + f] = 0.0
                k += 4

    if cfg[C_DEF_MOTION] > 0.0:
        # per defender slot while an attacker sees it: speed / max speed and tag reload (cooldown / cooldown
        # time, 0 = ready); zeros when unseen, as its motion is then unknown
        for d in range(kd.shape[1]):
            seen = kd[e, d, K_VIS] > 0.0
            obs[e, k + 0] = kd[e, d, K_SPEED] if seen else 0.0
            obs[e, k + 1] = kd[e, d, K_TAG_CD] if seen else 0.0
            k += 2

    if cfg[C_DEF_OBJECTIVE] > 0.0:
        # per defender slot: its last known position from the objective's centre (east, north / arena size) and
        # distance / (2 x tag range) capped at 1; zeros for a defender never seen: where a defender is from the
        # zone the fleet must hold (a guard keeps within its guard radius of the centre)
        reach = 2.0 * cfg[C_TAG_RANGE] if cfg[C_TAG_RANGE] > 0.0 else diag
        for d in range(kd.shape[1]):
            if kd[e, d, K_EVER] > 0.0:
                dx = kd[e, d, K_X] - ox
                dy = kd[e, d, K_Y] - oy
                obs[e, k + 0] = dx / w
                obs[e, k + 1] = dy / h
                obs[e, k + 2] = min(math.hypot(dx, dy) / reach, 1.0)
            else:
                for f in range(3):
                    obs[e, k + f] = 0.0
            k += 3

    obs[e, k] = 1.0 - ev[e, E_STEP] / cfg[C_MAX_STEPS]
    obs[e, k + 1] = min(ev[e, E_CAPTURE] / cfg[C_CAPTURE_TIME], 1.0)
    k += 2

    if cfg[C_CRITIC_STATE] > 0.0:
        # the critic's block, after the public part: per defender its true state whether seen or not (integrity
        # fraction, position from the objective / arena size, heading, speed / max, tag reload, mode one-hot),
        # then the stall clock (time since the last progress / the stall limit)
        for d in range(kd.shape[1]):
            i = n_a + d
            obs[e, k + 0] = u[e, i, U_INTEG] / up[i, P_INTEG0]
            obs[e, k + 1] = (u[e, i, U_X] - ox) / w
            obs[e, k + 2] = (u[e, i, U_Y] - oy) / h
            obs[e, k + 3] = math.cos(u[e, i, U_HEAD])
            obs[e, k + 4] = math.sin(u[e, i, U_HEAD])
            obs[e, k + 5] = u[e, i, U_SPEED] / up[i, P_MAX_SPEED]
            obs[e, k + 6] = u[e, i, U_TAG_CD] / cfg[C_TAG_CD] if cfg[C_TAG_CD] > 0.0 else 0.0
            mode = int(dm[e, d, D_MODE])
            for m in range(3):
                obs[e, k + 7 + m] = 1.0 if mode == m else 0.0
            k += 10
        obs[e, k] = min((t - ev[e, E_MARK_T]) / cfg[C_STALL_S], 1.0) if cfg[C_STALL_S] > 0.0 else 0.0
