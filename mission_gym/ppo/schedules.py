"""Learning-rate, entropy and epoch schedules over a run's progress, with optional phases.

A run's ``phases`` (see :class:`~mission_gym.settings.schema.Phase`) split it at env steps (here as fractions of its
timesteps, SB3's unit of progress);
each phase starts from its own value (a warm restart) and follows its schedule kind within its span (the run's
``lr_schedule`` unless the phase sets its own): ``constant`` holds the value, ``linear`` decays it to 0 at the
phase's end. Without phases this is SB3's ``LinearSchedule(value, 0, 1)`` or a constant. Schedules take SB3's
``progress_remaining`` (1 at the start of the run, 0 at its end), so they continue across ``--resume``.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PhasedSchedule:
    """``value(progress_remaining)``: phase ``i`` spans ``[starts[i], starts[i+1])`` of the run (``starts[0]`` is 0)
    and starts at ``values[i]``.

    :param starts: increasing phase start fractions, the first 0.0
    :param values: each phase's starting value
    :param kind: ``constant`` or ``linear`` (to 0 at the phase's end), one for all phases or one per phase
    """

    starts: tuple[float, ...]
    values: tuple[float, ...]
    kind: str | tuple[str, ...] = "linear"

    def __post_init__(self) -> None:
        if not self.starts or self.starts[0] != 0.0 or len(self.starts) != len(self.values):
            raise ValueError(f"phases need a start of 0.0 first and one value each, got {self.starts} / {self.values}")
        if any(b <= a for a, b in zip(self.starts, self.starts[1:])) or self.starts[-1] >= 1.0:
            raise ValueError(f"phase starts must increase inside [0, 1), got {self.starts}")
        kinds = self.kinds
        if len(kinds) != len(self.starts) or any(k not in ("constant", "linear") for k in kinds):
            raise ValueError(f"schedule kinds must be constant or linear, one per phase, got {self.kind!r}")

    @property
    def kinds(self) -> tuple[str, ...]:
        """Each phase's schedule kind."""
        return (self.kind,) * len(self.starts) if isinstance(self.kind, str) else tuple(self.kind)

    def phase(self, progress_remaining: float) -> int:
        """Index of the phase at this point of the run."""
        progress = min(max(1.0 - progress_remaining, 0.0), 1.0)
        return bisect.bisect_right(self.starts, progress) - 1

    def __call__(self, progress_remaining: float) -> float:
        i = self.phase(progress_remaining)
        if self.kinds[i] == "constant":
            return self.values[i]
        progress = min(max(1.0 - progress_remaining, 0.0), 1.0)
        end = self.starts[i + 1] if i + 1 < len(self.starts) else 1.0
        return self.values[i] * (1.0 - (progress - self.starts[i]) / (end - self.starts[i]))


def phase_values(initial: Any, phases: Sequence[Any], field: str, timesteps: int) -> tuple[tuple[float, ...], tuple[Any, ...]]:
    """Phase starts (fractions of the run) and each phase's value of ``field`` (a phase that leaves it unset keeps
    the previous one).

    :param initial: the run's own value (the first phase's)
    :param phases: objects with ``start`` (an env step) and ``field`` attributes
    :param field: ``learning_rate``, ``lr_schedule``, ``ent_coef`` or ``n_epochs``
    :param timesteps: the run's length
    """
    starts, values = [0.0], [initial]
    for p in phases:
        value = getattr(p, field)
        starts.append(p.start / timesteps)
        values.append(values[-1] if value is None else value)
    return tuple(starts), tuple(values)


def learning_rate_schedule(value: float, kind: str, phases: Sequence[Any] = (), timesteps: int = 1) -> Any:
    """What PPO's ``learning_rate`` gets: a float, SB3's linear schedule, or a :class:`PhasedSchedule` (phases start
    at env steps of a run of ``timesteps``)."""
    if phases:
        starts, values = phase_values(value, phases, "learning_rate", timesteps)
        kinds = phase_values(kind, phases, "lr_schedule", timesteps)[1]
        return PhasedSchedule(starts, values, kind=kinds)
    if kind == "linear":
        from stable_baselines3.common.utils import LinearSchedule

        return LinearSchedule(value, 0.0, 1.0)
    return value


def entropy_schedule(value: float, phases: Sequence[Any] = (), timesteps: int = 1) -> PhasedSchedule | None:
    """The entropy coefficient per phase (constant within each), or None when no phase changes it."""
    return _constant_per_phase(value, phases, "ent_coef", timesteps)


def epochs_schedule(value: int, phases: Sequence[Any] = (), timesteps: int = 1) -> PhasedSchedule | None:
    """PPO's passes over each rollout per phase, or None when no phase changes them."""
    return _constant_per_phase(value, phases, "n_epochs", timesteps)


def _constant_per_phase(value: Any, phases: Sequence[Any], field: str, timesteps: int) -> PhasedSchedule | None:
    starts, values = phase_values(value, phases, field, timesteps)
    return PhasedSchedule(starts, values, kind="constant") if len(set(values)) > 1 else None
