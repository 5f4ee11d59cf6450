"""Search PPO hyperparameters with Optuna: trials are train_ppo runs, pruned at their in-training evaluations.

    mission-search --preset quick --n-trials 20
    mission-search --preset cpu --timesteps 1000000 --n-trials 50 --sampler tpe --pruner median \\
        --storage sqlite:///runs/cpu_search.db --study-name cpu_search     # run it in several shells: one study
    mission-search --preset mujoco --env Hopper-v5 --space my_space.yaml --out presets/hopper_best.yaml
    mission-train --preset runs/cpu_search/best.yaml                         # train the best configuration

The train_ppo flags set what every trial shares; the space (--space, default mission_gym/sharing/search_space.yaml)
what is sampled. The best configuration so far is written as a preset YAML after each process's trials.
"""

from __future__ import annotations

import argparse
import sys
import time

from mission_gym.scripts.cli import CliParser, command_main, fail

NOT_FOR_SEARCH = ("resume", "parent_checkpoint", "branch_name", "stop_at", "run_name")


def build_parser() -> CliParser:
    from mission_gym.scripts.train_ppo import add_arguments as add_train_arguments
    from mission_gym.sharing.search import PRUNERS, SAMPLERS

    p = CliParser(
        prog="mission-search",
        description="Search PPO hyperparameters with Optuna (flags as in rl-baselines3-zoo where they exist); "
        "the train_ppo flags below set what every trial shares. Docs: docs/training.md",
        epilog="examples:\n" + __doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    search = p.add_argument_group("search")
    search.add_argument("--n-trials", type=int, default=10, metavar="N", help="trials this process runs [10]")
    search.add_argument("--sampler", choices=SAMPLERS, default="tpe", help="Optuna sampler [tpe]")
    search.add_argument("--pruner", choices=PRUNERS, default="median", help="prune at the in-training evaluations [median]")
    search.add_argument(
        "--n-startup-trials", type=int, default=5, metavar="N", help="trials before sampling and pruning learn [5]"
    )
    search.add_argument(
        "--n-evaluations", type=int, metavar="N", help="in-training evaluations per trial (sets eval_freq = timesteps / N)"
    )
    search.add_argument(
        "--storage", metavar="URL", help="Optuna storage shared by processes, e.g. sqlite:///study.db [memory]"
    )
    search.add_argument(
        "--study-name", metavar="NAME", help="the study (and its directory under --runs-dir) [<env>_<preset>_search_<time>]"
    )
    search.add_argument("--space", metavar="YAML", help="the search space [mission_gym/sharing/search_space.yaml]")
    search.add_argument("--out", metavar="YAML", help="where the best configuration goes [RUNS_DIR/STUDY/best.yaml]")
    search.add_argument("--sampler-seed", type=int, metavar="N", help="the sampler's seed [random]")
    add_train_arguments(p)
    return p


def _refusal(args: argparse.Namespace) -> str | None:
    """Why the command line cannot run as a search (a flag a search does not take, a count out of range), or None."""
    given = [f for f in NOT_FOR_SEARCH if getattr(args, f) is not None]
    if given:
        return f"--{given[0].replace('_', '-')} does not apply to a search (each trial is a new run)"
    if args.track:
        return "--track does not apply to a search (track the best configuration's run: mission-train --track)"
    if args.backend != "local":
        return "--backend ray does not apply to a search; start several mission-search processes on one --storage"
    for flag, value in (
        ("--n-trials", args.n_trials),
        ("--n-startup-trials", args.n_startup_trials),
        ("--n-evaluations", args.n_evaluations),
    ):
        if value is not None and value < (0 if flag == "--n-startup-trials" else 1):
            return f"{flag} {value}: expected a positive number"
    return None


@command_main
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from mission_gym.config.yaml_io import ConfigError, dump_yaml
    from mission_gym.optional import require
    from mission_gym.plan.command import config_from_args
    from mission_gym.rundir.directory import default_run_name
    from mission_gym.settings.overrides import apply_overrides
    from mission_gym.sharing.search import Search, load_space
    from mission_gym.training.trainer import Trainer

    refusal = _refusal(args)
    if refusal is not None:
        return fail(refusal)
    try:
        require("optuna", "mission-search")
        base, notes = config_from_args(args)
        if args.n_evaluations:
            base = apply_overrides(base, {"eval_freq": max(1, base.timesteps // args.n_evaluations)})
        if base.population.size > 1:
            notes.append(f"the preset's population of {base.population.size} is left out: each trial is one run")
            base = apply_overrides(base, {"population": {"size": 1}})
        Trainer.check(base)  # the shared settings must train before any trial starts
        name = args.study_name or default_run_name(base.env, f"{base.preset}_search")
        search = Search(
            base=base, space=load_space(args.space), study_name=name, storage=args.storage, runs_dir=args.runs_dir,
            sampler=args.sampler, pruner=args.pruner, n_startup_trials=args.n_startup_trials, seed=args.sampler_seed,
        )  # fmt: skip
    except ConfigError as exc:
        return fail(str(exc))
    print(f"study {search.study_name!r}: {args.n_trials} trials here ({args.sampler} sampler, {args.pruner} pruner), "
          f"runs in {search.directory}")  # fmt: skip
    print("searching: " + ", ".join(search.space))
    print(dump_yaml(base.model_dump()).rstrip())
    for line in notes:
        print(f"note: {line}")
    sys.stdout.flush()
    t0 = time.perf_counter()
    search.optimize(args.n_trials)
    states = [t.state.name.lower() for t in search.study.trials]
    counts = ", ".join(f"{states.count(s)} {s}" for s in sorted(set(states)))
    print(f"{len(states)} trials in the study ({counts}); this process {time.perf_counter() - t0:.0f} s")
    try:
        out = search.write_best(args.out or search.directory / "best.yaml")
    except ConfigError as exc:
        return fail(str(exc))
    best = search.study.best_trial
    print(f"best: trial {best.number}, score {best.value:.4g}  {best.params}")
    print(f"best configuration: {out}   (train it: mission-train --preset {out})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
