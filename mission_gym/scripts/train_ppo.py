"""Train a PPO agent on Mission Gym or any Gymnasium id.

    python -m mission_gym.scripts.train_ppo --preset auto
    python -m mission_gym.scripts.train_ppo --preset quick --env Hopper-v5 --vec-env subproc
    python -m mission_gym.scripts.train_ppo --resume RUN
    python -m mission_gym.scripts.train_ppo --parent-checkpoint runs/RUN/best_model.zip --branch-name lr-down \\
        --hyperparams learning_rate=1e-4

Explicit flags override the preset; the resolved configuration is printed and saved as the run's config.yaml.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from mission_gym import ENV_ID
from mission_gym.scripts.cli import CliParser, command_main, fail


def build_parser() -> CliParser:
    p = CliParser(
        prog="python -m mission_gym.scripts.train_ppo",
        description="Train PPO with a preset sized to your hardware; explicit flags override the preset "
        "([x] is the value when neither sets it). Docs: docs/training.md",
        epilog="examples:\n" + __doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(p)
    return p


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Every ``train_ppo`` flag, in its help groups: the session's own here, the configuration's from
    :func:`mission_gym.plan.command.add_settings_arguments` (``mission-search`` takes them all too)."""
    from mission_gym.plan.command import add_settings_arguments

    what = p.add_argument_group("what to train")
    size = p.add_argument_group("rollout and update")
    machine = p.add_argument_group("machine")
    run = p.add_argument_group("run directory")
    track = p.add_argument_group("tracking (pip install 'mission_gym[track]')")
    lineage = p.add_argument_group("resume and branch")
    add_settings_arguments(p, {"what": what, "size": size, "machine": machine, "run": run, "lineage": lineage})
    machine.add_argument(
        "--backend", choices=["local", "ray"], default="local", help="where a population's members run [local]"
    )
    machine.add_argument("--ray-address", metavar="ADDR", help="with --backend ray: join this cluster [a local Ray]")
    machine.add_argument(
        "--no-memory-check",
        action="store_true",
        help="start even when the memory estimate exceeds the RAM (or GPU memory) available; by default such a run "
        "is refused before anything is allocated, naming the largest --n-envs that fits",
    )
    machine.add_argument(
        "--no-mps",
        action="store_true",
        help="with population.learner processes, member processes on one GPU time-slice it instead of sharing it "
        "through a private MPS daemon (docs/gpu-guide.md); the default learner on CUDA is one process and uses none",
    )
    run.add_argument("--run-name", metavar="NAME", help="directory name under --runs-dir [<env>_<preset>_<time>]")
    run.add_argument("--notes", metavar="TEXT", help="free text stored in lineage.json")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    track.add_argument(
        "--track", action="store_true", help="send the run to Weights & Biases (its TensorBoard events, its config)"
    )
    track.add_argument("--wandb-project", metavar="NAME", help="W&B project [mission_gym]")
    track.add_argument("--wandb-entity", metavar="NAME", help="W&B entity, a user or team [the account's default]")
    lineage.add_argument(
        "--stop-at",
        type=int,
        metavar="STEPS",
        help="pause once this many env steps are trained (a checkpoint is saved; --resume continues)",
    )
    lineage.add_argument("--parent-checkpoint", metavar="PATH", help="start a new run from this model's weights")
    lineage.add_argument("--branch-name", metavar="NAME", help="name of the branch (the new run's name unless --run-name)")


@command_main
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command = shlex.join(["python", "-m", "mission_gym.scripts.train_ppo", *(sys.argv[1:] if argv is None else argv)])

    from mission_gym.config.yaml_io import ConfigError
    from mission_gym.launch.population import PopulationRun

    try:
        _check_flags(args)
        session = _resume(args, command) if args.resume else _create(args, command)
    except ConfigError as exc:
        return fail(str(exc))
    sys.stdout.flush()
    if isinstance(session, PopulationRun):
        return _train_population(session)
    return _train_run(session, args)


