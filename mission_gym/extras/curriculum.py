"""A curriculum over game settings: the training envs play another game for part of the run (an easier one at the
start, or more of what the agent still loses later) and reach the real one.

``curriculum:`` in a preset (see :class:`~mission_gym.settings.schema.CurriculumStep`) lists settings such as
``engagement.capture.time_to_capture`` with a value at the step's start (env step 0 unless ``start`` says) and the
env step by which the game's own value is reached. :class:`CurriculumCallback` sets them on
Mission Gym's batched training env before each rollout (games in progress play on under the new value); the
evaluation envs are built from the run's ``env_kwargs`` and always play the real game. Values follow the step
count, so ``--resume`` continues the ramp.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from stable_baselines3.common.callbacks import BaseCallback

from mission_gym.config import ConfigError, MissionConfig, get_setting, with_settings
from mission_gym.settings.schema import TrainConfig
from mission_gym.training.callbacks import run_progress


class Curriculum:
    """The training game's config at each point of a run.

    :param config: the real game (the run's env config), whose values each step ends at
    :param steps: objects with ``setting``, ``value``, ``start`` and ``until`` (env steps)
    :param timesteps: the run's length, which the steps' positions are counted in
    :raises ConfigError: for an unknown or non-numeric setting, or a starting value the setting rejects
    """

    def __init__(self, config: MissionConfig, steps: Sequence[Any], timesteps: int) -> None:
        self.config = config
        self.timesteps = timesteps
        # positions as fractions of the run, the unit of SB3's progress
        self.steps = tuple(_Span(s.setting, s.value, s.start / timesteps, s.until / timesteps) for s in steps)
        self.targets: dict[str, float] = {}
        self.integers: set[str] = set()  # integer settings ramp in whole steps
        for step in self.steps:
            target = get_setting(config, step.setting)
            if isinstance(target, bool) or not isinstance(target, numbers.Real):
                raise ConfigError(
                    f"curriculum: setting {step.setting!r} is {target!r}, not a number; a curriculum ramps numbers"
                )
            self.targets[step.setting] = float(target)
            if isinstance(target, numbers.Integral):
                self.integers.add(step.setting)
            if step.setting in self.integers and step.value != round(step.value):
                raise ConfigError(f"curriculum: {step.setting} is a whole number, got value {step.value!r}")
        # The values move linearly between the steps' ``until`` points, and every rule a setting has is a range
        # or (the defenders' mode_probs) a sum, so a game valid at each of those points is valid all along.
        for progress in sorted({0.0, *(p for step in self.steps for p in (step.start, step.until))}):
            try:
                self.config_at(progress)
            except ConfigError as exc:
                values = ", ".join(f"{key} {value:g}" for key, value in self.values(progress).items())
                where = "at the start" if progress == 0.0 else f"at step {round(progress * timesteps):,}"
                raise ConfigError(f"curriculum: {values} {where} is not valid: {exc}") from None

    def values(self, progress: float) -> dict[str, float | int]:
        """Each setting's value at ``progress`` (0 at the first step, 1 at the last); integer settings in whole steps.
        A setting follows its latest step that has started, and is at the game's own value before its first."""
        chosen = self.steps
        latest: dict[str, Any] = {}  # each setting's latest step that has started
        for step in sorted(chosen, key=lambda step: step.start):
            if step.start <= progress:
                latest[step.setting] = step
        out: dict[str, float | int] = {}
        for setting in dict.fromkeys(step.setting for step in chosen):
            target = self.targets[setting]
            value = target
            if (span := latest.get(setting)) is not None:
                frac = min(max((progress - span.start) / (span.until - span.start), 0.0), 1.0)
                value = span.value + (target - span.value) * frac
            out[setting] = round(value) if setting in self.integers else value
        return out

    def config_at(self, progress: float) -> MissionConfig:
        """The training game's configuration at ``progress``."""
        return with_settings(self.config, self.values(progress))


@dataclass(frozen=True)
class _Span:
    setting: str
    value: float
    start: float
    until: float


def mission_core(venv: Any) -> Any:
    """The :class:`~mission_gym.sim.MissionCore` behind a (wrapped) training env, or None if it has none."""
    inner = getattr(venv, "unwrapped", venv)
    return getattr(inner, "core", None)


class CurriculumCallback(BaseCallback):
    """Before each rollout, put the training env's game at the curriculum's values for the run's step count,
    and log them as ``curriculum/<setting>``.

    :param curriculum: the run's :class:`Curriculum`
    """

    def __init__(self, curriculum: Curriculum) -> None:
        super().__init__()
        self.curriculum = curriculum
        self.applied: dict[str, float] | None = None

    def _on_rollout_start(self) -> None:
        progress = run_progress(self.model)
        values = self.curriculum.values(progress)
        if values != self.applied:
            core = mission_core(self.training_env)
            core.set_config(self.curriculum.config_at(progress))
            self.applied = values
        for key, value in values.items():
            self.logger.record(f"curriculum/{key}", value)

    def _on_step(self) -> bool:
        return True


def curriculum_part(config: TrainConfig, venv: Any, step: int) -> CurriculumCallback | None:
    """The run part ``curriculum`` (:mod:`mission_gym.training.parts`): the training env set to the curriculum's game at
    ``step`` for its first resets, and the callback that moves it on; None without a curriculum.

    :raises ConfigError: for a training env without Mission Gym's batched core, or a bad setting or value
    """
    if not config.curriculum:
        return None
    core = mission_core(venv)
    if core is None:
        raise ConfigError(f"curriculum needs Mission Gym's batched training env (vec_env native), got {config.vec_env!r}")
    curriculum = Curriculum(core.config, config.curriculum, config.timesteps)
    try:
        core.set_config(curriculum.config_at(step / config.timesteps))
    except ValueError as exc:
        raise ConfigError(f"curriculum: {exc}") from None
    return CurriculumCallback(curriculum)
