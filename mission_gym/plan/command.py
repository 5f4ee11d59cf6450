"""The settings of a ``train_ppo`` command line: the flags that set the run's configuration, and the one way they
travel: preset (``auto`` resolved for this machine), then the flags, then ``--hyperparams`` and ``--env-kwargs``
(:func:`config_from_args`).

``train_ppo`` defines its own flags and rules (:mod:`mission_gym.scripts.train_ppo`) and adds these; the launcher
reads its jobs' command lines with the same code (:func:`config_for_argv`) to size and admit them, so the two never
disagree about what a flag means.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any

from mission_gym.config.yaml_io import ConfigError, parse_yaml, read_yaml, validate
from mission_gym.plan.notes import config_notes
from mission_gym.plan.presets import AUTO_PRESET, compose_preset
from mission_gym.rundir.directory import resolve_run_dir
from mission_gym.settings.overrides import apply_command_line, apply_overrides
from mission_gym.settings.schema import TrainConfig
from mission_gym.vec import VEC_ENV_KINDS

#: the help groups of :func:`add_settings_arguments` (``train_ppo`` titles them)
GROUPS = ("what", "size", "machine", "run", "lineage")
#: flag dest -> configuration field (when the flag is given)
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


def add_settings_arguments(p: argparse.ArgumentParser, groups: Mapping[str, Any] | None = None) -> None:
    """``train_ppo``'s flags that set the run's configuration (and ``--resume``/``--runs-dir``, which say where a
    resumed run's configuration is read from), in ``train_ppo``'s help groups.

    :param groups: ``what``, ``size``, ``machine``, ``run`` and ``lineage`` -> the argument group each goes in
        (default: all in ``p``)
    """
    what, size, machine, run, lineage = (p if groups is None else groups[g] for g in GROUPS)
    what.add_argument(
        "--preset",
        metavar="NAME|PATH",
        help="a tier that sizes the task's recipe to the machine: auto (by the hardware), cpu, fast, heavy, beast; or a "
        "recipe at its own size: mission, a task's own (hopper, walker2d, halfcheetah, ant, humanoid, cartpole, acrobot, "
        "pendulum), mujoco, discrete, pixels, atari, quick, a YAML file [auto]",
    )
    what.add_argument(
        "--env", metavar="ID", help="Gymnasium id, e.g. MissionGym-v0, Hopper-v5, my_pkg:MyTask-v0 [MissionGym-v0]"
    )
    what.add_argument(
        "--recipe",
        metavar="NAME|PATH",
        help="the recipe a tier sizes, instead of the task's own (a shipped recipe's name or a YAML file) [the task's]",
    )
    what.add_argument("--env-kwargs", nargs="+", metavar="K=V", help="env arguments, YAML values; e.g. reward.win_bonus=100")
    what.add_argument(
        "--timesteps", type=int, metavar="N", help="total env steps of the run (schedule positions stay at their steps)"
    )
    what.add_argument("--seed", type=int, metavar="N", help="env i is seeded with seed+i; also torch's seed")
    size.add_argument("--n-envs", type=int, metavar="N", help="parallel envs")
    size.add_argument("--n-steps", type=int, metavar="N", help="steps per env per rollout")
    size.add_argument("--batch-size", type=_batch_size, metavar="N|auto", help="minibatch size; must divide n_envs*n_steps")
    size.add_argument("--n-epochs", type=int, metavar="N", help="passes over each rollout")
    size.add_argument("--network-arch", metavar="W,W,...", help='hidden layer widths, e.g. "1024,512,256"')
    size.add_argument(
        "--hyperparams",
        nargs="+",
        metavar="K=V",
        help="settings and PPO arguments, K=V or K:V, YAML values; dotted keys change one entry "
        "(learning_rate=1e-4 population.size=2 curriculum[0].value=4)",
    )
    machine.add_argument("--vec-env", choices=["auto", *VEC_ENV_KINDS], help="vectorised env kind [auto]")
    machine.add_argument("--device", metavar="DEV", help="auto, cpu, cuda or cuda:<i> [auto]")
    machine.add_argument(
        "--num-threads", type=int, metavar="N", help="learner torch threads [the recipe's, else the cores env workers leave]"
    )
    run.add_argument("--runs-dir", default="runs", metavar="DIR", help="where runs live [runs]")
    run.add_argument("--eval-freq", type=int, metavar="STEPS", help="env steps between evaluations (0: final only)")
    run.add_argument("--eval-episodes", type=int, metavar="N", help="episodes per evaluation (fixed seeds)")
    run.add_argument("--save-freq", type=int, metavar="STEPS", help="env steps between checkpoints (0: final only)")
    run.add_argument("--keep-checkpoints", type=int, metavar="K", help="newest checkpoints to keep")
    run.add_argument("--no-tensorboard", action="store_true", help="no TensorBoard events")
    lineage.add_argument(
        "--resume",
        metavar="RUN|PATH",
        help="continue a run from its newest checkpoint with its saved configuration (no --preset; a population run "
        "takes no other flag)",
    )


def split_pair(item: str, flag: str) -> tuple[str, str]:
    """``key=value`` or rl-baselines3-zoo's ``key:value`` (whichever separator comes first)."""
    eq, colon = item.find("="), item.find(":")
    sep = eq if eq >= 0 and (colon < 0 or eq < colon) else colon
    if sep <= 0:
        raise ConfigError(f"{flag}: expected key=value (or key:value), got {item!r}")
    return item[:sep], item[sep + 1 :]


def parse_pairs(items: Sequence[str] | None, flag: str, nest: bool = False) -> dict[str, Any]:
    """``k=v`` items into a mapping; values are YAML (``3e-4`` is a float, ``[1, 2]`` a list), never evaluated
    code. With ``nest`` dotted keys become nested mappings (``reward.win_bonus=100`` → ``{"reward": {"win_bonus":
    100}}``, for env arguments); otherwise they stay paths into the configuration.

    :raises ConfigError: for an item without a separator or with bad YAML
    """
    out: dict[str, Any] = {}
    for item in items or []:
        key, text = split_pair(item, flag)
        value = parse_yaml(text, f"{flag} {key}") if text else ""
        if not nest:
            out[key] = value
            continue
        node = out
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{flag}: {key!r} sets a key inside a value that is not a mapping")
        node[leaf] = value
    return out


def flag_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The configuration fields the explicit flags set."""
    out = {name: getattr(args, name) for name in FLAG_FIELDS if getattr(args, name, None) is not None}
    if getattr(args, "no_tensorboard", False):
        out["tensorboard"] = False
    return out


def config_from_args(args: argparse.Namespace) -> tuple[TrainConfig, list[str]]:
    """The configuration of a new run: the preset (a tier, or ``auto``'s pick for this machine, sizing the task's
    recipe: :func:`~mission_gym.plan.presets.compose_preset`), then the flags, then ``--hyperparams`` and
    ``--env-kwargs``; and notes for the user: which recipe and which size were chosen and why, what ``--timesteps``
    did to its schedule, each given setting that a later phase or a population variant replaces, a GPU preset without
    a GPU here (:func:`~mission_gym.plan.notes.config_notes`).

    :raises ConfigError: for anything invalid, naming the flag or key
    """
    hyperparams = parse_pairs(args.hyperparams, "--hyperparams")
    env_kwargs = parse_pairs(args.env_kwargs, "--env-kwargs", nest=True)
    composed = compose_preset(
        args.preset or AUTO_PRESET, env=args.env, recipe=getattr(args, "recipe", None), env_kwargs=env_kwargs or None
    )
    preset = composed.config
    config, given = apply_command_line(preset, flag_overrides(args), hyperparams, env_kwargs)
    return config, composed.notes + config_notes(preset, config, given)


def config_for_argv(argv: Sequence[str]) -> TrainConfig:
    """The configuration a ``train_ppo`` command line would train (for ``--resume``, the run's own).

    :raises ConfigError: for a command line ``train_ppo`` would refuse
    """
    parser = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    add_settings_arguments(parser)
    try:
        args, _ = parser.parse_known_args(list(argv))
    except (argparse.ArgumentError, SystemExit) as exc:
        raise ConfigError(f"train_ppo arguments: {exc}") from None
    if args.resume:
        path = resolve_run_dir(args.resume, args.runs_dir) / "config.yaml"
        saved = validate(TrainConfig, read_yaml(path), str(path))
        return apply_overrides(saved, flag_overrides(args)) if flag_overrides(args) else saved
    return config_from_args(args)[0]