def _check_flags(args: argparse.Namespace) -> None:
    """The rules between ``train_ppo``'s flags that need no configuration (those that do: :func:`_check_new_run`).

    :raises ConfigError: naming the flags that do not go together
    """
    from mission_gym.config.yaml_io import ConfigError

    if (args.wandb_project or args.wandb_entity) and not args.track:
        raise ConfigError("--wandb-project and --wandb-entity go with --track")
    if args.track:
        from mission_gym.optional import require

        require("wandb", "--track")
    if args.stop_at is not None and args.stop_at < 1:
        raise ConfigError(f"--stop-at {args.stop_at}: expected a positive step count below the run's timesteps")
    if args.resume:
        given = [f for f in ("preset", "parent_checkpoint", "branch_name", "run_name") if getattr(args, f)]
        if given:
            raise ConfigError(f"--resume cannot be combined with --{given[0].replace('_', '-')}")
        if args.env_kwargs or args.hyperparams or args.no_tensorboard:
            raise ConfigError("--resume continues a run with its saved configuration; branch to change it")


def _options(args: argparse.Namespace) -> dict[str, Any]:
    """A population run's options from the flags."""
    return {"backend": args.backend, "ray_address": args.ray_address, "memory_check": not args.no_memory_check,
            "mps": not args.no_mps}  # fmt: skip


def _resume(args: argparse.Namespace, command: str) -> Any:
    """The session that continues ``--resume RUN``: a population run's, or a run's (a :class:`Trainer`).

    :raises ConfigError: for flags a resumed run does not take, or a run that cannot continue
    """
    from mission_gym.config.yaml_io import ConfigError
    from mission_gym.launch.population import PopulationRun, is_population_run
    from mission_gym.plan.command import flag_overrides
    from mission_gym.training.trainer import Trainer

    overrides = flag_overrides(args)
    if is_population_run(args.resume, args.runs_dir):
        if args.track:
            raise ConfigError(_TRACK_POPULATION)
        if overrides or args.stop_at is not None:
            raise ConfigError("--resume of a population run takes no other flags (its members keep their own)")
        population = PopulationRun.resume(args.resume, args.runs_dir, **_options(args))
        print(f"resuming population run {population.run.path}")
        return population
    trainer = Trainer.resume(
        args.resume,
        args.runs_dir,
        overrides,
        command=command,
        progress=not args.no_progress,
        memory_check=not args.no_memory_check,
    )
    try:
        _check_stop_at(args.stop_at, trainer.resume_step or 0, trainer.config.timesteps)
    except ConfigError:
        trainer.close()  # refused after it took the run: leave the run as it was
        raise
    print(f"resuming {trainer.run.path} from step {trainer.resume_step:,} (target {trainer.config.timesteps:,})")
    return trainer


def _create(args: argparse.Namespace, command: str) -> Any:
    """The session of a new run: the configuration the flags make (:func:`~mission_gym.plan.command.
    config_from_args`), then a population run or a run (a :class:`Trainer`), its configuration and notes printed.

    :raises ConfigError: for anything wrong with the flags or the configuration
    """
    from mission_gym.config.yaml_io import dump_yaml
    from mission_gym.launch.population import PopulationRun
    from mission_gym.plan.command import config_from_args
    from mission_gym.training.trainer import Trainer

    config, notes = config_from_args(args)
    _check_new_run(args, config)
    session: Any
    if config.population.size > 1:
        session = PopulationRun.create(
            config, runs_dir=args.runs_dir, run_name=args.run_name, notes=args.notes, command=command, **_options(args)
        )
        print(f"population run {session.run.path}: {config.population.size} members ({args.backend})")
    else:
        session = Trainer.create(
            config,
            runs_dir=args.runs_dir,
            run_name=args.run_name,
            parent_checkpoint=args.parent_checkpoint,
            branch_name=args.branch_name,
            notes=args.notes,
            command=command,
            progress=not args.no_progress,
            memory_check=not args.no_memory_check,
        )
        print(f"run {session.run.path}  (device {session.device}, {session.threads} learner threads)")
    print(dump_yaml(session.config.model_dump()).rstrip())
    for line in notes:
        print(f"note: {line}")
    return session


