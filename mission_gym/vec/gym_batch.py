"""``GymBatchVecEnv``: what the ``native`` VecEnvs of Gymnasium tasks share (:mod:`~mission_gym.vec.mujoco_vec`,
:mod:`~mission_gym.vec.classic_vec`): ``n_envs`` envs built by ``gym.make``, whose resets and random streams are their
own, stepped by the subclass for all envs at once, with SB3's auto-reset semantics (a time limit from the env's spec,
``TimeLimit.truncated`` and ``terminal_observation`` in the infos, the ended envs reset in place).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices, VecEnvStepReturn

# the wrappers gym.make puts around a registered env, which add nothing a batched env does not do itself
_PLAIN_WRAPPERS = ("TimeLimit", "OrderEnforcing", "PassiveEnvChecker")


def plain_reason(env: gym.Env) -> str | None:
    """Why a ``gym.make``-built env is not plain enough to be stepped in a batch (a wrapper of its own arguments, or
    rendering), or None."""
    layer = env
    while isinstance(layer, gym.Wrapper):
        if type(layer).__name__ not in _PLAIN_WRAPPERS:
            return f"gym.make wrapped it in {type(layer).__name__}"
        layer = layer.env
    if env.unwrapped.render_mode is not None:
        return "it renders (render_mode is set)"
    return None


def can_batch(env_id: str, env_kwargs: dict[str, Any] | None, reason: Callable[[gym.Env], str | None]) -> bool:
    """Whether ``env_id`` with these arguments builds an env that ``reason`` (a batched env's
    ``unsupported_reason``) finds nothing against."""
    try:
        env = gym.make(env_id, **(env_kwargs or {}))
    except Exception:
        return False
    try:
        return reason(env) is None
    finally:
        env.close()


class GymBatchVecEnv(VecEnv):
    """The envs and the VecEnv API of a batched Gymnasium task; a subclass steps them (:meth:`step_wait`, ending
    with :meth:`_finish`) and may keep state of its own from each reset (:meth:`_after_reset`).

    :param env_id: a registered Gymnasium id
    :param n_envs: number of envs
    :param env_kwargs: keyword arguments for ``gym.make``
    :param reason: why the subclass cannot step such an env (None: it can)
    :raises ValueError: for an env the subclass does not step
    """

    def __init__(
        self, env_id: str, n_envs: int, env_kwargs: dict[str, Any] | None, reason: Callable[[gym.Env], str | None]
    ) -> None:
        self.envs = [gym.make(env_id, **(env_kwargs or {})) for _ in range(n_envs)]
        why = reason(self.envs[0])
        if why is not None:
            self.close()
            raise ValueError(f"{type(self).__name__} cannot step {env_id}: {why}")
        first = self.envs[0]
        super().__init__(n_envs, first.observation_space, first.action_space)
        self._raw: list[Any] = [env.unwrapped for env in self.envs]  # the task under gym.make's wrappers
        self._max_steps: int | None = first.spec.max_episode_steps if first.spec is not None else None
        self._elapsed = np.zeros(n_envs, dtype=np.int64)
        space = self._raw[0].observation_space
        self._obs = np.zeros((n_envs, *space.shape), dtype=space.dtype)

    def _after_reset(self, i: int) -> None:
        """Read what the subclass keeps of env ``i`` right after its reset (its state, for one that steps it)."""

    def reset(self) -> np.ndarray:
        for i, env in enumerate(self._raw):
            obs, self.reset_infos[i] = env.reset(seed=self._seeds[i], options=self._options[i] or None)
            self._obs[i] = obs
            self._elapsed[i] = 0
            self._after_reset(i)
        self._reset_seeds()
        self._reset_options()
        return self._obs.copy()

    def _finish(self, obs: np.ndarray, rewards: np.ndarray, terminated: np.ndarray) -> VecEnvStepReturn:
        """A step's return from its observations, rewards and terminations: the time limit counted, the ended envs'
        last observations kept in their infos and the envs reset (their first observation in ``obs``)."""
        self._elapsed += 1
        truncated = self._elapsed >= self._max_steps if self._max_steps is not None else np.zeros_like(terminated)
        dones = terminated | truncated
        infos: list[dict[str, Any]] = [{"TimeLimit.truncated": bool(t)} for t in truncated & ~terminated]
        for i in np.flatnonzero(dones).tolist():
            infos[i]["terminal_observation"] = obs[i].copy()
            obs[i], self.reset_infos[i] = self._raw[i].reset()
            self._elapsed[i] = 0
            self._after_reset(i)
        return obs, rewards, dones, infos

    def close(self) -> None:
        for env in getattr(self, "envs", ()):
            env.close()

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        return [env.get_wrapper_attr(attr_name) for env in self._targets(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        for env in self._targets(indices):
            setattr(env, attr_name, value)

    def env_method(self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **kwargs: Any) -> list[Any]:
        return [env.get_wrapper_attr(method_name)(*method_args, **kwargs) for env in self._targets(indices)]

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        from stable_baselines3.common.env_util import is_wrapped

        return [is_wrapped(env, wrapper_class) for env in self._targets(indices)]

    def _targets(self, indices: VecEnvIndices) -> Sequence[gym.Env]:
        return [self.envs[i] for i in self._get_indices(indices)]
