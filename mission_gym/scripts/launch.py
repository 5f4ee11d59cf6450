"""Run several ``train_ppo`` jobs side by side, on this machine or on a Ray cluster.

python -m mission_gym.scripts.launch jobs.yaml [--max-parallel N] [-- TRAIN_PPO_ARGS...]
python -m mission_gym.scripts.launch --jobs 4 --preset heavy --seeds 0 1 2 3 [-- --timesteps 1000000]
python -m mission_gym.scripts.launch --env Hopper-v5 --seeds 0 1 2 3   # each job sizes the task's recipe to its cores
python -m mission_gym.scripts.launch jobs.yaml --backend ray [--ray-address ADDR] [--gpus-per-job 0.25]

Exit status: 0 when every job succeeded, 1 when any failed, 2 on bad input, 130/143 when stopped by
Ctrl-C/SIGTERM (every job is told to save a checkpoint and stop first). See docs/launcher.md.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

from rich.console import Console

from mission_gym.config.yaml_io import ConfigError
from mission_gym.launch.jobs import Job, check_flag_names, describe, jobs_from_flags, load_jobs
from mission_gym.scripts.cli import CliParser, command_main, fail


def build_parser() -> CliParser:
    p = CliParser(
        prog="python -m mission_gym.scripts.launch",
        description="Run several train_ppo jobs side by side: from a jobs YAML file, or N runs of one preset "
        "and task with --jobs/--preset/--env/--seeds. Arguments after -- go to every train_ppo job.",
        epilog="See docs/launcher.md for the jobs file format.",
    )
    p.add_argument("jobs_file", nargs="?", metavar="JOBS_YAML", help="jobs file (name, preset, env, seeds, args per job)")
    g = p.add_argument_group("jobs from flags (instead of a file)")
    g.add_argument("--jobs", type=int, metavar="N", help="number of runs (default: one per seed)")
    g.add_argument("--preset", help="train_ppo preset of every run (name or YAML file) [train_ppo's: auto]")
    g.add_argument(
        "--env",
        metavar="ID",
        help="Gymnasium task of every run, e.g. Hopper-v5; a tier sizes its recipe to each job's cores [the preset's]",
    )
    g.add_argument("--seeds", type=int, nargs="+", metavar="S", help="one seed per run (default 0..N-1)")
    g.add_argument("--name", help="run-name stem: runs are <name>-s<seed> (default [<env>-]<preset>-<date>-<time>)")
    r = p.add_argument_group("resources")
    r.add_argument(
        "--max-parallel",
        type=int,
        metavar="N",
        help="jobs at once (default: what the cores and the memory estimates allow; Ray: no cap)",
    )
    r.add_argument(
        "--cpus-per-job",
        type=int,
        metavar="N",
        help="cores per job (default: an even share; Ray: 1) unless the job file sets cpus",
    )
    r.add_argument(
        "--gpus-per-job",
        type=float,
        metavar="F",
        help="Ray: fraction of a GPU per job, e.g. 0.25 for four per GPU (default: from the estimate)",
    )
    r.add_argument("--no-memory-check", action="store_true", help="start jobs without checking free RAM/GPU memory")
    r.add_argument(
        "--no-mps",
        action="store_true",
        help="local: CUDA jobs side by side time-slice the GPU; by default they share it through a private MPS daemon",
    )
    p.add_argument("--runs-dir", default="runs", help="where run directories go (default runs)")
    p.add_argument("--backend", choices=("local", "ray"), default="local", help="where jobs run (default local)")
    p.add_argument("--ray-address", metavar="ADDR", help="an existing Ray cluster (default: start a local Ray instance)")
    p.add_argument(
        "--stop-timeout",
        type=float,
        default=60.0,
        metavar="S",
        help="seconds each job gets to save a checkpoint after Ctrl-C/SIGTERM before it is killed (default 60)",
    )
    p.add_argument("--no-live", action="store_true", help="no live table: one line per event")
    p.add_argument("--dry-run", action="store_true", help="print the jobs, their commands and the plan; start nothing")
    return p


def _split_passthrough(argv: list[str]) -> tuple[list[str], list[str]]:
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, []


def _launch_dir(runs_dir: Path) -> Path:
    base = runs_dir / "_launches" / time.strftime("%Y%m%d-%H%M%S")
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def _jobs(args, extra: list[str]) -> list[Job]:
    if args.jobs_file is not None:
        flags = (("--jobs", args.jobs), ("--preset", args.preset), ("--env", args.env), ("--seeds", args.seeds),
                 ("--name", args.name))  # fmt: skip
        used = [f for f, v in flags if v is not None]
        if used:
            raise ConfigError(
                f"{' '.join(used)} build jobs from flags; with a jobs file set them in the file "
                "(or pass train_ppo flags after --)"
            )
        jobs = load_jobs(args.jobs_file, extra)
    else:
        if args.env is not None:  # refused here in one line, not once per job in its log
            from mission_gym.vec.factory import check_env_id

            check_env_id(args.env)
        jobs = jobs_from_flags(args.jobs, args.preset, args.seeds, args.name, extra, env=args.env)
    from mission_gym.scripts.train_ppo import build_parser as train_parser  # a light import: argparse only

    known = [opt for action in train_parser()._actions for opt in action.option_strings]
    check_flag_names(jobs, known, args.jobs_file or "launch flags")
    if args.cpus_per_job is not None or args.gpus_per_job is not None:
        import dataclasses

        jobs = [
            dataclasses.replace(
                j,
                cpus=j.cpus if j.cpus is not None else args.cpus_per_job,
                gpus=j.gpus if j.gpus is not None else args.gpus_per_job,
            )
            for j in jobs
        ]
    return jobs


def _refusal(args: argparse.Namespace) -> str | None:
    """Why the launch flags cannot run (a number out of range, a Ray flag without Ray), or None."""
    for flag, value, low in (("--max-parallel", args.max_parallel, 1), ("--cpus-per-job", args.cpus_per_job, 1)):
        if value is not None and value < low:
            return f"{flag} must be >= {low} (got {value})"
    if args.gpus_per_job is not None and args.gpus_per_job < 0:
        return f"--gpus-per-job must be >= 0 (got {args.gpus_per_job:g})"
    if args.stop_timeout < 0:
        return f"--stop-timeout must be >= 0 (got {args.stop_timeout:g})"
    if args.ray_address and args.backend != "ray":
        return "--ray-address needs --backend ray"
    return None


@command_main
def main(argv: list[str] | None = None) -> int:
    own, extra = _split_passthrough(list(sys.argv[1:] if argv is None else argv))
    args = build_parser().parse_args(own)
    refusal = _refusal(args)
    if refusal is not None:
        return fail(refusal)
    try:
        jobs = _jobs(args, extra)
    except ConfigError as exc:
        return fail(str(exc))

    runs_dir = Path(args.runs_dir).resolve()
    existing = [j.name for j in jobs if (runs_dir / j.name).exists()]
    if existing:
        return fail(
            f"run directories already exist in {runs_dir}: {', '.join(existing)}; rename the jobs "
            "(--name, or the file's names) or use another --runs-dir"
        )
    console = Console(highlight=False) if sys.stdout.isatty() else Console(highlight=False, width=160)
    if args.backend == "ray":
        return _launch_ray(args, jobs, runs_dir, console)
    return _launch_local(args, jobs, runs_dir, console)


def _launch_ray(args: argparse.Namespace, jobs: list[Job], runs_dir: Path, console: Console) -> int:
    """Run the jobs as Ray tasks (or print them with --dry-run); the command's exit status."""
    from mission_gym.launch.ray_backend import RayUnavailable, run_ray

    if args.dry_run:
        for j in jobs:
            console.print(f"{j.name}: {describe(j, runs_dir)}", soft_wrap=True)
        return 0
    launch_dir = _launch_dir(runs_dir)
    try:
        records, stop = run_ray(
            jobs,
            runs_dir,
            launch_dir,
            address=args.ray_address,
            max_parallel=args.max_parallel,
            memory_check=not args.no_memory_check,
            stop_timeout=args.stop_timeout,
            console=console,
            live=not args.no_live,
        )
    except RayUnavailable as exc:
        return fail(str(exc))
    _write_pages(launch_dir, runs_dir, console)
    return _status(records, stop)


