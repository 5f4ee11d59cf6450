"""The batch kernels: step and reset every env of a batch in one compiled call."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from mission_gym.sim.defenders import defenders_decide
from mission_gym.sim.dynamics import apply_attacker_command, list_near_obstacles, tick_units
from mission_gym.sim.engagement import resolve_tags
from mission_gym.sim.episode import capture_tick, finish_step, reset_env
from mission_gym.sim.layout import (
    C_CAPTURE_TIME,
    C_DT,
    C_REPEAT,
    E_CAPTURE,
    E_IN_ZONE,
    E_OUTCOME,
    E_TIME,
    O_ALL_DISABLED,
    O_CAPTURED,
    O_NONE,
    U_COLLIDED,
)
from mission_gym.sim.observation import write_observation
from mission_gym.sim.sensing import update_detection


@njit(cache=True)
def _step_env(
    e: int,
    actions: np.ndarray,
    u: np.ndarray,
    ev: np.ndarray,
    dm: np.ndarray,
    wps: np.ndarray,
    n_wp: np.ndarray,
    kd: np.ndarray,
    ka: np.ndarray,
    rt: np.ndarray,
    rsum: np.ndarray,
    rng: np.ndarray,
    up: np.ndarray,
    sp: np.ndarray,
    circles: np.ndarray,
    rects: np.ndarray,
    cfg: np.ndarray,
    weights: np.ndarray,
    penalties: np.ndarray,
    rings: np.ndarray,
    obs: np.ndarray,
    rewards: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    scratch: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray],
) -> None:
    """One env step of env ``e`` (``scratch``: working arrays of :func:`_scratch`, overwritten)."""
    tag_stats, near_c, near_r, unit_near_c, unit_near_r, unit_n_c, unit_n_r = scratch
    n_a = actions.shape[1]
    rewards[e] = 0.0
    terminated[e] = False
    truncated[e] = False
    if ev[e, E_OUTCOME] != O_NONE:
        return
    dt = cfg[C_DT]
    repeat = int(cfg[C_REPEAT])
    for a in range(n_a):
        apply_attacker_command(u, up, e, a, actions[e, a], cfg)
    defenders_decide(u, up, ev, dm, wps, n_wp, ka, e, n_a, circles, rects, cfg, rng)
    resolve_tags(u, up, e, circles, rects, cfg, tag_stats)
    capture_before = ev[e, E_CAPTURE]
    ev[e, E_IN_ZONE] = 0.0
    for i in range(u.shape[1]):
        u[e, i, U_COLLIDED] = 0.0
    list_near_obstacles(u, up, e, circles, rects, cfg, unit_near_c, unit_n_c, unit_near_r, unit_n_r)
    for _ in range(repeat):
        tick_units(u, up, e, circles, rects, cfg, unit_near_c, unit_n_c, unit_near_r, unit_n_r)
        ev[e, E_TIME] += dt
        capture_tick(u, up, ev, e, n_a, dt, cfg)
        if ev[e, E_CAPTURE] >= cfg[C_CAPTURE_TIME]:
            break
    any_detected = update_detection(u, up, sp, ev, kd, ka, e, n_a, circles, rects, cfg, rng)
    rewards[e] = finish_step(
        u, up, ev, rt, rsum, e, n_a, capture_before, tag_stats, any_detected, weights, penalties, rings, cfg
    )
    outcome = ev[e, E_OUTCOME]
    terminated[e] = outcome == O_CAPTURED or outcome == O_ALL_DISABLED
    truncated[e] = outcome != O_NONE and not terminated[e]
    write_observation(obs, u, up, ev, kd, e, n_a, circles, rects, cfg, near_c, near_r)


@njit(cache=True)
def _scratch(
    n_units: int, n_circles: int, n_rects: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The working arrays of one env step: tag counts, obstacle lists for the observation and per unit."""
    return (
        np.zeros(7),
        np.empty(n_circles, dtype=np.int64),
        np.empty(n_rects, dtype=np.int64),
        np.empty((n_units, n_circles), dtype=np.int64),
        np.empty((n_units, n_rects), dtype=np.int64),
        np.zeros(n_units, dtype=np.int64),
        np.zeros(n_units, dtype=np.int64),
    )


