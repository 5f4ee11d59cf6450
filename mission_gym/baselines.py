"""Scripted policies for Mission Gym, used by ``evaluate`` and the tests: ``random`` and ``greedy``
(every attacker heads for the objective and steers round obstacles with its lidar rays).

Both map a batch of observations ``(n, obs_dim)`` to actions ``(n, n_attackers)`` with array code.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from mission_gym.config import MissionConfig
from mission_gym.sim.layout import A_STOP, N_ACTIONS, PER_ATTACKER_BASE

Policy = Callable[[np.ndarray], np.ndarray]
POLICIES: tuple[str, ...] = ("greedy", "random")

# compass heading of actions 1..8 (N, NE, E, SE, S, SW, W, NW)
_ACTION_HEADINGS = np.radians([90.0, 45.0, 0.0, -45.0, -90.0, -135.0, 180.0, 135.0])


class RandomPolicy:
    """Uniformly random commands.

    :param n_attackers: commands per observation
    :param seed: seed of the policy's own generator
    """

    def __init__(self, n_attackers: int, seed: int | None = None) -> None:
        self.n_attackers = n_attackers
        self.rng = np.random.default_rng(seed)

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        obs = np.atleast_2d(obs)
        return self.rng.integers(0, N_ACTIONS, size=(obs.shape[0], self.n_attackers))


class GreedyPolicy:
    """Each attacker moves in the compass direction that best points at the objective among those
    its lidar shows clear, and stops once well inside the zone.

    :param config: the env's configuration (for the observation layout and scales)
    :param clearance: metres a direction's lidar range must exceed to count as clear
    """

    def __init__(self, config: MissionConfig, clearance: float = 6.0, side_clearance: float = 4.5) -> None:
        obs_cfg = config.world.observation
        self.n_attackers = len(config.scenario.attackers)
        self.n_rays = obs_cfg.lidar_rays
        self.per_attacker = PER_ATTACKER_BASE + self.n_rays
        self.width = config.world.arena.width
        self.height = config.world.arena.height
        self.clear = clearance / obs_cfg.lidar_range
        self.side_clear = side_clearance / obs_cfg.lidar_range
        self.hold = 0.5 * config.scenario.objective.radius

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        obs = np.atleast_2d(obs)
        n = obs.shape[0]
        blocks = obs[:, : self.n_attackers * self.per_attacker].reshape(n, self.n_attackers, self.per_attacker)
        heading = np.arctan2(blocks[..., 3], blocks[..., 2])  # (n, A)
        goal = np.arctan2(blocks[..., 11] * self.height, blocks[..., 10] * self.width)
        dist = np.hypot(blocks[..., 10] * self.width, blocks[..., 11] * self.height)
        # how well each compass direction points at the objective
        score = np.cos(_ACTION_HEADINGS[None, None, :] - goal[..., None])  # (n, A, 8)
        if self.n_rays:
            rays = blocks[..., PER_ATTACKER_BASE:]  # (n, A, R), ray r at heading + 2*pi*r/R
            rel = (_ACTION_HEADINGS[None, None, :] - heading[..., None]) % (2 * math.pi)
            idx = np.rint(rel / (2 * math.pi / self.n_rays)).astype(np.int64) % self.n_rays
            free = np.take_along_axis(rays, idx, axis=-1)
            left = np.take_along_axis(rays, (idx + 1) % self.n_rays, axis=-1)
            right = np.take_along_axis(rays, (idx - 1) % self.n_rays, axis=-1)
            # a direction is blocked when its ray is short, or a neighbouring ray shows an obstacle the body would clip
            blocked = (free < self.clear) | (np.minimum(left, right) < self.side_clear)
            score = score - 2.0 * blocked  # blocked directions only as a last resort
        # a unit standing still away from the objective ran into something: try another way this step
        stuck = (blocks[..., 4] < 0.05) & (dist >= self.hold)
        facing = np.argmin(np.abs(np.angle(np.exp(1j * (_ACTION_HEADINGS[None, None, :] - heading[..., None])))), axis=-1)
        np.put_along_axis(
            score, facing[..., None], np.take_along_axis(score, facing[..., None], -1) - 1.5 * stuck[..., None], -1
        )
        actions = 1 + np.argmax(score, axis=-1)
        actions[dist < self.hold] = A_STOP
        return actions


def make_policy(name: str, config: MissionConfig, seed: int | None = None) -> Policy:
    """A scripted policy by name (``greedy`` or ``random``)."""
    if name == "greedy":
        return GreedyPolicy(config)
    if name == "random":
        return RandomPolicy(len(config.scenario.attackers), seed=seed)
    raise ValueError(f"unknown policy {name!r}; valid: {', '.join(POLICIES)}")
