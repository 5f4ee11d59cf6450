"""The vectorised training environment: ``native`` (an env's own batched VecEnv: Mission Gym's ``MissionVecEnv``,
or :class:`~mission_gym.vec.mujoco_vec.MujocoVecEnv` for Hopper-v5, Walker2d-v5 and HalfCheetah-v5), ``subproc``
or ``dummy``, always under a ``VecMonitor``, and under a ``VecNormalize`` when the configuration asks for one.

This module imports no SB3 or torch at the top: env worker processes import it to build their env.
"""

from __future__ import annotations

import importlib
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym

from mission_gym import ENV_ID
from mission_gym.config.loader import suggest
from mission_gym.config.yaml_io import ConfigError
from mission_gym.hardware import cap_worker_threads, parent_death_signal
from mission_gym.optional import missing
from mission_gym.vec import VEC_ENV_KINDS

if TYPE_CHECKING:
    from stable_baselines3.common.vec_env import VecEnv, VecNormalize


def _register_mission(env_id: str) -> None:
    if env_id == ENV_ID:
        import mission_gym.envs  # noqa: F401  (registers MissionGym-v0)


def check_env_id(env_id: str) -> None:
    """Raise a :class:`ConfigError` naming the closest registered id when ``env_id`` is not registered."""
    _register_mission(env_id)
    if ":" in env_id:  # "module:EnvId": the module registers the id when imported (as gym.make does)
        module, _, env_id = env_id.partition(":")
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ConfigError(f"--env {module}:{env_id}: cannot import module {module!r}: {exc}") from None
    if env_id not in gym.registry:
        valid = [*gym.registry, ENV_ID]
        hint = suggest(env_id, valid)
        raise ConfigError(f"--env {env_id!r} is not a registered Gymnasium id{hint}; e.g. {ENV_ID}, Hopper-v5")


#: the Gymnasium ids with a ``native`` VecEnv besides Mission Gym (:mod:`mission_gym.vec.mujoco_vec`)
NATIVE_MUJOCO = ("Hopper-v5", "Walker2d-v5", "HalfCheetah-v5")


def has_native(env_id: str, env_kwargs: dict[str, Any] | None = None) -> bool:
    """Whether ``env_id`` has a batched VecEnv of its own: Mission Gym, and the MuJoCo tasks
    :class:`~mission_gym.vec.mujoco_vec.MujocoVecEnv` steps (unless their arguments ask for something it does not do,
    such as rendering)."""
    if env_id == ENV_ID:
        return True
    if env_id not in NATIVE_MUJOCO:
        return False
    from mission_gym.vec.mujoco_vec import supports

    return supports(env_id, env_kwargs)


def resolve_kind(kind: str, env_id: str, n_envs: int, cores: int, env_kwargs: dict[str, Any] | None = None) -> str:
    """The vec-env kind for ``auto``: native where the env has one (:func:`has_native`), else subproc for several envs
    and cores, else dummy.

    :raises ConfigError: for ``native`` with an env that has none
    """
    if kind == "auto":
        if has_native(env_id, env_kwargs):
            return "native"
        return "subproc" if n_envs > 1 and cores > 1 else "dummy"
    if kind == "native" and not has_native(env_id, env_kwargs):
        raise ConfigError(
            f"--vec-env native is the batched env of {ENV_ID} and of {', '.join(NATIVE_MUJOCO)} (with arguments it "
            f"supports), not of {env_id}; use subproc or dummy"
        )
    if kind not in VEC_ENV_KINDS:
        raise ConfigError(
            f"--vec-env {kind!r} is not valid{suggest(kind, list(VEC_ENV_KINDS))}; valid: auto, {', '.join(VEC_ENV_KINDS)}"
        )
    return kind


@dataclass
class EnvFactory:
    """A picklable ``env_fn`` for SB3's vec envs; in a worker process it also caps math threads and leaves
    Ctrl-C to the parent (which saves a checkpoint and then closes the workers).

    :param env_id: a registered Gymnasium id
    :param env_kwargs: keyword arguments for ``gym.make``
    :param in_worker: whether this runs in a worker process
    """

    env_id: str
    env_kwargs: dict[str, Any]
    in_worker: bool = False

    def __call__(self) -> gym.Env:
        if self.in_worker:
            cap_worker_threads()
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            # a worker's parent is the forkserver, which exits when the trainer dies (kill -9 included): end with it
            # even in the middle of a long step, rather than when the step returns and the pipe is found closed
            die_with_parent = parent_death_signal(signal.SIGTERM, os.getppid())
            if die_with_parent is not None:
                die_with_parent()
        _register_mission(self.env_id)
        return gym.make(self.env_id, **self.env_kwargs)


@dataclass(frozen=True)
class EnvProbe:
    """What one env built in this process tells about an env id and its arguments."""

    observation_space: gym.Space
    action_space: gym.Space
    render_mode: str | None
    wrappers: tuple[type, ...]


