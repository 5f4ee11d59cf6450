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

from mission_gym.scripts.cli import CliParser, fail

# flag dest -> configuration field (when the flag is given)
FLAG_FIELDS = (
    "env",
    "timesteps",
    "n_envs",
    "n_steps",
    "batch_size",
    "n_epochs",
    "network_arch",
    "vec_env",
    "device",
    "seed",
    "eval_freq",
    "eval_episodes",
    "save_freq",
    "keep_checkpoints",
    "num_threads",
)


def _batch_size(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer or 'auto', got {text!r}") from None


def parse_pairs(items: list[str] | None, flag: str) -> dict[str, Any]:
    """``k=v`` items into a mapping; values are YAML (``3e-4`` is a float, ``[1, 2]`` a list), never evaluated
    code; dotted keys nest (``reward.win_bonus=100`` → ``{"reward": {"win_bonus": 100}}``).

    :raises ConfigError: for an item without ``=`` or with bad YAML
    """
    from mission_gym.config.yaml_io import ConfigError, parse_yaml

    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"{flag}: expected key=value, got {item!r}")
        value = parse_yaml(text, f"{flag} {key}") if text else ""
        node = out
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{flag}: {key!r} sets a key inside a value that is not a mapping")
        node[leaf] = value
    return out


def build_parser() -> CliParser:
    p = CliParser(
        prog="python -m mission_gym.scripts.train_ppo",
        description="Train PPO with a preset sized to your hardware; explicit flags override the preset "
        "([x] is the value when neither sets it). Docs: docs/training.md",
        epilog="examples:\n" + __doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    what = p.add_argument_group("what to train")
    what.add_argument(
        "--preset", metavar="NAME|PATH", help="fast, heavy, beast, cpu, quick, auto (by hardware) or a YAML file [auto]"
    )
    what.add_argument("--env", metavar="ID", help="Gymnasium id, e.g. MissionGym-v0, Hopper-v5 [MissionGym-v0]")
    what.add_argument("--env-kwargs", nargs="+", metavar="K=V", help="env arguments, YAML values; e.g. reward.win_bonus=100")
    what.add_argument("--timesteps", type=int, metavar="N", help="total env steps of the run")
    what.add_argument("--seed", type=int, metavar="N", help="env i is seeded with seed+i; also torch's seed")
    size = p.add_argument_group("rollout and update")
    size.add_argument("--n-envs", type=int, metavar="N", help="parallel envs")
    size.add_argument("--n-steps", type=int, metavar="N", help="steps per env per rollout")
    size.add_argument("--batch-size", type=_batch_size, metavar="N|auto", help="minibatch size; must divide n_envs*n_steps")
    size.add_argument("--n-epochs", type=int, metavar="N", help="passes over each rollout")
    size.add_argument("--network-arch", metavar="W,W,...", help='hidden layer widths, e.g. "1024,512,256"')
    size.add_argument("--hyperparams", nargs="+", metavar="K=V", help="PPO settings, e.g. learning_rate=1e-4 ent_coef=0.0")
    machine = p.add_argument_group("machine")
    machine.add_argument("--vec-env", choices=["auto", "native", "subproc", "dummy"], help="vectorised env kind [auto]")
    machine.add_argument("--device", metavar="DEV", help="auto, cpu, cuda or cuda:<i> [auto]")
    machine.add_argument("--num-threads", type=int, metavar="N", help="learner torch threads [cores left after env workers]")
    run = p.add_argument_group("run directory")
    run.add_argument("--run-name", metavar="NAME", help="directory name under --runs-dir [<env>_<preset>_<time>]")
    run.add_argument("--runs-dir", default="runs", metavar="DIR", help="where runs live [runs]")
    run.add_argument("--eval-freq", type=int, metavar="STEPS", help="env steps between evaluations (0: final only)")
    run.add_argument("--eval-episodes", type=int, metavar="N", help="episodes per evaluation (fixed seeds)")
    run.add_argument("--save-freq", type=int, metavar="STEPS", help="env steps between checkpoints (0: final only)")
    run.add_argument("--keep-checkpoints", type=int, metavar="K", help="newest checkpoints to keep")
    run.add_argument("--notes", metavar="TEXT", help="free text stored in lineage.json")
    run.add_argument("--no-tensorboard", action="store_true", help="no TensorBoard events")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    lineage = p.add_argument_group("resume and branch")
    lineage.add_argument("--resume", metavar="RUN|PATH", help="continue a run from its newest checkpoint")
    lineage.add_argument(
        "--stop-at",
        type=int,
        metavar="STEPS",
        help="pause once this many env steps are trained (a checkpoint is saved; --resume continues)",
    )
    lineage.add_argument("--parent-checkpoint", metavar="PATH", help="start a new run from this model's weights")
    lineage.add_argument("--branch-name", metavar="NAME", help="name of the branch (the new run's name unless --run-name)")
    return p


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    out = {name: getattr(args, name) for name in FLAG_FIELDS if getattr(args, name) is not None}
    if args.no_tensorboard:
        out["tensorboard"] = False
    return out


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command = shlex.join(["python", "-m", "mission_gym.scripts.train_ppo", *(sys.argv[1:] if argv is None else argv)])

    from mission_gym.config.yaml_io import ConfigError, dump_yaml
    from mission_gym.training.population import PopulationRun
    from mission_gym.training.presets import apply_overrides, load_preset, split_hyperparams
    from mission_gym.training.trainer import Trainer

    population: PopulationRun | None = None
    try:
        if args.stop_at is not None and args.stop_at < 1:
            raise ConfigError(f"--stop-at {args.stop_at}: expected a positive step count below the run's timesteps")
        overrides = _overrides(args)
        fields, extra = split_hyperparams(parse_pairs(args.hyperparams, "--hyperparams"))
        env_kwargs = parse_pairs(args.env_kwargs, "--env-kwargs")
        if args.resume:
            given = [f for f in ("preset", "parent_checkpoint", "branch_name", "run_name") if getattr(args, f)]
            if given:
                raise ConfigError(f"--resume cannot be combined with --{given[0].replace('_', '-')}")
            if env_kwargs or fields or extra or args.no_tensorboard:
                raise ConfigError("--resume continues a run with its saved configuration; branch to change it")
            if _is_population(args.resume, args.runs_dir):
                if overrides or args.stop_at is not None:
                    raise ConfigError("--resume of a population run takes no other flags (its members keep their own)")
                population = PopulationRun.resume(args.resume, args.runs_dir)
                print(f"resuming population run {population.run.path}")
            else:
                trainer = Trainer.resume(args.resume, args.runs_dir, overrides, command=command, progress=not args.no_progress)
                _check_stop_at(args.stop_at, trainer.resume_step or 0, trainer.config.timesteps)
                print(f"resuming {trainer.run.path} from step {trainer.resume_step:,} (target {trainer.config.timesteps:,})")
        else:
            config = load_preset(args.preset or "auto")
            overrides.update(fields)
            if extra:
                overrides["hyperparams"] = {**config.hyperparams, **extra}
            if env_kwargs:
                overrides["env_kwargs"] = env_kwargs  # merged into the preset's by apply_overrides
            config = apply_overrides(config, overrides)
            _check_stop_at(args.stop_at, 0, config.timesteps)
            if config.population.size > 1:
                given = [f for f in ("parent_checkpoint", "branch_name", "stop_at") if getattr(args, f) is not None]
                if given:
                    flag = "--" + given[0].replace("_", "-")
                    raise ConfigError(f"{flag} does not apply to a population run (population.size {config.population.size})")
                population = PopulationRun.create(
                    config, runs_dir=args.runs_dir, run_name=args.run_name, notes=args.notes, command=command
                )
                print(f"population run {population.run.path}: {config.population.size} members")
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
                )
                print(f"run {trainer.run.path}  (device {trainer.device}, {trainer.threads} learner threads)")
                print(dump_yaml(trainer.config.model_dump()).rstrip())
    except ConfigError as exc:
        return fail(str(exc))
    sys.stdout.flush()
    if population is not None:
        pop_result = population.train()
        print(pop_result.summary())
        print(f"  tensorboard --logdir {population.run.path / 'tb'}   (every member: {population.members_dir})")
        return pop_result.exit_code
    result = trainer.train(stop_at=args.stop_at)
    print(result.summary())
    print(f"  tensorboard --logdir {trainer.run.path / 'tb'}")
    return result.exit_code


def _check_stop_at(stop_at: int | None, step: int, target: int) -> None:
    from mission_gym.config.yaml_io import ConfigError

    if stop_at is not None and not step < stop_at < target:
        raise ConfigError(f"--stop-at {stop_at:,}: expected a step count above {step:,} and below the run's {target:,}")


def _is_population(run: str, runs_dir: str) -> bool:
    """Whether ``--resume RUN`` names a population run (one with ``population.json``)."""
    from mission_gym.config.yaml_io import ConfigError
    from mission_gym.training.population import STATE
    from mission_gym.training.rundir import resolve_run_dir

    try:
        return (resolve_run_dir(run, runs_dir) / STATE).is_file()
    except ConfigError:
        return False  # Trainer.resume names what is wrong


if __name__ == "__main__":
    sys.exit(main())