@njit(cache=True)
def step_batch(
    actions: np.ndarray,
    u: np.ndarray,
    ev: np.ndarray,
    dm: np.ndarray,
    wps: np.ndarray,
    n_wp: np.ndarray,
    kd: np.ndarray,
    ka: np.ndarray,
    rt: np.ndarray,
    rsum: np.ndarray,
    rng: np.ndarray,
    up: np.ndarray,
    sp: np.ndarray,
    circles: np.ndarray,
    rects: np.ndarray,
    cfg: np.ndarray,
    weights: np.ndarray,
    penalties: np.ndarray,
    rings: np.ndarray,
    obs: np.ndarray,
    rewards: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
) -> None:
    """One env step (``action_repeat`` physics ticks) of every env; finished envs are left as they are."""
    scratch = _scratch(u.shape[1], circles.shape[0], rects.shape[0])
    for e in range(u.shape[0]):
        _step_env(e, actions, u, ev, dm, wps, n_wp, kd, ka, rt, rsum, rng, up, sp, circles, rects, cfg, weights,
                  penalties, rings, obs, rewards, terminated, truncated, scratch)  # fmt: skip


@njit(cache=True, parallel=True)
def step_batch_parallel(
    actions: np.ndarray,
    u: np.ndarray,
    ev: np.ndarray,
    dm: np.ndarray,
    wps: np.ndarray,
    n_wp: np.ndarray,
    kd: np.ndarray,
    ka: np.ndarray,
    rt: np.ndarray,
    rsum: np.ndarray,
    rng: np.ndarray,
    up: np.ndarray,
    sp: np.ndarray,
    circles: np.ndarray,
    rects: np.ndarray,
    cfg: np.ndarray,
    weights: np.ndarray,
    penalties: np.ndarray,
    rings: np.ndarray,
    obs: np.ndarray,
    rewards: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    n_chunks: int,
) -> None:
    """:func:`step_batch` on numba's thread pool: the envs split into ``n_chunks`` contiguous chunks (one per thread).
    Each env reads and writes only its own rows and draws from its own random stream, so the result is the same to
    the bit."""
    n_envs = u.shape[0]
    for c in prange(n_chunks):
        scratch = _scratch(u.shape[1], circles.shape[0], rects.shape[0])
        for e in range(c * n_envs // n_chunks, (c + 1) * n_envs // n_chunks):
            _step_env(e, actions, u, ev, dm, wps, n_wp, kd, ka, rt, rsum, rng, up, sp, circles, rects, cfg, weights,
                      penalties, rings, obs, rewards, terminated, truncated, scratch)  # fmt: skip


@njit(cache=True)
def reset_batch(
    env_ids: np.ndarray,
    n_a: int,
    u: np.ndarray,
    ev: np.ndarray,
    dm: np.ndarray,
    wps: np.ndarray,
    base_wps: np.ndarray,
    n_wp: np.ndarray,
    kd: np.ndarray,
    ka: np.ndarray,
    rt: np.ndarray,
    rsum: np.ndarray,
    rng: np.ndarray,
    up: np.ndarray,
    sp: np.ndarray,
    circles: np.ndarray,
    rects: np.ndarray,
    cfg: np.ndarray,
    rings: np.ndarray,
    obs: np.ndarray,
) -> None:
    """Start new episodes in the listed envs and write their first observations."""
    near_c = np.empty(circles.shape[0], dtype=np.int64)
    near_r = np.empty(rects.shape[0], dtype=np.int64)
    for idx in range(env_ids.shape[0]):
        e = env_ids[idx]
        reset_env(u, up, ev, dm, wps, base_wps, n_wp, kd, ka, rt, rsum, e, n_a, circles, rects, cfg, rings, rng)
        update_detection(u, up, sp, ev, kd, ka, e, n_a, circles, rects, cfg, rng)
        write_observation(obs, u, up, ev, kd, e, n_a, circles, rects, cfg, near_c, near_r)
