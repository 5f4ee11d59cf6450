"""The vectorised training environment: ``native`` (an env's own batched VecEnv: Mission Gym's ``MissionVecEnv``,
:class:`~mission_gym.vec.mujoco_vec.MujocoVecEnv` for Hopper-v5, Walker2d-v5, HalfCheetah-v5, Ant-v5 and Humanoid-v5, or
:class:`~mission_gym.vec.classic_vec.ClassicVecEnv` for CartPole-v1 and Acrobot-v1), ``subproc``
or ``dummy``, always under a ``VecMonitor``, and under a ``VecNormalize`` when the configuration asks for one.

This module imports no SB3 or torch at the top: env worker processes import it to build their env.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import signal
from collections.abc import Callable, Sequence
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
from mission_gym.vec.wrappers import ensure_registered, make_kwargs, quiet_mujoco, wrap

if TYPE_CHECKING:
    from stable_baselines3.common.vec_env import VecEnv, VecNormalize


def _register_mission(env_id: str) -> None:
    if env_id == ENV_ID:
        import mission_gym.envs  # noqa: F401  (registers MissionGym-v0)


def check_env_id(env_id: str) -> None:
    """Raise a :class:`ConfigError` naming the closest registered id when ``env_id`` is not registered (after
    importing the module of a ``module:Id`` and the installed packages that register ids of their own:
    :func:`~mission_gym.vec.wrappers.ensure_registered`)."""
    _register_mission(env_id)
    if ":" in env_id:  # "module:EnvId": the module registers the id when imported (as gym.make does)
        module, _, env_id = env_id.partition(":")
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ConfigError(f"--env {module}:{env_id}: cannot import module {module!r}: {exc}") from None
    if not ensure_registered(env_id):
        valid = [*gym.registry, ENV_ID]
        hint = suggest(env_id, valid)
        extras = [f"'mission_gym[{extra}]' ({what})" for module, extra, what in _PROVIDER_EXTRAS
                  if importlib.util.find_spec(module) is None]  # fmt: skip
        more = f"; pip install {' or '.join(extras)} registers more" if extras else ""
        raise ConfigError(f"--env {env_id!r} is not a registered Gymnasium id{hint}; e.g. {ENV_ID}, Hopper-v5{more}")


#: the packages of :data:`~mission_gym.vec.wrappers.PROVIDERS` with the extra that installs each
_PROVIDER_EXTRAS = (("ale_py", "atari", "ALE's games"), ("gymnasium_robotics", "robotics", "Gymnasium Robotics' tasks"))


#: the Gymnasium ids with a ``native`` VecEnv besides Mission Gym (:mod:`mission_gym.vec.mujoco_vec`)
NATIVE_MUJOCO = ("Hopper-v5", "Walker2d-v5", "HalfCheetah-v5", "Ant-v5", "Humanoid-v5")
#: ... and those of :mod:`mission_gym.vec.classic_vec`
NATIVE_CLASSIC = ("CartPole-v1", "Acrobot-v1")


def has_native(env_id: str, env_kwargs: dict[str, Any] | None = None, env_wrapper: Sequence[Any] = ()) -> bool:
    """Whether ``env_id`` has a batched VecEnv of its own: Mission Gym, and the MuJoCo and classic-control tasks
    :class:`~mission_gym.vec.mujoco_vec.MujocoVecEnv` and :class:`~mission_gym.vec.classic_vec.ClassicVecEnv` step
    (unless their arguments ask for something they do not do, such as rendering, or a recipe wraps them)."""
    if env_id == ENV_ID:
        return True
    if env_wrapper:
        return False
    from mission_gym.vec.gym_batch import can_batch

    if env_id in NATIVE_CLASSIC:
        from mission_gym.vec import classic_vec

        return can_batch(env_id, env_kwargs, classic_vec.unsupported_reason)
    if env_id not in NATIVE_MUJOCO:
        return False
    quiet_mujoco(env_id)
    from mission_gym.vec import mujoco_vec

    return can_batch(env_id, env_kwargs, mujoco_vec.unsupported_reason)


def resolve_kind(
    kind: str,
    env_id: str,
    n_envs: int,
    cores: int,
    env_kwargs: dict[str, Any] | None = None,
    env_wrapper: Sequence[Any] = (),
    step_worth_a_process: bool = True,
) -> str:
    """The vec-env kind for ``auto``: native where the env has one (:func:`has_native`), else subproc for several envs
    and cores when a step is worth a process (:mod:`mission_gym.vec.probe` measures it), else dummy.

    :raises ConfigError: for ``native`` with an env that has none
    """
    if kind == "auto":
        if has_native(env_id, env_kwargs, env_wrapper):
            return "native"
        return "subproc" if n_envs > 1 and cores > 1 and step_worth_a_process else "dummy"
    if kind == "native" and not has_native(env_id, env_kwargs, env_wrapper):
        raise ConfigError(
            f"--vec-env native is the batched env of {ENV_ID} and of {', '.join(NATIVE_MUJOCO + NATIVE_CLASSIC)} (with "
            f"arguments it supports, unwrapped), not of {env_id}; use subproc or dummy"
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
    :param env_wrapper: the recipe's wrappers (:mod:`mission_gym.vec.wrappers`), with SB3's ``Monitor`` under them
        so that an episode's return is the task's own (a wrapper may clip rewards or end episodes early)
    """

    env_id: str
    env_kwargs: dict[str, Any]
    in_worker: bool = False
    env_wrapper: tuple[Any, ...] = ()

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
        bare = self.env_id.partition(":")[2] if ":" in self.env_id else self.env_id
        ensure_registered(bare)
        quiet_mujoco(bare)
        env = gym.make(self.env_id, **make_kwargs(self.env_id, self.env_kwargs, self.env_wrapper))
        if not self.env_wrapper:
            return env
        from stable_baselines3.common.monitor import Monitor

        return wrap(Monitor(env), self.env_wrapper)