def _launch_local(args: argparse.Namespace, jobs: list[Job], runs_dir: Path, console: Console) -> int:
    """Run the jobs as subprocesses on this machine (or print them and their estimates with --dry-run); the
    command's exit status."""
    from mission_gym.launch.local import LocalLauncher
    from mission_gym.launch.resources import default_max_parallel

    plan = default_max_parallel(jobs)
    max_parallel = args.max_parallel or plan.max_parallel
    how = "--max-parallel" if args.max_parallel else plan.explain()
    console.print(f"{len(jobs)} job(s), max parallel {max_parallel}: {how}", soft_wrap=True)
    launcher = LocalLauncher(
        jobs,
        runs_dir,
        _launch_dir(runs_dir),
        max_parallel,
        memory_check=not args.no_memory_check,
        stop_timeout=args.stop_timeout,
        mps=not args.no_mps,
        console=console,
        live=not args.no_live,
    )
    if args.dry_run:
        for r in launcher.records:
            console.print(
                f"{r.name}: ~{r.host_mb:,.0f} MB RAM, ~{r.gpu_mb:,.0f} MB GPU: {describe(r.job, runs_dir)}", soft_wrap=True
            )
        return 0
    records = launcher.run()
    _write_pages(launcher.launch_dir, runs_dir, console)
    return _status(records, launcher.stop_signal)


def _write_pages(launch_dir: Path, runs_dir: Path, console: Console) -> None:
    """The launch's page (every job side by side, from its summary.json) and the runs index that lists it. Here, not
    in the launcher: the launch layer does not import the dashboards. A page that cannot be drawn is only a warning:
    the jobs' results stand."""
    from mission_gym.dashboard import write_launch_pages

    try:
        page = write_launch_pages(launch_dir, runs_dir)[0]
    except Exception as exc:
        console.print(f"warning: the launch's page was not written: {exc!r}", highlight=False, soft_wrap=True)
        return
    console.print(f"launch page: {page}", highlight=False, soft_wrap=True)


def _status(records, stop_signal: int | None) -> int:
    if stop_signal is not None:
        return 128 + (signal.SIGTERM if stop_signal != signal.SIGINT else signal.SIGINT)
    return 0 if all(r.succeeded for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