def _check_new_run(args: argparse.Namespace, config: Any) -> None:
    """The rules between the flags and the configuration of a new run.

    :raises ConfigError: naming the flag that does not apply
    """
    from mission_gym.config.yaml_io import ConfigError

    if args.track and not config.tensorboard:
        raise ConfigError("--track syncs the run's TensorBoard events; drop --no-tensorboard (tensorboard: false)")
    _check_stop_at(args.stop_at, 0, config.timesteps)
    if config.population.size > 1:
        given = [f for f in ("parent_checkpoint", "branch_name", "stop_at") if getattr(args, f) is not None]
        if given:
            flag = "--" + given[0].replace("_", "-")
            raise ConfigError(f"{flag} does not apply to a population run (population.size {config.population.size})")
        if args.track:
            raise ConfigError(_TRACK_POPULATION)


def _train_population(population: Any) -> int:
    """Train a population run to its end; its exit code."""
    from mission_gym.dashboard import refresh_dashboards

    # the run's page shows each cut as it is made; the members' own refreshes keep it current in between
    population.on_cut = lambda run_dir, cut: refresh_dashboards(run_dir, force=True)
    result = population.train()
    refresh_dashboards(population.run.path, force=True)
    print(result.summary())
    print(f"  tensorboard --logdir {population.run.path / 'tb'}   (every member: {population.members_dir})")
    _next_steps(population.run.path, result.status, True, population.config.env == ENV_ID)
    return int(result.exit_code)


def _next_steps(run: Path, status: str, population: bool, game: bool = True) -> None:
    """Where to look next: the run's page, and for a finished run the held-out evaluation (games training never
    saw, unlike the score above); for a stopped one the command that continues it."""
    print(f"  dashboard {run / 'dashboard.html'}")
    if status == "finished" and not game:
        print(f"  20 held-out episodes: python -m mission_gym.scripts.evaluate {run} --episodes 20")
    elif status == "finished":
        games = "1,000 held-out games, by situation" if population else "held-out games"
        print(f"  {games}: python -m mission_gym.scripts.evaluate {run} --episodes 1000")
    elif status in ("interrupted", "paused"):
        print(f"  continue: python -m mission_gym.scripts.train_ppo --resume {run}")


def _train_run(trainer: Any, args: argparse.Namespace) -> int:
    """Train a run to its target (or ``--stop-at``), its dashboard refreshed as it goes; its exit code."""
    from mission_gym.dashboard import refresh_dashboards
    from mission_gym.dashboard.training import training_callbacks

    callbacks, after_eval = training_callbacks(trainer.run.path, trainer.config.env, trainer.config.env_kwargs)
    if args.track:
        result = _train_tracked(trainer, args, callbacks, after_eval)
    else:
        result = trainer.train(stop_at=args.stop_at, callbacks=callbacks, callback_after_eval=after_eval)
    refresh_dashboards(trainer.run.path, force=True)
    print(result.summary())
    print(f"  tensorboard --logdir {trainer.run.path / 'tb'}")
    _next_steps(trainer.run.path, result.status, False, trainer.config.env == ENV_ID)
    return int(result.exit_code)


_TRACK_POPULATION = (
    "--track sends a single run; this is a population run, whose members are runs of their own "
    "(track one configuration as a single run with --hyperparams 'population={size: 1}')"
)


def _train_tracked(trainer: Any, args: argparse.Namespace, callbacks: list[Any], after_eval: Any) -> Any:
    """Train inside a W&B run (``--track``); a resumed run continues its W&B run (its id is in metadata.json)."""
    from mission_gym.rundir.files import read_json
    from mission_gym.sharing.tracking import tracked

    previous = read_json(trainer.run / "metadata.json").get("wandb") or {}
    with tracked(trainer.run.path, trainer.config, args.wandb_project, args.wandb_entity, previous.get("id")) as run:
        trainer.run.update_metadata(wandb={"id": run.id, "project": run.project, "entity": run.entity, "url": run.url})
        return trainer.train(stop_at=args.stop_at, callbacks=callbacks, callback_after_eval=after_eval)


def _check_stop_at(stop_at: int | None, step: int, target: int) -> None:
    from mission_gym.config.yaml_io import ConfigError

    if stop_at is not None and not step < stop_at < target:
        raise ConfigError(f"--stop-at {stop_at:,}: expected a step count above {step:,} and below the run's {target:,}")


if __name__ == "__main__":
    sys.exit(main())
