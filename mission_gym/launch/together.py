"""A population stage's members brought to their step in this process, as one batched learner per network shape
(``population.learner: batched``, :func:`~mission_gym.training.trainer.train_together`), instead of one launcher job
per member.

Each member is the run its :class:`MemberTask` describes, the run its process would make (``train_ppo --preset
members/<name>.yaml`` or ``--resume <name>``, :meth:`MemberTask.job`): its own directory, lock, checkpoints, logs and
final model; ``members/<name>.log`` gets its session's summary. The task reaches the learner as data: its
configuration is read from the member's file, no command line in between. A signal stops every member with a
checkpoint, and this process's end ends them (they are this process). On CUDA one process holds every member: one CUDA
context, the rollout and update captured in graphs, no MPS daemon.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mission_gym.config.yaml_io import ConfigError
from mission_gym.hardware import resolve_device
from mission_gym.launch.jobs import Job
from mission_gym.plan.presets import load_preset
from mission_gym.ppo.batched.stack import batch_key, batchable
from mission_gym.settings.overrides import apply_overrides
from mission_gym.settings.schema import TrainConfig
from mission_gym.settings.sizing import population_learner
from mission_gym.training.session import EXIT_SIGNAL
from mission_gym.training.trainer import Trainer, train_together


@dataclass(frozen=True)
class MemberTask:
    """What brings one member of a population to a step.

    :param name: the member (its run is ``members/<name>/``)
    :param config_file: its configuration file (``members/<name>.yaml``) for a member that starts; None: it carries on
        its run from its newest checkpoint
    :param stop_at: the step it pauses at (None: it trains to its end)
    :param num_threads: learner threads, when the population sets them
    :param memory_check: check its memory estimate against the machine before it starts
    """

    name: str
    config_file: Path | None
    stop_at: int | None
    num_threads: int | None = None
    memory_check: bool = True

    @property
    def overrides(self) -> dict[str, Any]:
        return {"num_threads": self.num_threads} if self.num_threads is not None else {}

    def config(self) -> TrainConfig:
        """The configuration a starting member trains (what ``train_ppo --preset FILE`` reads)."""
        assert self.config_file is not None, "a member that carries on trains its run's own configuration"
        return apply_overrides(load_preset(str(self.config_file)), self.overrides)

    def job(self) -> Job:
        """The launcher job of this task: its ``train_ppo`` command line, for a member in a process of its own."""
        args: tuple[str, ...] = () if self.config_file is None else ("--preset", str(self.config_file))
        if self.num_threads is not None:
            args += ("--num-threads", str(self.num_threads))
        if not self.memory_check:
            args += ("--no-memory-check",)
        if self.stop_at is not None:
            args += ("--stop-at", str(self.stop_at))
        return Job(self.name, args, resume=self.config_file is None)

    def trainer(self, members_dir: Path) -> Trainer:
        """The session this task trains in this process (a new member, or one resumed from its checkpoint)."""
        command = f"(population, batched learner) {self.name}"
        if self.config_file is None:
            return Trainer.resume(self.name, members_dir, self.overrides, command=command, progress=False, memory_check=False)
        return Trainer.create(
            self.config(), runs_dir=members_dir, run_name=self.name, command=command, progress=False, memory_check=False
        )


def resolve_learner(config: TrainConfig, backend: str = "local") -> str:
    """``processes`` or ``batched`` for a population on this machine
    (:func:`~mission_gym.settings.sizing.population_learner`, its device resolved here)."""
    try:
        device = resolve_device(config.device)
    except ValueError:
        device = "cpu"
    return population_learner(config, device, backend)


def train_members_together(
    members_dir: Path,
    tasks: Sequence[MemberTask],
    on_iteration: Callable[[], None] | None = None,
    say: Callable[[str], None] = print,
) -> tuple[dict[str, int], int | None]:
    """Bring each task's member to its step in this process, members of one network shape as one batched learner,
    one shape after another; their exit codes (2 for a member whose configuration is refused) and the signal that
    stopped them, if one did."""
    codes: dict[str, int] = {}
    trainers: dict[str, Trainer] = {}
    for task in tasks:
        try:
            trainers[task.name] = task.trainer(members_dir)
        except ConfigError as exc:
            codes[task.name] = 2
            _log(members_dir, task.name, f"error: {exc}")
    stop_at = {task.name: task.stop_at for task in tasks}
    groups: dict[Any, list[str]] = {}
    for name, trainer in trainers.items():
        # a member the batch does not cover (another policy) trains alone, as a group of one
        key = batch_key(trainer.model) if batchable(trainer.model) is None else name
        # members whose phases change n_epochs at other steps cannot share one update loop
        epochs = tuple((p.start, p.n_epochs) for p in trainer.config.phases if p.n_epochs is not None)
        groups.setdefault((key, epochs, stop_at[name]), []).append(name)
    stopped: int | None = None
    for (_, _, stop), names in groups.items():
        group = [trainers[n] for n in names]
        if stopped is not None:  # a signal ended the earlier group: these do not start
            for trainer in group:
                trainer.close()
            codes.update({n: EXIT_SIGNAL[signal.Signals(stopped)] for n in names})
            continue
        device = group[0].device
        why = batchable(group[0].model)
        how = "together in this process (batched learner" if why is None else f"alone in this process ({why}"
        say(f"population: {', '.join(names)} train {how}, {device})")
        if why is None:
            results = train_together(group, stop, on_iteration=on_iteration)
        else:
            results = [group[0].train(stop_at=stop)]
        for name, result in zip(names, results):
            codes[name] = result.exit_code
            _log(members_dir, name, result.summary())
            if result.status == "interrupted":
                stopped = signal.SIGTERM if result.exit_code == EXIT_SIGNAL[signal.SIGTERM] else signal.SIGINT
    return codes, stopped


def _log(members_dir: Path, name: str, text: str) -> None:
    with open(members_dir / f"{name}.log", "a") as f:
        f.write(text.rstrip() + "\n")
