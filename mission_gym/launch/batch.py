"""A population's members brought to a step in this process, as one batched learner per network shape
(``population.learner: batched``, :func:`~mission_gym.ppo.trainer.train_together`), instead of one launcher job
per member.

Each member is the run its job would make (``train_ppo --preset members/<name>.yaml`` or ``--resume <name>``): its
own directory, lock, checkpoints, logs and final model; ``members/<name>.log`` gets its session's summary. A signal
stops every member with a checkpoint, and this process's end ends them (they are this process). On CUDA one process
holds every member: one CUDA context, the rollout and update captured in graphs, no MPS daemon.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mission_gym.config.yaml_io import ConfigError
from mission_gym.hardware import resolve_device
from mission_gym.launch.jobs import Job
from mission_gym.ppo.batched.maths import batch_key, batchable
from mission_gym.ppo.session import EXIT_SIGNAL
from mission_gym.ppo.trainer import Trainer, train_together
from mission_gym.settings.command import config_for_argv
from mission_gym.settings.schema import TrainConfig
from mission_gym.settings.sizing import population_learner


def resolve_learner(config: TrainConfig, backend: str = "local") -> str:
    """``processes`` or ``batched`` for a population on this machine
    (:func:`~mission_gym.settings.sizing.population_learner`, its device resolved here)."""
    try:
        device = resolve_device(config.device)
    except ValueError:
        device = "cpu"
    return population_learner(config, device, backend)


def _option(args: Sequence[str], flag: str) -> str | None:
    args = list(args)
    return args[args.index(flag) + 1] if flag in args else None


def _trainer(members_dir: Path, job: Job) -> Trainer:
    """The session the member job would train (a new member, or one resumed from its checkpoint)."""
    command = f"(population, batched learner) {job.name}"
    if job.resume:
        threads = _option(job.args, "--num-threads")
        overrides = {"num_threads": int(threads)} if threads else {}
        return Trainer.resume(job.name, members_dir, overrides, command=command, progress=False, memory_check=False)
    config = config_for_argv(job.args)
    return Trainer.create(config, runs_dir=members_dir, run_name=job.name, command=command, progress=False, memory_check=False)


def train_members_together(
    members_dir: Path, jobs: Sequence[Job], on_iteration: Callable[[], None] | None = None, say: Callable[[str], None] = print
) -> tuple[dict[str, int], int | None]:
    """Bring each job's member to its ``--stop-at`` (or its end) in this process, members of one network shape as
    one batched learner, one shape after another; their exit codes (2 for a member whose configuration is refused)
    and the signal that stopped them, if one did."""
    codes: dict[str, int] = {}
    trainers: dict[str, Trainer] = {}
    for job in jobs:
        try:
            trainers[job.name] = _trainer(members_dir, job)
        except ConfigError as exc:
            codes[job.name] = 2
            _log(members_dir, job.name, f"error: {exc}")
    stop_at = {job.name: _option(job.args, "--stop-at") for job in jobs}
    groups: dict[Any, list[str]] = {}
    for name, trainer in trainers.items():
        # a member the batch does not cover (a distillation's student) trains alone, as a group of one
        key = batch_key(trainer.model) if batchable(trainer.model) is None else name
        groups.setdefault((key, stop_at[name]), []).append(name)
    stopped: int | None = None
    for (_, stop), names in groups.items():
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
            results = train_together(group, int(stop) if stop else None, on_iteration=on_iteration)
        else:
            results = [group[0].train(stop_at=int(stop) if stop else None)]
        for name, result in zip(names, results):
            codes[name] = result.exit_code
            _log(members_dir, name, result.summary())
            if result.status == "interrupted":
                stopped = signal.SIGTERM if result.exit_code == EXIT_SIGNAL[signal.SIGTERM] else signal.SIGINT
    return codes, stopped


def _log(members_dir: Path, name: str, text: str) -> None:
    with open(members_dir / f"{name}.log", "a") as f:
        f.write(text.rstrip() + "\n")
