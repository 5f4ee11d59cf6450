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
from typing import Any

from mission_gym.scripts.cli import CliParser, fail, one_line_missing_extras


def build_parser() -> CliParser:
    from mission_gym.launch.command import add_train_arguments

    p = CliParser(
        prog="python -m mission_gym.scripts.train_ppo",
        description="Train PPO with a preset sized to your hardware; explicit flags override the preset "
        "([x] is the value when neither sets it). Docs: docs/training.md",
        epilog="examples:\n" + __doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_train_arguments(p)
    return p


@one_line_missing_extras
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command = shlex.join(["python", "-m", "mission_gym.scripts.train_ppo", *(sys.argv[1:] if argv is None else argv)])

    from mission_gym.config.yaml_io import ConfigError, dump_yaml
    from mission_gym.launch.command import config_from_args, flag_overrides
    from mission_gym.launch.population import PopulationRun, is_population_run
    from mission_gym.ppo.trainer import Trainer

    population: PopulationRun | None = None
    trainer: Trainer | None = None
    memory_check = not args.no_memory_check
    options = {"backend": args.backend, "ray_address": args.ray_address, "memory_check": memory_check, "mps": not args.no_mps}
    try:
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
            overrides = flag_overrides(args)
            if is_population_run(args.resume, args.runs_dir):
                if args.track:
                    raise ConfigError(_TRACK_POPULATION)
                if overrides or args.stop_at is not None:
                    raise ConfigError("--resume of a population run takes no other flags (its members keep their own)")
                population = PopulationRun.resume(args.resume, args.runs_dir, **options)
                print(f"resuming population run {population.run.path}")
            else:
                trainer = Trainer.resume(
                    args.resume,
                    args.runs_dir,
                    overrides,
                    command=command,
                    progress=not args.no_progress,
                    memory_check=memory_check,
                )
                _check_stop_at(args.stop_at, trainer.resume_step or 0, trainer.config.timesteps)
                print(f"resuming {trainer.run.path} from step {trainer.resume_step:,} (target {trainer.config.timesteps:,})")
        else:
            config, notes = config_from_args(args)
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
                population = PopulationRun.create(
                    config, runs_dir=args.runs_dir, run_name=args.run_name, notes=args.notes, command=command, **options
                )
                print(f"population run {population.run.path}: {config.population.size} members ({args.backend})")
                print(dump_yaml(population.config.model_dump()).rstrip())
            else:
                trainer = Trainer.create(
                    config,
                    runs_dir=args.runs_dir,
                    run_name=args.run_name,
                    parent_checkpoint=args.parent_checkpoint,
                    branch_name=args.branch_name,
                    notes=args.notes,
                    command=command,
                    progress=not args.no_progress,
                    memory_check=memory_check,
                )
                print(f"run {trainer.run.path}  (device {trainer.device}, {trainer.threads} learner threads)")
                print(dump_yaml(trainer.config.model_dump()).rstrip())
            for line in notes:
                print(f"note: {line}")
    except ConfigError as exc:
        for session in (trainer, population):
            if session is not None:  # refused after it took the run: leave the run as it was
                session.close()
        return fail(str(exc))
    sys.stdout.flush()
    from mission_gym.dashboard import refresh_dashboards

    if population is not None:
        # the run's page shows each cut as it is made; the members' own refreshes keep it current in between
        population.on_cut = lambda run_dir, cut: refresh_dashboards(run_dir, force=True)
        pop_result = population.train()
        refresh_dashboards(population.run.path, force=True)
        print(pop_result.summary())
        print(f"  tensorboard --logdir {population.run.path / 'tb'}   (every member: {population.members_dir})")
        return pop_result.exit_code
    from mission_gym.dashboard.training import training_callbacks

    callbacks, after_eval = training_callbacks(trainer.run.path, trainer.config.env, trainer.config.env_kwargs)
    if args.track:
        result = _train_tracked(trainer, args, callbacks, after_eval)
    else:
        result = trainer.train(stop_at=args.stop_at, callbacks=callbacks, callback_after_eval=after_eval)
    refresh_dashboards(trainer.run.path, force=True)
    print(result.summary())
    print(f"  tensorboard --logdir {trainer.run.path / 'tb'}")
    return result.exit_code


_TRACK_POPULATION = (
    "--track sends a single run; this is a population run, whose members train in processes of their own "
    "(track one configuration with --hyperparams population.size=1)"
)


def _train_tracked(trainer: Any, args: argparse.Namespace, callbacks: list[Any], after_eval: Any) -> Any:
    """Train inside a W&B run (``--track``); a resumed run continues its W&B run (its id is in metadata.json)."""
    from mission_gym.launch.tracking import tracked
    from mission_gym.rundir.files import read_json

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