@dataclass(frozen=True)
class EnvProbe:
    """What one env built in this process tells about an env id, its arguments and a recipe's wrappers.

    :param observation_space: the observation space the policy sees (after the wrappers and the frame stack)
    :param action_space: the action space
    :param render_mode: the env's ``render_mode``
    :param wrappers: the classes of the Gymnasium wrappers around such an env, outermost first
    """

    observation_space: gym.Space
    action_space: gym.Space
    render_mode: str | None
    wrappers: tuple[type, ...]


def stacked_space(space: gym.Space, frame_stack: int | None) -> gym.Space:
    """The observation space of ``frame_stack`` frames stacked as SB3's ``VecFrameStack`` stacks them (an image on
    its channels, anything else on its last axis; a Dict key by key)."""
    if not frame_stack or frame_stack == 1:
        return space
    from stable_baselines3.common.vec_env.stacked_observations import StackedObservations

    try:
        return StackedObservations(1, frame_stack, space).stacked_observation_space  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"frame_stack {frame_stack}: {exc}") from None


def probe_env(
    env_id: str, env_kwargs: dict[str, Any], env_wrapper: Sequence[Any] = (), frame_stack: int | None = None
) -> EnvProbe:
    """Build one env in this process to check the id, keyword arguments and wrappers; what it tells.

    :raises ConfigError: when the env cannot be built with these arguments
    """
    check_env_id(env_id)
    try:
        env = EnvFactory(env_id, env_kwargs, env_wrapper=tuple(env_wrapper))()
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
        obs_space = stacked_space(env.observation_space, frame_stack)
        return EnvProbe(obs_space, env.action_space, env.render_mode, tuple(wrappers))
    finally:
        env.close()