def probe_env(env_id: str, env_kwargs: dict[str, Any]) -> EnvProbe:
    """Build one env in this process to check the id and keyword arguments; what it tells.

    :raises ConfigError: when the env cannot be built with these arguments
    """
    check_env_id(env_id)
    try:
        env = EnvFactory(env_id, env_kwargs)()
    except ConfigError:
        raise
    except gym.error.DependencyNotInstalled as exc:
        if "mujoco" in str(exc).lower():
            raise missing("mujoco", f"--env {env_id}") from None
        raise ConfigError(f"--env {env_id}: {exc}".replace("\n", " ")) from None
    except (TypeError, ValueError, gym.error.Error) as exc:
        raise ConfigError(f"--env-kwargs for {env_id}: {exc}".replace("\n", " ")) from None
    try:
        wrappers, layer = [], env
        while isinstance(layer, gym.Wrapper):
            wrappers.append(type(layer))
            layer = layer.env
        return EnvProbe(env.observation_space, env.action_space, env.render_mode, tuple(wrappers))
    finally:
        env.close()


def probe_spaces(env_id: str, env_kwargs: dict[str, Any]) -> tuple[gym.Space, gym.Space]:
    """Build one env in this process to check the id and keyword arguments; return its spaces.

    :raises ConfigError: when the env cannot be built with these arguments
    """
    probe = probe_env(env_id, env_kwargs)
    return probe.observation_space, probe.action_space


def make_vec_env(
    env_id: str,
    n_envs: int,
    kind: str,
    seed: int | None = 0,
    env_kwargs: dict[str, Any] | None = None,
    normalize: bool = False,
    normalize_reward: bool = False,
    gamma: float = 0.99,
    normalize_stats: str | Path | None = None,
    threads: int = 1,
) -> VecEnv:
    """Build the training env.

    :param env_id: a registered Gymnasium id
    :param n_envs: number of envs
    :param kind: ``native`` (Mission Gym's or a MuJoCo task's own), ``subproc`` (its workers start at the first
        reset) or ``dummy`` (see :func:`resolve_kind` for ``auto``)
    :param seed: env ``i`` is seeded with ``seed + i`` at the first reset
    :param env_kwargs: keyword arguments of the env (Mission Gym: config sections, ``config_dir``, ``scenario``)
    :param normalize: wrap in ``VecNormalize`` (observations)
    :param normalize_reward: also normalise rewards
    :param gamma: discount for the reward normaliser
    :param normalize_stats: a saved ``VecNormalize`` pickle whose statistics to continue from
    :param threads: CPU threads the ``native`` env steps its games on (the same results whatever the count)
    :raises ConfigError: for an unknown env id or env arguments the env rejects
    """
    from stable_baselines3.common.vec_env import DummyVecEnv, VecMonitor

    env_kwargs = dict(env_kwargs or {})
    if kind == "native" and env_id == ENV_ID:
        from mission_gym.envs import MissionVecEnv

        try:
            venv: VecEnv = MissionVecEnv(n_envs, seed=seed, threads=threads, **env_kwargs)
        except TypeError as exc:
            raise ConfigError(f"--env-kwargs for {env_id}: {exc}") from None
    elif kind == "native":
        from mission_gym.vec.mujoco_vec import MujocoVecEnv

        probe_env(env_id, env_kwargs)
        try:
            venv = MujocoVecEnv(env_id, n_envs, env_kwargs)
        except ValueError as exc:
            raise ConfigError(f"--vec-env native: {exc}") from None
        if seed is not None:
            venv.seed(seed)
    else:
        probe = probe_env(env_id, env_kwargs)
        if kind == "subproc":
            from mission_gym.vec.subproc import DeferredSubprocVecEnv

            fns: list[Callable[[], gym.Env]] = [EnvFactory(env_id, env_kwargs, in_worker=True) for _ in range(n_envs)]
            # the workers start at the first reset (training), not here: checking a configuration starts no process
            venv = DeferredSubprocVecEnv(fns, probe.observation_space, probe.action_space, probe.render_mode, probe.wrappers)
        elif kind == "dummy":
            venv = DummyVecEnv([EnvFactory(env_id, env_kwargs) for _ in range(n_envs)])
        else:
            raise ConfigError(f"vec-env kind {kind!r} is not valid; valid: {', '.join(VEC_ENV_KINDS)}")
        if seed is not None:
            venv.seed(seed)
    return _wrap(VecMonitor(venv), normalize, normalize_reward, gamma, normalize_stats)


def _wrap(venv: VecEnv, normalize: bool, normalize_reward: bool, gamma: float, stats: str | Path | None) -> VecEnv:
    """``venv`` under a ``VecNormalize`` when asked for one: continuing from saved ``stats``, or new."""
    from stable_baselines3.common.vec_env import VecNormalize

    if stats is not None:
        venv = VecNormalize.load(str(stats), venv)
        venv.training = True
        venv.norm_reward = normalize_reward
    elif normalize:
        norm_obs = isinstance(venv.observation_space, gym.spaces.Box)
        venv = VecNormalize(venv, norm_obs=norm_obs, norm_reward=normalize_reward, gamma=gamma)
    return venv


def find_vec_normalize(venv: Any) -> VecNormalize | None:
    """The ``VecNormalize`` layer of a wrapped vec env, if any."""
    from stable_baselines3.common.vec_env import VecNormalize, unwrap_vec_wrapper

    return unwrap_vec_wrapper(venv, VecNormalize)
