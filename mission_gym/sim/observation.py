"""The flat observation vector (layout in ``docs/environment.md``): per attacker its own state,
the objective and lidar rays; per defender slot what the attackers know of it; two globals."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from mission_gym.sim.geometry import ray_fan
from mission_gym.sim.layout import (
    C_CAPTURE_TIME,
    C_DEF_MOTION,
    C_H,
    C_LAST_SEEN_H,
    C_LIDAR_RANGE,
    C_LIDAR_RAYS,
    C_MAX_STEPS,
    C_SCAN_CD,
    C_TAG_CD,
    C_W,
    E_CAPTURE,
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


# Numba kernel: one env's observation written in layout order in one compiled pass; the branches are the
# layout's optional blocks and unseen-slot zeros.
@njit(cache=True)
def write_observation(  # noqa: C901
    obs: np.ndarray,
    u: np.ndarray,
    up: np.ndarray,
    ev: np.ndarray,
    kd: np.ndarray,
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

    if cfg[C_DEF_MOTION] > 0.0:
        # per defender slot while an attacker sees it: speed / max speed and tag reload (cooldown / cooldown
        # time, 0 = ready); zeros when unseen, as its motion is then unknown
        for d in range(kd.shape[1]):
            seen = kd[e, d, K_VIS] > 0.0
            obs[e, k + 0] = kd[e, d, K_SPEED] if seen else 0.0
            obs[e, k + 1] = kd[e, d, K_TAG_CD] if seen else 0.0
            k += 2

    obs[e, k] = 1.0 - ev[e, E_STEP] / cfg[C_MAX_STEPS]
    obs[e, k + 1] = min(ev[e, E_CAPTURE] / cfg[C_CAPTURE_TIME], 1.0)
    k += 2
