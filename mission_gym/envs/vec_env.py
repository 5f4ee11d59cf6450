"""``MissionVecEnv``: an SB3 ``VecEnv`` that steps all its games in one compiled call.

Env ``i`` behaves exactly like a :class:`~mission_gym.envs.MissionEnv` reset with the same seeds,
because both are views of the same :class:`~mission_gym.sim.MissionCore` and each env owns its
random stream.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices, VecEnvStepReturn

from mission_gym.config import REWARD_TERMS, MissionConfig
from mission_gym.envs.mission_env import SEED_HIGH, MissionEnv, action_space, make_config, observation_space
from mission_gym.sim import MissionCore


class _EnvView:
    """What ``get_attr``/``set_attr``/``env_method`` reach for env ``index``: its slice of the core,
    the shared config, and any attribute set on it."""

    def __init__(self, vec_env: MissionVecEnv, index: int) -> None:
        self._vec_env = vec_env
        self.index = index

    def __getattr__(self, name: str) -> Any:
        return getattr(self._vec_env, name)

    def outcome(self) -> str | None:
        return self._vec_env.core.outcome(self.index)

    def episode_metrics(self) -> dict[str, Any]:
        return self._vec_env.core.episode_metrics(self.index)

    def reward_terms(self) -> dict[str, float]:
        return dict(zip(REWARD_TERMS, self._vec_env.reward_terms[self.index].tolist()))

    def snapshot(self) -> dict[str, Any]:
        return self._vec_env.core.snapshot(self.index)

    def render(self) -> np.ndarray | None:
        from mission_gym.envs import rendering

        return rendering.render_frame(self.snapshot())


class MissionVecEnv(VecEnv):
    """All ``n_envs`` games stepped together, with SB3's auto-reset semantics.

    :param n_envs: number of games
    :param seed: if given, env ``i`` is seeded with ``seed + i`` at the first reset
    :param config_dir: directory of YAML files merged over the defaults
    :param scenario: a scenario YAML file
    :param render_mode: None or ``"rgb_array"``
    :param config: an already validated config (instead of the three above)
    :param threads: CPU threads each step uses (the games split among them; the same results whatever the count)
    :param overrides: per-section config overrides, e.g. ``reward={"win_bonus": 100.0}``
    """

    def __init__(
        self,
        n_envs: int = 1,
        seed: int | None = None,
        config_dir: str | Path | None = None,
        scenario: str | Path | None = None,
        render_mode: str | None = None,
        config: MissionConfig | None = None,
        threads: int = 1,
        **overrides: Any,
    ) -> None:
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode {render_mode!r} is not supported by MissionVecEnv; use None or 'rgb_array'")
        self.core = MissionCore(make_config(config, config_dir, scenario, overrides), n_envs=n_envs, threads=threads)
        self.render_mode = render_mode
        self._views = [_EnvView(self, i) for i in range(n_envs)]
        super().__init__(n_envs, observation_space(self.core), action_space(self.core))
        self.metadata["render_fps"] = MissionEnv.metadata["render_fps"]
        self._actions = np.zeros((n_envs, self.core.n_attackers), dtype=np.int64)
        self._seeded = np.zeros(n_envs, dtype=bool)
        self._terms = self.core.rt  # this step's reward terms (a copy when an auto-reset cleared some)
        #: called with the envs an auto-reset just started anew and the core holding their games (a run part may
        #: start some from saved states)
        self.reset_hook: Callable[[np.ndarray, Any], None] | None = None
        if seed is not None:
            self.seed(seed)

    def seed_envs(self, seeds: Sequence[int | None]) -> None:
        """Seed each env on its own value at the next ``reset()`` (``seed()`` uses ``seed + i``)."""
        if len(seeds) != self.num_envs:
            raise ValueError(f"expected {self.num_envs} seeds, got {len(seeds)}")
        self._seeds = list(seeds)

    # --- VecEnv API --------------------------------------------------------------------------------
    @property
    def config(self) -> MissionConfig:
        """The configuration the games are played under (the core's; see ``MissionCore.set_config``)."""
        return self.core.config

    def reset(self) -> np.ndarray:
        states = np.zeros(self.num_envs, dtype=np.uint64)
        fresh = np.random.default_rng()
        for i, seed in enumerate(self._seeds):  # runs on explicit resets only, never in the step path
            if seed is not None:
                states[i] = np.random.default_rng(seed).integers(0, SEED_HIGH)
            elif not self._seeded[i]:
                states[i] = fresh.integers(0, SEED_HIGH)
        to_seed = np.flatnonzero([s is not None or not done for s, done in zip(self._seeds, self._seeded)])
        self.core.seed(to_seed, states[to_seed])
        self._seeded[:] = True
        self._reset_seeds()
        self._reset_options()
        self.reset_infos = [{} for _ in range(self.num_envs)]
        self._terms = self.core.rt
        return self.core.reset().copy()

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions).reshape(self.num_envs, self.core.n_attackers)

    def step_wait(self) -> VecEnvStepReturn:
        obs, rewards, terminated, truncated = self.core.step(self._actions)
        dones = terminated | truncated
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        done_ids = np.flatnonzero(dones)
        self._terms = self.core.rt
        if done_ids.size:
            self._terms = self.core.rt.copy()  # the auto-reset below clears the ended episodes' terms
            for i in done_ids:  # only the envs whose episode just ended
                infos[i] = {
                    "outcome": self.core.outcome(i),
                    "episode_metrics": self.core.episode_metrics(i),
                    "terminal_observation": obs[i].copy(),
                    "TimeLimit.truncated": bool(truncated[i] and not terminated[i]),
                }
            self.core.reset(done_ids)
            if self.reset_hook is not None:
                self.reset_hook(done_ids, self.core)
        return obs.copy(), rewards.astype(np.float32), dones.copy(), infos

    @property
    def reward_terms(self) -> np.ndarray:
        """This step's reward terms of every env, shape ``(n_envs, n_terms)`` in ``REWARD_TERMS`` order."""
        return self._terms

    def close(self) -> None:
        pass

    def get_images(self) -> Sequence[np.ndarray | None]:
        if self.render_mode != "rgb_array":
            return [None for _ in range(self.num_envs)]
        return [view.render() for view in self._views]

    def _targets(self, indices: VecEnvIndices) -> list[_EnvView]:
        return [self._views[i] for i in self._get_indices(indices)]

    @property
    def n_defenders(self) -> int:
        """Defenders per game (the digits of a situation's code)."""
        return int(self.core.n_defenders)

    def situations(self) -> np.ndarray:
        """Each game's situation this episode (its defenders' modes) as one integer
        (:func:`~mission_gym.sim.core.situation_codes`): what a distillation picks each game's teacher by."""
        return self.core.situation_codes()

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        if not hasattr(self, "_views"):  # VecEnv.__init__ asks for render_mode before the views exist
            return [getattr(self, attr_name)] * self.num_envs
        return [getattr(view, attr_name) for view in self._targets(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        for view in self._targets(indices):
            setattr(view, attr_name, value)

    def env_method(
        self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs: Any
    ) -> list[Any]:
        return [getattr(view, method_name)(*method_args, **method_kwargs) for view in self._targets(indices)]

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        return [False for _ in self._get_indices(indices)]
