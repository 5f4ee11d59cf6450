"""``MissionVectorEnv``: Gymnasium's ``VectorEnv`` view of the batched core (``MissionGym-v0``'s ``vector_entry_point``).

``gym.make_vec("MissionGym-v0", num_envs=N, vectorization_mode="vector_entry_point")`` returns one of these: every
game is stepped in one compiled call, as in the SB3 view :class:`~mission_gym.envs.MissionVecEnv`, instead of
``N`` ``MissionEnv`` copies stepped one by one by ``SyncVectorEnv``.

Autoreset mode: ``AutoresetMode.SAME_STEP`` (``metadata["autoreset_mode"]``). An env whose episode ends is reset
inside the same ``step()``: the observation returned for it is the new episode's first, the last observation of the
episode that ended is ``info["final_obs"][i]`` (mask ``info["_final_obs"]``) and that episode's ``outcome`` and
``episode_metrics`` are in ``info["final_info"]``. Gymnasium's vector wrappers (``RecordEpisodeStatistics``, ...)
read the mode from the metadata.

Seeding matches :class:`~mission_gym.envs.MissionEnv`: ``reset(seed=s)`` seeds env ``i`` as ``MissionEnv`` is seeded
by ``reset(seed=s + i)`` (a list gives each env its own seed), and later episodes continue each env's own random
stream, so env ``i`` plays exactly the games of a ``MissionEnv`` seeded ``s + i`` that is reset after each episode.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from mission_gym.config import MissionConfig
from mission_gym.envs.mission_env import SEED_HIGH, MissionEnv, action_space, make_config, observation_space
from mission_gym.sim import MissionCore


class MissionVectorEnv(VectorEnv):
    """``num_envs`` Mission Gym games stepped together, with Gymnasium's vector API (same-step autoreset).

    :param num_envs: number of games
    :param render_mode: None or ``"rgb_array"`` (``render()`` returns one frame per game)
    :param config_dir: directory of YAML files merged over the defaults
    :param scenario: a scenario YAML file
    :param config: an already validated config (instead of the two above and the overrides)
    :param overrides: per-section config overrides, e.g. ``reward={"win_bonus": 100.0}``
    """

    metadata = {"render_modes": ["rgb_array"], "autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(
        self,
        num_envs: int = 1,
        render_mode: str | None = None,
        config_dir: str | Path | None = None,
        scenario: str | Path | None = None,
        config: MissionConfig | None = None,
        **overrides: Any,
    ) -> None:
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode {render_mode!r} is not supported by the vector env; use None or 'rgb_array'")
        overrides.pop("max_episode_steps", None)  # the game ends its own episodes (timeout); make_vec may pass the spec's
        self.core = MissionCore(make_config(config, config_dir, scenario, overrides), n_envs=num_envs)
        self.num_envs = num_envs
        self.render_mode = render_mode
        self.single_observation_space = observation_space(self.core)
        self.single_action_space = action_space(self.core)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.metadata = {**self.metadata, "render_fps": MissionEnv.metadata["render_fps"]}
        self._seeded = False

    @property
    def config(self) -> MissionConfig:
        """The configuration the games are played under."""
        return self.core.config

    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start a new episode in every env.

        :param seed: an int (env ``i`` gets ``seed + i``), one seed (or None) per env, or None (first reset: fresh
            random streams; later resets: each env continues its stream)
        :param options: unused (the game has no reset options)
        """
        seeds: list[int | None]
        if seed is None:
            seeds = [None] * self.num_envs
        elif isinstance(seed, int | np.integer):
            seeds = [int(seed) + i for i in range(self.num_envs)]
        else:
            seeds = list(seed)
            if len(seeds) != self.num_envs:
                raise ValueError(f"expected {self.num_envs} seeds, got {len(seeds)}")
        fresh = np.random.default_rng()
        ids, states = [], []
        for i, s in enumerate(seeds):
            if s is not None:  # the same draw MissionEnv.reset(seed=s) makes from its Gymnasium generator
                ids.append(i)
                states.append(np.random.default_rng(s).integers(0, SEED_HIGH))
            elif not self._seeded:
                ids.append(i)
                states.append(fresh.integers(0, SEED_HIGH))
        if ids:
            self.core.seed(ids, states)
        self._seeded = True
        return self.core.reset().copy(), {}

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every game; games that end are reset in the same step (see the module doc)."""
        obs, rewards, terminated, truncated = self.core.step(np.asarray(actions).reshape(self.num_envs, -1))
        done_ids = np.flatnonzero(terminated | truncated)
        infos: dict[str, Any] = {}
        if done_ids.size:
            for i in done_ids:  # only the games that just ended
                infos = self._add_info(
                    infos,
                    {
                        "final_obs": obs[i].copy(),
                        "final_info": {"outcome": self.core.outcome(i), "episode_metrics": self.core.episode_metrics(i)},
                    },
                    int(i),
                )
            terminated, truncated = terminated.copy(), truncated.copy()  # the reset below overwrites the core's
            self.core.reset(done_ids)
        return obs.copy(), rewards.copy(), terminated.copy(), truncated.copy(), infos

    def render(self) -> tuple[np.ndarray, ...] | None:
        """One ``rgb_array`` frame per game (None without a render mode)."""
        if self.render_mode is None:
            return None
        from mission_gym.envs import rendering

        return tuple(rendering.render_frame(self.core.snapshot(i)) for i in range(self.num_envs))

    def close_extras(self, **kwargs: Any) -> None:
        pass
