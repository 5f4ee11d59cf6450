"""The settings only Mission Gym's game has, beside the run's configuration (:mod:`~mission_gym.settings.schema`):
a curriculum over its game settings and a distillation by its defenders' modes (the restarts from its recorded
states are :mod:`~mission_gym.settings.starts`). Another task refuses them
(:meth:`~mission_gym.settings.schema.TrainConfig.game_settings`).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CurriculumStep(_Strict):
    """Another game for part of the run (``curriculum:`` in a preset; :mod:`mission_gym.extras.curriculum`): from
    env step ``start`` the training envs play ``setting`` at ``value``, moving linearly to the game's own value by
    ``until``. Evaluation always plays the game's own value."""

    setting: str = Field(min_length=1, description="dotted game setting, e.g. engagement.capture.time_to_capture")
    value: float = Field(description="the setting's value at the step's start")
    until: int = Field(gt=0, description="env step where the game's own value is back")
    start: int = Field(0, ge=0, description="env step where the step begins")

    @model_validator(mode="after")
    def _check_span(self) -> CurriculumStep:
        if self.until <= self.start:
            raise ValueError(
                f"curriculum: {self.setting} must start before its until, got start {self.start:,} until {self.until:,}"
            )
        return self


class DistillTeacher(_Strict):
    """A teacher of a distillation: a saved model (its VecNormalize statistics beside it) and the situations whose
    games it teaches: the defenders' modes sorted and joined, e.g. ``guard_objective+patrol``. A teacher listing no
    situation teaches every game no other teacher lists."""

    model: str = Field(min_length=1, description="a saved model file, e.g. runs/RUN/best_model.zip")
    situations: list[str] = Field(default_factory=list, description="e.g. patrol+patrol, guard_objective+guard_objective")

    @field_validator("situations")
    @classmethod
    def _check_situations(cls, value: list[str]) -> list[str]:
        modes = ("patrol", "guard_objective", "intercept")
        for key in value:
            parts = key.split("+")
            if any(p not in modes for p in parts) or parts != sorted(parts):
                raise ValueError(
                    f"situation {key!r} is not the defenders' modes sorted and joined by '+' (modes: {', '.join(modes)})"
                )
        return value


class Distill(_Strict):
    """PPO plus ``kl_coef × KL(teacher ‖ student)`` towards each game's teacher, chosen by its defenders' modes
    (:mod:`mission_gym.ppo.distill`); the coefficient falls linearly from ``start`` to 0 at ``until``, plain PPO
    after. Without any teacher's ``situations``, each situation goes to the teacher that wins most of its games."""

    teachers: list[DistillTeacher] = Field(min_length=1)
    kl_coef: float = Field(1.0, gt=0, description="the KL's weight at start")
    start: int = Field(0, ge=0, description="env step the distillation starts at")
    until: int = Field(gt=0, description="env step the KL's weight reaches 0")

    @model_validator(mode="after")
    def _check(self) -> Distill:
        if self.until <= self.start:
            raise ValueError(f"distill: until ({self.until:,}) must come after start ({self.start:,})")
        if sum(1 for t in self.teachers if not t.situations) > 1 and any(t.situations for t in self.teachers):
            raise ValueError("distill: at most one teacher without situations (it teaches the games no other lists)")
        listed = [key for t in self.teachers for key in t.situations]
        if len(listed) != len(set(listed)):
            raise ValueError(f"distill: a situation has two teachers ({listed})")
        return self


class DistillStage(_Strict):
    """At a cut, the best scored model of each situation (of every cut so far, ``min_games`` games at least)
    becomes its teacher and the members that carry on train as students (:class:`Distill`) over ``steps``."""

    steps: int = Field(gt=0, description="env steps over which the KL's weight falls to 0")
    kl_coef: float = Field(1.0, gt=0)
    min_games: int = Field(8, ge=1, description="scored games of a situation a teacher's win rate needs")