def probe_spaces(
    env_id: str, env_kwargs: dict[str, Any], env_wrapper: Sequence[Any] = (), frame_stack: int | None = None
) -> tuple[gym.Space, gym.Space]:
    """Build one env in this process to check the id, keyword arguments and wrappers; return the spaces a policy
    sees (:func:`probe_env`).

    :raises ConfigError: when the env cannot be built with these arguments
    """
    probe = probe_env(env_id, env_kwargs, env_wrapper, frame_stack)
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
    env_wrapper: Sequence[Any] = (),
    frame_stack: int | None = None,
) -> VecEnv:
    """Build the training env.

    :param env_id: a registered Gymnasium id
    :param n_envs: number of envs
    :param kind: ``native`` (Mission Gym's or a MuJoCo task's own), ``subproc`` (its workers start at the first
        reset) or ``dummy`` (see :func:`resolve_kind` for ``auto``)
    :param seed: env ``i`` is seeded with ``seed + i`` at the first reset
    :param env_kwargs: keyword arguments of the env (Mission Gym: config sections, ``config_dir``, ``scenario``)
    :param normalize: wrap in ``VecNormalize``: rewards as ``normalize_reward`` says, observations except images
        (a CNN takes an image's own pixels)
    :param normalize_reward: also normalise rewards
    :param gamma: discount for the reward normaliser
    :param normalize_stats: a saved ``VecNormalize`` pickle whose statistics to continue from
    :param threads: CPU threads the ``native`` env steps its games on (the same results whatever the count)
    :param env_wrapper: the recipe's Gymnasium wrappers (:mod:`mission_gym.vec.wrappers`); the episodes counted are
        then the task's own, recorded under them
    :param frame_stack: stack this many observations (SB3's ``VecFrameStack``)
    :raises ConfigError: for an unknown env id or env arguments the env rejects
    """
    from stable_baselines3.common.vec_env import VecFrameStack, VecMonitor

    wrappers = tuple(env_wrapper)
    venv = _base_vec_env(env_id, n_envs, kind, seed, dict(env_kwargs or {}), threads, wrappers)
    if not wrappers:  # a wrapped env's own Monitor records its episodes (VecMonitor would replace them)
        venv = VecMonitor(venv)
    if frame_stack and frame_stack > 1:
        venv = VecFrameStack(venv, frame_stack)
    return _wrap(venv, normalize, normalize_reward, gamma, normalize_stats)


def _base_vec_env(
    env_id: str, n_envs: int, kind: str, seed: int | None, env_kwargs: dict[str, Any], threads: int, wrappers: tuple[Any, ...]
) -> VecEnv:
    """The envs of :func:`make_vec_env` before its VecEnv wrappers, seeded."""
    from stable_baselines3.common.vec_env import DummyVecEnv

    if kind == "native" and env_id == ENV_ID:
        from mission_gym.envs import MissionVecEnv

        try:
            return MissionVecEnv(n_envs, seed=seed, threads=threads, **env_kwargs)
        except TypeError as exc:
            raise ConfigError(f"--env-kwargs for {env_id}: {exc}") from None
    venv: VecEnv
    if kind == "native":
        from mission_gym.vec.classic_vec import ClassicVecEnv
        from mission_gym.vec.mujoco_vec import MujocoVecEnv

        if wrappers:
            raise ConfigError(f"--vec-env native steps {env_id} unwrapped; env_wrapper {list(wrappers)}: use subproc or dummy")
        probe_env(env_id, env_kwargs)
        try:
            if env_id in NATIVE_CLASSIC:  # its kernel steps 16 envs in microseconds: no threads to spread it over
                venv = ClassicVecEnv(env_id, n_envs, env_kwargs)
            else:
                venv = MujocoVecEnv(env_id, n_envs, env_kwargs, threads)
        except ValueError as exc:
            raise ConfigError(f"--vec-env native: {exc}") from None
    elif kind == "subproc":
        from mission_gym.vec.subproc import DeferredSubprocVecEnv

        probe = probe_env(env_id, env_kwargs, wrappers)
        fns: list[Callable[[], gym.Env]] = [
            EnvFactory(env_id, env_kwargs, in_worker=True, env_wrapper=wrappers) for _ in range(n_envs)
        ]
        # the workers start at the first reset (training), not here: checking a configuration starts no process
        venv = DeferredSubprocVecEnv(fns, probe.observation_space, probe.action_space, probe.render_mode, probe.wrappers)
    elif kind == "dummy":
        probe_env(env_id, env_kwargs, wrappers)
        venv = DummyVecEnv([EnvFactory(env_id, env_kwargs, env_wrapper=wrappers) for _ in range(n_envs)])
    else:
        raise ConfigError(f"vec-env kind {kind!r} is not valid; valid: {', '.join(VEC_ENV_KINDS)}")
    if seed is not None:
        venv.seed(seed)
    return venv


