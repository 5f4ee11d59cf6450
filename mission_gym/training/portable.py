"""Model files that load without Mission Gym: ``stable_baselines3.PPO.load`` needs only SB3 (and the env to act in).

SB3 pickles a model's schedules into its zip. A run's phased learning rate
(:class:`~mission_gym.ppo.schedules.PhasedSchedule`) is a Mission Gym object, so a zip holding it could not be
unpickled where the package is not installed. :func:`portable` swaps each schedule for an SB3-native one while the
file is written (a phased schedule becomes SB3's ``ConstantSchedule`` at its current value; SB3's own
``LinearSchedule`` and constants stay), and :func:`restore_schedules` rebuilds the run's real schedules from its
configuration when a checkpoint is resumed. The lean entropy distribution (:mod:`mission_gym.ppo.entropy`) lives on
the policy object, which SB3 saves as a state dict only, so it never reaches the file.

The optional ``trunk`` policy stores its features extractor class (:class:`mission_gym.extras.trunk.MlpTrunk`) in the
model's ``policy_kwargs``; such a model needs the package to load.
"""

from __future__ import annotations

import base64
import contextlib
import json
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from stable_baselines3.common.utils import ConstantSchedule, FloatSchedule, LinearSchedule

from mission_gym.ppo.schedules import learning_rate_schedule
from mission_gym.settings.schema import TrainConfig

_SCHEDULES = ("learning_rate", "lr_schedule", "clip_range", "clip_range_vf")


def sb3_native(schedule: Any, progress_remaining: float) -> Any:
    """``schedule`` as SB3's own object: floats, ``ConstantSchedule`` and ``LinearSchedule`` as they are (inside a
    ``FloatSchedule`` if they were), anything else a ``ConstantSchedule`` of its value at ``progress_remaining``."""
    if schedule is None or isinstance(schedule, int | float | ConstantSchedule | LinearSchedule):
        return schedule
    if isinstance(schedule, FloatSchedule):
        inner = sb3_native(schedule.value_schedule, progress_remaining)
        return FloatSchedule(inner)
    return ConstantSchedule(float(schedule(progress_remaining)))


@contextlib.contextmanager
def portable(model: Any) -> Iterator[None]:
    """While the block runs (a ``model.save``), the model's schedules are SB3-native (see the module doc)."""
    saved = {name: getattr(model, name) for name in _SCHEDULES if hasattr(model, name)}
    progress = float(getattr(model, "_current_progress_remaining", 1.0))
    try:
        for name, value in saved.items():
            setattr(model, name, sb3_native(value, progress))
        yield
    finally:
        for name, value in saved.items():
            setattr(model, name, value)


def restore_schedules(model: Any, config: TrainConfig) -> None:
    """Give a model loaded from a checkpoint the run's own schedules (phases included), from its configuration."""
    model.learning_rate = learning_rate_schedule(config.learning_rate, config.lr_schedule, config.phases, config.timesteps)
    model._setup_lr_schedule()
    model.clip_range = FloatSchedule(learning_rate_schedule(config.clip_range, config.clip_schedule))


def foreign_references(model_zip: str | Path, package: str = "mission_gym") -> list[str]:
    """The entries of a saved model whose pickles name ``package`` (what would fail to load without it)."""
    with zipfile.ZipFile(model_zip) as archive:
        data = json.loads(archive.read("data").decode())
    found = []
    for key, value in data.items():
        text = json.dumps(value)
        if package in text:
            found.append(key)
            continue
        if isinstance(value, dict) and ":serialized:" in value:
            if package.encode() in base64.b64decode(value[":serialized:"]):
                found.append(key)
    return found
