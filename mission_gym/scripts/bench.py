"""Throughput benchmark.

``python -m mission_gym.scripts.bench --mode env`` measures env steps per second of Mission Gym
through each way of batching it (a single ``MissionEnv``, SB3 ``DummyVecEnv`` and ``SubprocVecEnv``
of ``MissionEnv``, and the native ``MissionVecEnv`` on 1, 2, ... threads, ``--threads``) over a sweep of ``n_envs``,
and prints a table whose ratios come from the same run. ``--env ID`` measures a Gymnasium task instead, batched as
the trainer batches it (``dummy``, ``subproc`` and the task's own ``native`` env where it has one): env steps/s and
the memory of each configuration (:mod:`mission_gym.scripts.bench_task`).

``python -m mission_gym.scripts.bench --mode train --preset cpu`` trains a few rollouts of each preset as the trainer
builds it (after a warm-up rollout; one fresh process per configuration, so each peak RSS is its own; one learner
thread unless ``--num-threads``): env steps/s, end-to-end training FPS, the share of time in rollouts vs updates, peak
RSS (and env workers' memory) and, on CUDA, peak GPU memory, next to the memory estimator's figures; with ``--env
ID`` each preset is that task's configuration (a tier, ``cpu`` by default, sizes the task's recipe).
``--algo lean sb3`` also trains SB3's own ``PPO`` on the same configuration and prints the speed-up of the trainer's
:class:`~mission_gym.ppo.lean.LeanPPO` over it, from the same run; ``--baseline sb3-defaults`` times, right after each
preset, SB3's own ``PPO`` with every default on the preset's env (what a user of SB3 starts from) and prints the
preset's speed-up over it, per wall-clock second and per CPU second (the latter holds on a machine shared with other
work). Each preset runs on its own vec-env kind; ``--n-envs`` and ``--vec-env`` sweep other sizes and kinds;
``--csv`` writes the rows, ``--plot PNG`` draws FPS and memory against n_envs.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from mission_gym.config.loader import suggest
from mission_gym.hardware import available_cores
from mission_gym.scripts.bench_members import batched_one, parse_placement, placement_mode, population_mode, preset_problem
from mission_gym.scripts.bench_task import (
    DEFAULT_TASK_N_ENVS,
    bench_gym_env,
    steps_per_second,
    task_config,
    task_env_mode,
    task_refusal,
)
from mission_gym.scripts.cli import CliParser, command_main, fail
from mission_gym.training.measure import plot_train, print_table, print_train_table, speedups, write_csv
from mission_gym.vec.wrappers import quiet_mujoco

ENV_KINDS: tuple[str, ...] = ("single", "dummy", "subproc", "native")
DEFAULT_N_ENVS: tuple[int, ...] = (1, 4, 16, 64, 256, 1024)


def _make_single() -> Callable[[], object]:
    from mission_gym.envs import MissionEnv

    return MissionEnv


def bench_env(kind: str, n_envs: int, seconds: float, seed: int = 0, threads: int = 1) -> float:
    """Env steps per second of one configuration, measured for about ``seconds`` after a warm-up.

    :param kind: one of ``single``, ``dummy``, ``subproc``, ``native``
    :param n_envs: environments stepped together (``single`` steps one env ``n_envs`` times per round)
    :param seconds: measuring time
    :param threads: threads the ``native`` env steps on
    """
    rng = np.random.default_rng(seed)
    if kind == "single":
        from mission_gym.envs import MissionEnv

        env = MissionEnv()
        env.reset(seed=seed)
        actions = rng.integers(0, 11, size=(4096, env.core.n_attackers))
        steps = 0
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            for k in range(256):
                _, _, terminated, truncated, _ = env.step(actions[(steps + k) % len(actions)])
                if terminated or truncated:
                    env.reset()
            steps += 256
        return steps / (time.perf_counter() - start)

    if kind == "native":
        from mission_gym.envs import MissionVecEnv

        venv = MissionVecEnv(n_envs, seed=seed, threads=threads)
    elif kind == "dummy":
        from stable_baselines3.common.vec_env import DummyVecEnv

        venv = DummyVecEnv([_make_single()] * n_envs)
        venv.seed(seed)
    elif kind == "subproc":
        from stable_baselines3.common.vec_env import SubprocVecEnv

        venv = SubprocVecEnv([_make_single()] * n_envs, start_method="forkserver")
        venv.seed(seed)
    else:
        raise ValueError(f"unknown env kind {kind!r}; valid: {', '.join(ENV_KINDS)}")
    try:
        venv.reset()
        n_att = venv.action_space.shape[0]
        return steps_per_second(venv, list(rng.integers(0, 11, size=(64, n_envs, n_att))), n_envs, seconds)
    finally:
        venv.close()


def run_env_sweep(
    kinds: list[str], n_envs_list: list[int], seconds: float, max_subproc: int, threads_list: list[int] | None = None
) -> list[dict[str, object]]:
    """Measure every (kind, n_envs) pair (``native`` on each thread count); rows carry the steps/s and the ratio to
    one ``MissionEnv``."""
    rows: list[dict[str, object]] = []
    baseline = None
    for kind in kinds:
        for n in [1] if kind == "single" else n_envs_list:
            if kind == "subproc" and n > max_subproc:
                rows.append({"vec_env": kind, "threads": 1, "n_envs": n, "steps_per_s": None,
                             "note": f"skipped (> --max-subproc {max_subproc})"})  # fmt: skip
                continue
            for threads in (threads_list or [1]) if kind == "native" else [1]:
                sps = bench_env(kind, n, seconds, threads=threads)
                if kind == "single":
                    baseline = sps
                rows.append({"vec_env": kind, "threads": threads, "n_envs": n, "steps_per_s": sps, "note": ""})
                print(f"  {kind:>8} threads={threads} n_envs={n:<5} {sps:>12,.0f} env steps/s", file=sys.stderr, flush=True)
    if baseline is None:
        baseline = bench_env("single", 1, seconds)
    for row in rows:
        sps = row["steps_per_s"]
        row["vs_single"] = None if sps is None else sps / baseline
    return rows


TRAIN_KINDS: tuple[str, ...] = ("native", "dummy", "subproc")


def train_one(
    preset: str,
    n_envs: int | None,
    vec_env: str | None,
    rollouts: int,
    device: str,
    algo: str = "lean",
    threads: int = 1,
    env: str | None = None,
) -> dict[str, object]:
    """Train ``rollouts`` rollouts of ``preset`` (``n_envs`` envs, None: its own; ``vec_env`` None: its own kind) in
    this process, after a warm-up rollout; the measured row (JSON-able). The batch size follows the preset's rule for
    the new rollout size. ``algo`` ``sb3-defaults`` measures SB3's own PPO with its defaults on the preset's env
    instead (:func:`~mission_gym.training.measure.measure_sb3_defaults`; ``rollouts`` of its 2,048 steps). ``env``
    (None: the preset's own task) is the task the preset is composed for (:func:`~mission_gym.scripts.bench_task.
    task_config`).
    """
    from mission_gym.hardware import MB
    from mission_gym.settings.memory import estimate_memory
    from mission_gym.settings.overrides import apply_overrides
    from mission_gym.settings.sizing import shape_from_config
    from mission_gym.training.measure import SB3_DEFAULTS, measure_sb3_defaults, measure_training

    config = task_config(preset, env)
    sizes: dict[str, object] = {"device": device, "population": {"size": 1}}
    if algo == SB3_DEFAULTS:  # SB3's PPO() on one DummyVecEnv env: the shape the memory estimator sees
        sizes.update(n_envs=1, n_steps=2048, batch_size=64, n_epochs=10, network_arch=[64, 64], activation="tanh",
                     vec_env="dummy", normalize=False, normalize_reward=False)  # fmt: skip
    else:
        if vec_env is not None:
            sizes["vec_env"] = vec_env
        if n_envs is not None and n_envs != config.n_envs:
            sizes.update(n_envs=n_envs, batch_size="auto")
    config = apply_overrides(config, sizes, source="bench")
    shape = shape_from_config(config, measure=True)
    est = estimate_memory(shape)
    if algo == SB3_DEFAULTS:
        got = measure_sb3_defaults(config.env, config.env_kwargs, rollouts=rollouts, threads=threads, device=device)
    else:
        got = measure_training(config, rollouts=rollouts, algorithm=algo, threads=threads)
    busy = got.rollout_s + got.update_s
    return {
        "preset": preset,
        "env": config.env,
        "algo": algo,
        "threads": threads,
        "vec_env": shape.vec_env,
        "n_envs": config.n_envs,
        "device": device,
        "batch_size": shape.batch_size,
        "timesteps": got.timesteps,
        "fps": got.timesteps / got.seconds,
        "cpu_fps": got.timesteps / got.cpu_s if got.cpu_s > 0 else None,
        "rollout_share": got.rollout_s / busy if busy else None,
        "peak_rss_mb": got.peak_rss_bytes / MB,
        "workers_mb": got.worker_bytes / MB,
        "est_host_mb": est.host_bytes / MB,
        "gpu_max_allocated_mb": got.cuda_max_allocated / MB,
        "gpu_nvml_peak_mb": got.nvml_used_peak / MB,
        "est_gpu_mb": est.gpu_bytes / MB,
    }


def run_train_sweep(
    presets: list[str],
    kinds: list[str | None],
    n_envs_list: list[int | None],
    rollouts: int,
    device: str,
    env_seconds: float,
    max_subproc: int,
    algos: list[str] | None = None,
    threads: int = 1,
    baseline: str | None = None,
    env: str | None = None,
) -> list[dict[str, object]]:
    """Every (preset, vec-env kind (None: the preset's own), n_envs, algorithm), and after each preset the
    ``baseline`` (``sb3-defaults``: SB3's own PPO with its defaults on the preset's env) when asked: a fresh
    ``python -m mission_gym.scripts.bench --train-worker`` process trains a few rollouts of each (each preset
    composed for ``env``, None: its own task); env-only steps/s of each (env, kind, n_envs) is measured once in this
    process."""
    from mission_gym import ENV_ID

    env_sps: dict[tuple[str, str, int], float] = {}
    rows: list[dict[str, object]] = []
    for preset in presets:
        jobs = [(kind, n, algo) for kind in kinds for n in n_envs_list for algo in algos or ["lean"]]
        if baseline is not None:
            jobs.append((None, None, baseline))
        for kind, n, algo in jobs:
            if kind == "subproc" and n is not None and n > max_subproc:
                print(f"  skip {preset} {kind} n_envs={n} (> --max-subproc {max_subproc})", file=sys.stderr)
                continue
            cmd = [sys.executable, "-m", "mission_gym.scripts.bench", "--train-worker",
                   json.dumps([preset, n, kind, rollouts, device, algo, threads, env])]  # fmt: skip
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
                rows.append({"preset": preset, "algo": algo, "vec_env": kind or "-", "n_envs": n, "error": tail})
                print(f"  {preset:>6} {algo:>4} {kind or 'own'} n_envs={n} failed: {tail}", file=sys.stderr)
                continue
            row = json.loads(proc.stdout.strip().splitlines()[-1])
            key = (str(row["env"]), str(row["vec_env"]), int(row["n_envs"]))
            if key not in env_sps:
                if key[0] == ENV_ID:
                    env_sps[key] = bench_env(key[1], key[2], env_seconds)
                else:
                    quiet_mujoco(key[0])
                    env_sps[key] = bench_gym_env(key[0], key[1], key[2], env_seconds)
            row["env_steps_per_s"] = env_sps[key]
            rows.append(row)
            print(
                f"  {preset:>6} {algo:>4} {row['vec_env']:>8} n_envs={row['n_envs']:<5} {row['fps']:>9,.0f} FPS  "
                f"peak RSS {row['peak_rss_mb']:,.0f} MB",
                file=sys.stderr,
                flush=True,
            )
    return rows


def _thread_counts(cores: int) -> list[int]:
    """1, 2, 4, ... up to ``cores``, and ``cores`` itself."""
    counts = [1]
    while counts[-1] * 2 <= cores:
        counts.append(counts[-1] * 2)
    return sorted({*counts, cores})


def build_parser() -> CliParser:
    p = CliParser(
        prog="python -m mission_gym.scripts.bench",
        description="Mission Gym throughput benchmark: env steps/s per vec-env kind and n_envs (--mode env), or PPO "
        "training steps/s of presets as the trainer builds them (--mode train).",
    )
    p.add_argument(
        "--mode", choices=["env", "train", "placement", "population"], default="env",
        help="env: simulation only; train: PPO rollouts + updates; placement: members x learner threads side by side; "
             "population: N members as processes side by side vs one batched learner",
    )  # fmt: skip
    p.add_argument(
        "--placements", nargs="+", type=parse_placement, default=None, metavar="MxT",
        help="--mode placement: M members of T learner threads each at once [1x1, 1xC, Cx1, 2Cx1 for C cores]",
    )  # fmt: skip
    p.add_argument(
        "--preset", nargs="+", default=["cpu"], metavar="NAME",
        help="presets measured by --mode train, placement or population: names or preset files [cpu]",
    )  # fmt: skip
    p.add_argument(
        "--members", type=int, nargs="+", default=None, metavar="N",
        help="--mode population: population sizes [1 2 4 8 16 32 up to 2 per core]",
    )  # fmt: skip
    p.add_argument(
        "--learners", nargs="+", choices=["processes", "batched"], default=["processes", "batched"],
        help="--mode population: how the members train [both]",
    )  # fmt: skip
    p.add_argument(
        "--rollouts", type=int, default=4, help="rollouts timed per configuration, after one of warm-up (--mode train)"
    )
    p.add_argument(
        "--algo", nargs="+", choices=["lean", "sb3"], default=["lean"],
        help="--mode train: the trainer's LeanPPO and/or SB3's own PPO on the same configuration [lean]",
    )  # fmt: skip
    p.add_argument(
        "--baseline", choices=["sb3-defaults"], default=None,
        help="--mode train: also time, right after each preset, SB3's own PPO with every default (PPO('MlpPolicy', "
             "env): 1 env, 2,048-step rollouts, minibatches of 64, 10 epochs, [64, 64] tanh) on the preset's env, and "
             "print each preset's speed-up over it",
    )  # fmt: skip
    p.add_argument("--num-threads", type=int, default=1, help="--mode train: learner torch threads [1]")
    p.add_argument("--device", default="auto", help="training device for --mode train: auto, cpu, cuda[:i]")
    p.add_argument(
        "--no-mps",
        action="store_true",
        help="--mode placement and population on CUDA: member processes time-slice the GPU instead of sharing it through MPS",
    )
    p.add_argument("--plot", type=Path, default=None, metavar="PNG", help="--mode train: also draw FPS and memory to PNG")
    p.add_argument("--train-worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--batch-worker", default=None, help=argparse.SUPPRESS)
    p.add_argument(
        "--n-envs", type=int, nargs="+", default=None, metavar="N",
        help=f"n_envs values to sweep [--mode env: {' '.join(map(str, DEFAULT_N_ENVS))} (with --env: "
             f"{' '.join(map(str, DEFAULT_TASK_N_ENVS))}); --mode train: the preset's own]",
    )  # fmt: skip
    p.add_argument(
        "--vec-env", nargs="+", default=None, metavar="KIND",
        help=f"kinds to measure [--mode env: {', '.join(ENV_KINDS)} (with --env: dummy, subproc and native where the task "
             "has it); --mode train: the preset's own]",
    )  # fmt: skip
    p.add_argument(
        "--env", metavar="ID", default=None,
        help="a Gymnasium task instead of Mission Gym: --mode env steps it (dummy, subproc, native where it has one) and "
             "measures its memory; --mode train composes each --preset for it [Mission Gym]",
    )  # fmt: skip
    p.add_argument("--seconds", type=float, default=2.0, help="measuring time per configuration")
    p.add_argument(
        "--threads", type=int, nargs="+", default=None, metavar="N",
        help="--mode env: thread counts the native env is measured on [1 and every count up to the cores, doubling]",
    )  # fmt: skip
    p.add_argument("--max-subproc", type=int, default=16, help="largest n_envs tried with subproc (one process per env)")
    p.add_argument("--csv", type=Path, default=None, help="also write the table to this CSV file")
    return p


def _train_refusal(args: argparse.Namespace) -> str | None:
    """Why --mode train cannot run with these flags (one line), or None."""
    bad = [k for k in args.vec_env or [] if k not in TRAIN_KINDS]
    if bad:
        return (f"--vec-env {bad[0]!r} is not valid for --mode train{suggest(bad[0], list(TRAIN_KINDS))}; "
                f"valid: {', '.join(TRAIN_KINDS)}")  # fmt: skip
    for name in args.preset:
        problem = preset_problem(name)
        if problem:
            return problem
        if args.env is not None:  # the preset for the task: its recipe must serve the task's kind of spaces
            try:
                task_config(name, args.env)
            except ValueError as exc:
                return str(exc).replace("\n", " ")
    if args.rollouts < 1:
        return f"--rollouts must be >= 1, got {args.rollouts}"
    device = args.device
    if device != "auto" and not (device == "cpu" or device == "cuda" or (device.startswith("cuda:") and device[5:].isdigit())):
        return f"--device {device!r} is not valid; use auto, cpu, cuda or cuda:N"
    if args.num_threads < 1:
        return f"--num-threads must be >= 1, got {args.num_threads}"
    return None


def _train_mode(args: argparse.Namespace) -> int:
    from mission_gym.hardware import detect_hardware

    refusal = _train_refusal(args)
    if refusal is not None:
        return fail(refusal)
    device = args.device
    if device == "auto":
        device = "cuda" if detect_hardware().gpu_mem_gb else "cpu"
    n_envs: list[int | None] = sorted(set(args.n_envs)) if args.n_envs else [None]
    kinds: list[str | None] = list(args.vec_env) if args.vec_env else [None]
    rows = run_train_sweep(args.preset, kinds, n_envs, args.rollouts, device, args.seconds, args.max_subproc,
                           args.algo, args.num_threads, args.baseline, args.env)  # fmt: skip
    task = f" of {args.env}" if args.env else ""
    print_train_table(rows, f"PPO training{task} on {device}: {args.rollouts} rollouts per configuration after one of warm-up")
    for line in speedups(rows):
        print(line)
    if args.csv and rows:
        fields = sorted({k for r in rows for k in r}, key=lambda k: list(rows[0]).index(k) if k in rows[0] else 99)
        with args.csv.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            writer.writerows(rows)
        print(f"wrote {args.csv}")
    if args.plot and rows:
        plot_train(rows, args.plot)
        print(f"wrote {args.plot}")
    return 0


@command_main
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.train_worker is not None:  # one configuration of --mode train, in its own process
        preset, n, kind, rollouts, device, algo, threads, *env = json.loads(args.train_worker)  # env: optional
        row = train_one(preset, None if n is None else int(n), kind, int(rollouts), device, algo, int(threads), *env[:1])
        print(json.dumps(row))
        return 0
    if args.batch_worker is not None:  # one population size of --mode population, batched, in its own process
        preset, members, rollouts, device = json.loads(args.batch_worker)
        print(json.dumps(batched_one(preset, int(members), int(rollouts), device)))
        return 0
    if any(n < 1 for n in args.n_envs or []) or args.seconds <= 0:
        return fail(f"--n-envs values and --seconds must be positive (got {args.n_envs}, {args.seconds})")
    if args.env is not None:
        refusal = task_refusal(args)
        if refusal is not None:
            return fail(refusal)
    if args.env is not None and args.mode == "env":
        return task_env_mode(args)
    if args.mode == "train":
        return _train_mode(args)
    if args.mode == "placement":
        return placement_mode(args)
    if args.mode == "population":
        return population_mode(args)
    return _env_mode(args)


def _env_mode(args: argparse.Namespace) -> int:
    """``--mode env`` of Mission Gym: the sweep of every kind, its table and ``--csv``."""
    args.n_envs = args.n_envs or list(DEFAULT_N_ENVS)
    args.vec_env = args.vec_env or list(ENV_KINDS)
    bad = [k for k in args.vec_env if k not in ENV_KINDS]
    if bad:
        return fail(f"--vec-env {bad[0]!r} is not valid{suggest(bad[0], list(ENV_KINDS))}; valid: {', '.join(ENV_KINDS)}")
    threads = args.threads or _thread_counts(available_cores())
    if any(t < 1 for t in threads):
        return fail(f"--threads values must be >= 1, got {threads}")
    rows = run_env_sweep(args.vec_env, sorted(set(args.n_envs)), args.seconds, args.max_subproc, sorted(set(threads)))
    print_table(rows, "Mission Gym env steps/s (one env step = 5 physics ticks of every unit; random actions)")
    if args.csv:
        write_csv(rows, args.csv)
        print(f"wrote {args.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