def make_eval_env(
    env_id: str, env_kwargs: dict[str, Any] | None = None, env_wrapper: Sequence[Any] = (), frame_stack: int | None = None
) -> VecEnv:
    """One env as a training env of the same recipe sees it (its wrappers and frame stack, no normalisation), with
    SB3's ``Monitor`` under the wrappers: what evaluation plays, each episode's return the task's own.

    :raises ConfigError: for an unknown env id or env arguments the env rejects
    """
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv, VecFrameStack

    wrappers = tuple(env_wrapper)
    probe_env(env_id, dict(env_kwargs or {}), wrappers)
    factory = EnvFactory(env_id, dict(env_kwargs or {}), env_wrapper=wrappers)
    venv: VecEnv = DummyVecEnv([factory if wrappers else (lambda: Monitor(factory()))])
    return VecFrameStack(venv, frame_stack) if frame_stack and frame_stack > 1 else venv


def _wrap(venv: VecEnv, normalize: bool, normalize_reward: bool, gamma: float, stats: str | Path | None) -> VecEnv:
    """``venv`` under a ``VecNormalize`` when asked for one: continuing from saved ``stats``, or new. Observations
    are normalised where they are vectors: a Box that is not an image, and a Dict's keys that are such Boxes."""
    from stable_baselines3.common.vec_env import VecNormalize

    if stats is not None:
        venv = VecNormalize.load(str(stats), venv)
        venv.training = True
        venv.norm_reward = normalize_reward
    elif normalize:
        keys = normalized_keys(venv.observation_space)
        norm_obs = keys is None or bool(keys)
        venv = VecNormalize(venv, norm_obs=norm_obs, norm_reward=normalize_reward, gamma=gamma, norm_obs_keys=keys or None)
    return venv


def policy_space(space: gym.Space) -> gym.Space:
    """The observation space SB3's policy sees for an env's: its images channels first (SB3 wraps an env of
    channels-last images in ``VecTransposeImage``), a Dict's image keys too."""
    from stable_baselines3.common.preprocessing import is_image_space, is_image_space_channels_first
    from stable_baselines3.common.vec_env import VecTransposeImage

    if isinstance(space, gym.spaces.Dict):
        return gym.spaces.Dict({k: policy_space(sub) for k, sub in space.spaces.items()})
    if isinstance(space, gym.spaces.Box) and is_image_space(space) and not is_image_space_channels_first(space):
        return VecTransposeImage.transpose_space(space)
    return space


def normalized_keys(space: gym.Space) -> list[str] | None:
    """What ``VecNormalize`` normalises of an observation space: None for a whole vector Box, a Dict's vector Box
    keys, or ``[]`` for nothing (an image, or a space of another kind)."""
    from stable_baselines3.common.preprocessing import is_image_space

    if isinstance(space, gym.spaces.Dict):
        return [k for k, sub in space.spaces.items() if isinstance(sub, gym.spaces.Box) and not is_image_space(sub)]
    if isinstance(space, gym.spaces.Box) and not is_image_space(space):
        return None
    return []


def find_vec_normalize(venv: Any) -> VecNormalize | None:
    """The ``VecNormalize`` layer of a wrapped vec env, if any."""
    from stable_baselines3.common.vec_env import VecNormalize, unwrap_vec_wrapper

    return unwrap_vec_wrapper(venv, VecNormalize)
