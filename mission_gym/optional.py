"""The optional parts of the install (``pyproject.toml``'s extras): import one, or say in one line which
``pip install 'mission_gym[extra]'`` brings it.

The core install is what training and evaluating need; everything else is an extra, imported only where it is used.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from mission_gym.config.yaml_io import ConfigError

#: importable module -> (extra that installs it, the distribution to name)
EXTRAS: dict[str, tuple[str, str]] = {
    "mujoco": ("mujoco", "MuJoCo"),
    "imageio": ("video", "imageio"),
    "imageio_ffmpeg": ("video", "imageio-ffmpeg"),
    "matplotlib": ("plot", "matplotlib"),
    "pygame": ("play", "pygame"),
    "ray": ("ray", "Ray"),
    "wandb": ("track", "wandb"),
    "huggingface_hub": ("hub", "huggingface_hub"),
    "optuna": ("search", "Optuna"),
    "cmaes": ("search", "cmaes"),
}


class MissingExtra(ConfigError, ModuleNotFoundError):
    """An optional package is not installed; the message is one line naming the ``pip install`` that brings it.

    A :class:`~mission_gym.config.ConfigError`, so every command reports it as bad input (one line, exit status 2).
    """


def install_hint(module: str) -> str:
    """``pip install 'mission_gym[extra]'`` for an optional module."""
    extra = EXTRAS[module.split(".")[0]][0]
    return f"pip install 'mission_gym[{extra}]'"


def missing(module: str, purpose: str) -> MissingExtra:
    """The error for an optional module that is not installed.

    :param module: the module's import name (a key of :data:`EXTRAS`)
    :param purpose: what needs it, e.g. ``"--track"``
    """
    name = EXTRAS[module.split(".")[0]][1]
    return MissingExtra(f"{purpose} needs {name}, which is not installed: {install_hint(module)}")


def require(module: str, purpose: str) -> ModuleType:
    """Import an optional module, or raise :class:`MissingExtra` naming its extra.

    :param module: the module's import name (its top-level package a key of :data:`EXTRAS`)
    :param purpose: what needs it, for the message
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if exc.name is not None and exc.name.split(".")[0] != module.split(".")[0]:
            raise  # the module is there but one of its own dependencies is broken: show that
        raise missing(module, purpose) from exc
