"""Optional parts of a run, registered by name, the way sb3-contrib sits beside SB3.

The PPO run knows the parts only by name and entry point (``"module:attribute"``, imported when a run uses the
part), so the core never imports them and a package of your own can add some with :func:`register_policy` and
:func:`register_run_part` (the registry is :mod:`mission_gym.settings.registry`, where a configuration's names are
checked; this module builds the run parts they name).

- A **policy** (``policy:`` in a preset) is a function ``(policy_kwargs) -> (policy, policy_kwargs)`` giving SB3's
  ``PPO`` its policy class (or name) and arguments. ``mlp`` is SB3's ``MlpPolicy``. It is built by
  :func:`mission_gym.agents.spec.policy_args`, for training and for rebuilding a saved agent alike.
- A **run part** hooks into every training session: a function ``(config, venv, step) -> BaseCallback | None``
  called once the training env is built (``step``: where the session starts). It checks its own settings (raising
  :class:`~mission_gym.config.ConfigError`), prepares the env, and returns the callback that drives it, or None when
  the configuration does not use it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mission_gym.settings.registry import POLICIES, RUN_PARTS, load, register_policy, register_run_part

if TYPE_CHECKING:
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.vec_env import VecEnv

#: (config: a :class:`~mission_gym.settings.schema.TrainConfig`, training env, step) -> callback or None
RunPart = Callable[[Any, "VecEnv", int], "BaseCallback | None"]
__all__ = ["POLICIES", "RUN_PARTS", "load", "register_policy", "register_run_part", "session_callbacks"]


def session_callbacks(config: Any, venv: VecEnv, step: int) -> list[BaseCallback]:
    """The callbacks of every run part the configuration uses, its env prepared for a session starting at ``step``.

    :raises ConfigError: from a part whose settings do not fit the env
    """
    out = []
    for entry in RUN_PARTS.values():
        part: RunPart = load(entry)
        callback = part(config, venv, step)
        if callback is not None:
            out.append(callback)
    return out
