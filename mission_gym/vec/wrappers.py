"""What a task's env is made of besides its id and arguments: the Gymnasium wrappers a recipe puts around it
(``env_wrapper:``, the zoo's key, by name) and the packages that register ids of their own (ALE's, Gymnasium
Robotics'), imported when an id they own is asked for.

This module imports no SB3 or torch at the top: env worker processes import it to build their env.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from mission_gym.config.loader import suggest
from mission_gym.config.yaml_io import ConfigError

#: ``env_wrapper`` names -> ``module:Class``. A wrapper is named, never a path a file gives, so an agent file someone
#: else made imports nothing but these and Gymnasium's own (``gymnasium.wrappers.<Name>``).
WRAPPERS: dict[str, str] = {
    # SB3's Atari preprocessing (no-op starts, frame skip 4 with max-pooling, a life lost ends a training episode, 84x84
    # grey, rewards clipped to their sign), as rl-baselines3-zoo's `atari` block wraps every ALE game
    "atari": "stable_baselines3.common.atari_wrappers:AtariWrapper",
}
_GYMNASIUM_WRAPPERS = "gymnasium.wrappers."
#: packages that register Gymnasium ids of their own when imported, tried in turn for an id not registered yet (the
#: zoo imports the same ones); an id's namespace names its package first
PROVIDERS: tuple[str, ...] = ("ale_py", "gymnasium_robotics")
_NAMESPACES = {"ALE": "ale_py"}


def ensure_registered(env_id: str) -> bool:
    """Make ``env_id`` known to Gymnasium if a package of :data:`PROVIDERS` that is installed registers it; whether
    it is registered now. What they print on import (notices about ids the user did not ask for) and ALE's banner at
    every env made are not shown."""
    if env_id in gym.registry:
        return True
    namespace = env_id.split("/", 1)[0] if "/" in env_id else None
    first = [_NAMESPACES[namespace]] if namespace in _NAMESPACES else []
    for module in dict.fromkeys([*first, *PROVIDERS]):
        try:
            with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
                warnings.simplefilter("ignore")
                imported = importlib.import_module(module)
        except ImportError:
            continue
        if module == "ale_py":
            imported.ALEInterface.setLoggerMode(imported.LoggerMode.Error)
        register = getattr(gym, "register_envs", None)
        if register is not None:
            register(imported)
        if env_id in gym.registry:
            return True
    return False


def _mujoco_warning(message: str) -> None:
    """MuJoCo's warnings in Python: a deprecation in a model file (Gymnasium's ``half_cheetah.xml`` sets
    ``settotalmass``) is dropped, as nothing a user of the task can change; anything else is a Python warning."""
    if "is deprecated" in message:
        return
    warnings.warn(f"MuJoCo: {message}", RuntimeWarning, stacklevel=2)


def quiet_mujoco(env_id: str) -> None:
    """Route MuJoCo's C-level warnings through :func:`_mujoco_warning` in this process when ``env_id`` (a registered
    id) is a MuJoCo task: by default MuJoCo prints them to stdout and appends them to ``MUJOCO_LOG.TXT`` in the working
    directory (``mujoco.set_mju_user_warning`` replaces both). A handler already set is kept. Every env the trainer
    builds (:class:`~mission_gym.vec.factory.EnvFactory`, in worker processes too) calls it first."""
    import gymnasium as gym

    try:
        entry = gym.spec(env_id.partition(":")[2] if ":" in env_id else env_id).entry_point
    except gym.error.Error:  # not registered (yet): nothing of MuJoCo's is loaded for it
        return
    module = entry if isinstance(entry, str) else getattr(entry, "__module__", "") or ""
    if "mujoco" not in module:
        return
    try:
        import mujoco
    except ImportError:  # the env itself will say which extra to install
        return
    if mujoco.get_mju_user_warning() is None:
        mujoco.set_mju_user_warning(_mujoco_warning)


def make_kwargs(env_id: str, env_kwargs: Mapping[str, Any], env_wrapper: Sequence[Any] = ()) -> dict[str, Any]:
    """``gym.make``'s keyword arguments for ``env_id`` inside these wrappers: an ALE game that skips frames itself
    (ALE's v5 ids skip 4) is made with ``frameskip=1`` under the ``atari`` wrapper, which skips 4 frames and max-pools
    the last two itself (SB3's AtariWrapper is for envs that do not skip: 16 frames an action otherwise), unless the
    arguments set a frame skip."""
    kwargs = dict(env_kwargs)
    if "frameskip" in kwargs or "atari" not in [name for name, _ in wrapper_entries(env_wrapper)]:
        return kwargs
    try:
        spec = gym.spec(env_id.partition(":")[2] if ":" in env_id else env_id)
    except gym.error.Error:
        return kwargs
    if "ale_py" in str(spec.entry_point) and spec.kwargs.get("frameskip", 1) != 1:
        kwargs["frameskip"] = 1
    return kwargs


def wrapper_entries(spec: Sequence[Any] | None) -> list[tuple[str, dict[str, Any]]]:
    """``env_wrapper`` entries as ``(name, keyword arguments)``: a name, or a mapping of one name to its arguments.

    :raises ConfigError: for an entry of another form, or a name that is neither registered nor Gymnasium's
    """
    out = []
    for entry in spec or []:
        kwargs: dict[str, Any]
        if isinstance(entry, str):
            name, kwargs = entry, {}
        elif isinstance(entry, Mapping) and len(entry) == 1:
            name, kwargs = next(iter(entry.items()))
            kwargs = dict(kwargs or {})
        else:
            raise ConfigError(f"env_wrapper: expected a wrapper name or {{name: {{arguments}}}}, got {entry!r}")
        if name not in WRAPPERS and not (name.startswith(_GYMNASIUM_WRAPPERS) and name.count(".") == 2):
            valid = ", ".join([*WRAPPERS, "gymnasium.wrappers.<Name>"])
            raise ConfigError(f"env_wrapper: unknown wrapper {name!r}{suggest(name, list(WRAPPERS))}; valid: {valid}")
        out.append((str(name), kwargs))
    return out


def wrapper_class(name: str) -> type[gym.Wrapper]:
    """The class of a wrapper name (:func:`wrapper_entries` has checked it).

    :raises ConfigError: when it cannot be imported
    """
    module, _, attr = (WRAPPERS.get(name) or ":".join(name.rsplit(".", 1))).partition(":")
    try:
        cls = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"env_wrapper {name!r}: cannot import {module}.{attr}: {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, gym.Wrapper)):
        raise ConfigError(f"env_wrapper {name!r}: {module}.{attr} is not a Gymnasium wrapper")
    return cls


def wrap(env: gym.Env, spec: Sequence[Any] | None) -> gym.Env:
    """``env`` inside the wrappers of ``env_wrapper``, the first innermost (as the zoo applies them)."""
    for name, kwargs in wrapper_entries(spec):
        try:
            env = wrapper_class(name)(env, **kwargs)
        except (TypeError, ValueError, AssertionError) as exc:
            raise ConfigError(f"env_wrapper {name!r} with {kwargs}: {exc}") from None
    return env


class FrameStack(gym.Wrapper):
    """The last ``n`` observations of one env stacked as SB3's ``VecFrameStack`` stacks a vector env's (an image on
    its channels, anything else on its last axis, a Dict key by key): a policy trained on a stacked vector env acts
    in a single env that shows it the same observations (watching and recording an agent).

    :param env: the env
    :param n: frames stacked
    """

    def __init__(self, env: gym.Env, n: int) -> None:
        from stable_baselines3.common.vec_env.stacked_observations import StackedObservations

        super().__init__(env)
        self._stack: Any = StackedObservations(1, n, env.observation_space)  # type: ignore[arg-type]
        self.observation_space = self._stack.stacked_observation_space

    def _one(self, obs: Any) -> Any:
        return {k: v[0] for k, v in obs.items()} if isinstance(obs, dict) else obs[0]

    def _batch(self, obs: Any) -> Any:
        return {k: v[None] for k, v in obs.items()} if isinstance(obs, dict) else obs[None]

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        return self._one(self._stack.reset(self._batch(obs))), info

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        stacked, _ = self._stack.update(self._batch(obs), np.array([False]), [info])
        return self._one(stacked), reward, terminated, truncated, info
