"""``MissionEnv``: the Gymnasium view of one Mission Gym game (the batched core with n_envs=1)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from mission_gym.config import MissionConfig, load_config
from mission_gym.sim import MissionCore
from mission_gym.sim.layout import N_ACTIONS

SEED_HIGH = 2**63  # a core stream is seeded with a 63-bit draw from the env's Gymnasium generator


def make_config(
    config: MissionConfig | None = None,
    config_dir: str | Path | None = None,
    scenario: str | Path | Mapping[str, Any] | None = None,
    overrides: dict[str, Any] | None = None,
) -> MissionConfig:
    """The env's configuration: ``config`` as given, or loaded from files and overrides.

    ``scenario`` is a scenario file, or a mapping of scenario overrides like any other section.
    """
    if isinstance(scenario, Mapping):
        overrides = {**(overrides or {}), "scenario": scenario}
        scenario = None
    if config is not None:
        if config_dir is not None or scenario is not None or overrides:
            raise ValueError("pass either config or config_dir/scenario/overrides, not both")
        return config
    return load_config(config_dir=config_dir, scenario=scenario, overrides=overrides)


def observation_space(core: MissionCore) -> spaces.Box:
    """The flat observation space of a core: every feature is scaled into [-1, 1]."""
    return spaces.Box(low=-1.0, high=1.0, shape=(core.static.obs_dim,), dtype=np.float32)


def action_space(core: MissionCore) -> spaces.MultiDiscrete:
    """One command per attacker."""
    return spaces.MultiDiscrete([N_ACTIONS] * core.n_attackers)


class MissionEnv(gym.Env):
    """
    ## Description
    A fleet of attacker units (ground vehicles and drones) must capture a circular objective zone
    while scripted defenders patrol, detect and tag them. Obstacles block ground units and line of
    sight; units degrade as they lose integrity. See ``docs/environment.md`` for every rule.

    ## Action Space
    ``MultiDiscrete([11] * n_attackers)``, one command per attacker: 0 STOP, 1 N, 2 NE, 3 E, 4 SE,
    5 S, 6 SW, 7 W, 8 NW, 9 TAG, 10 SCAN. A switched-off feature acts as STOP.

    ## Observation Space
    ``Box(float32, (obs_dim,))``: per attacker its position, heading, speed, integrity, cooldowns,
    altitude, disabled flag, vector and distance to the objective and ``lidar_rays`` obstacle ranges;
    per defender slot what the attackers know of it (fog of war); time left and capture progress.
    100 values for the default scenario.

    ## Rewards
    A sum of weighted terms from ``reward.yaml`` (capture progress, win bonus, zone entry, distance
    potential, rings, formation, tags, losses, detection, time, collisions, outcome penalties);
    ``info["reward_terms"]`` holds this step's value of each and they sum exactly to the reward.

    ## Episode End
    Terminated on ``captured`` (win) or ``all_disabled``; truncated on ``timeout`` (300 s) or
    ``stalled`` (30 s without progress). ``info["outcome"]`` names it on the last step and
    ``info["episode_metrics"]`` summarises the episode.

    ## Arguments
    ``gymnasium.make("MissionGym-v0", render_mode=None, config_dir=None, scenario=None, **overrides)``:
    ``config_dir`` holds YAML files merged over the defaults, ``scenario`` is a scenario file, and
    each override is a config section as a dict, e.g. ``reward={"win_bonus": 100.0}``.

    ## Version History
    * v0: initial version.
    """

    metadata = {"render_modes": ["human", "rgb_array"], "render_fps": 4}

    def __init__(
        self,
        render_mode: str | None = None,
        config_dir: str | Path | None = None,
        scenario: str | Path | None = None,
        config: MissionConfig | None = None,
        **overrides: Any,
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode {render_mode!r} is not one of {self.metadata['render_modes']} or None")
        self.render_mode = render_mode
        self.core = MissionCore(make_config(config, config_dir, scenario, overrides), n_envs=1)
        self.observation_space = observation_space(self.core)
        self.action_space = action_space(self.core)
        self.metadata = {**self.metadata, "render_fps": round(1.0 / self.core.step_seconds)}
        self._seeded = False
        self._window: Any = None

    @property
    def config(self) -> MissionConfig:
        """The configuration the games are played under (the core's; see ``MissionCore.set_config``)."""
        return self.core.config

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        if seed is not None or not self._seeded:
            self.core.seed([0], [self.np_random.integers(0, SEED_HIGH)])
            self._seeded = True
        obs = self.core.reset()[0].copy()
        if self.render_mode == "human":
            self.render()
        return obs, {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.core.outcome(0) is not None:
            raise RuntimeError("step() called after the episode ended; call reset() first")
        obs, rewards, terminated, truncated = self.core.step(np.asarray(action).reshape(1, -1))
        info: dict[str, Any] = {"reward_terms": self.core.reward_terms(0), "outcome": self.core.outcome(0)}
        if info["outcome"] is not None:
            info["episode_metrics"] = self.core.episode_metrics(0)
        if self.render_mode == "human":
            self.render()
        return obs[0].copy(), float(rewards[0]), bool(terminated[0]), bool(truncated[0]), info

    def render(self) -> np.ndarray | None:
        if self.render_mode is None:
            gym.logger.warn('render() called without a render_mode; use MissionEnv(render_mode="rgb_array")')
            return None
        from mission_gym.envs import rendering

        frame = rendering.render_frame(self.core.snapshot(0))
        if self.render_mode == "rgb_array":
            return frame
        if self._window is None:
            self._window = rendering.HumanWindow(title="Mission Gym", fps=self.metadata["render_fps"])
        self._window.show(frame)
        return None

    @property
    def window_closed(self) -> bool:
        """Whether the ``render_mode="human"`` window was closed by its user (a viewer stops then)."""
        return self._window is not None and self._window.closed

    def raster(self, size: int = 64) -> np.ndarray:
        """A top-down raster of the state (channels: obstacles, objective, attackers, defenders)."""
        from mission_gym.envs import rendering

        return rendering.raster(self.core.snapshot(0), size=size)

    def close(self) -> None:
        if self._window is not None:
            self._window.close()
            self._window = None
