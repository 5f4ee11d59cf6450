"""Throughput benchmark.

``python -m mission_gym.scripts.bench --mode env`` measures env steps per second of Mission Gym
through each way of batching it (a single ``MissionEnv``, SB3 ``DummyVecEnv`` and ``SubprocVecEnv``
of ``MissionEnv``, and the native ``MissionVecEnv``) over a sweep of ``n_envs``, and prints a table
whose ratios come from the same run.

``python -m mission_gym.scripts.bench --mode train --preset fast cpu --n-envs 16 64 --vec-env native subproc``
sweeps presets × n_envs × vec-env kinds through a few real PPO rollouts each (one fresh process per
configuration, so each peak RSS is its own): env steps/s, end-to-end training FPS, the share of time in
rollouts vs updates, peak RSS (and env workers' memory) and, on CUDA, peak GPU memory, next to the memory
estimator's figures. ``--csv`` writes the rows, ``--plot PNG`` draws FPS and memory against n_envs.
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
from mission_gym.scripts.cli import CliParser, fail, one_line_missing_extras

ENV_KINDS: tuple[str, ...] = ("single", "dummy", "subproc", "native")
DEFAULT_N_ENVS: tuple[int, ...] = (1, 4, 16, 64, 256, 1024)


def _make_single() -> Callable[[], object]:
    from mission_gym.envs import MissionEnv

    return MissionEnv


def bench_env(kind: str, n_envs: int, seconds: float, seed: int = 0) -> float:
    """Env steps per second of one configuration, measured for about ``seconds`` after a warm-up.

    :param kind: one of ``single``, ``dummy``, ``subproc``, ``native``
    :param n_envs: environments stepped together (``single`` steps one env ``n_envs`` times per round)
    :param seconds: measuring time
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

        venv = MissionVecEnv(n_envs, seed=seed)
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
        actions = rng.integers(0, 11, size=(64, n_envs, n_att))
        for k in range(3):  # warm-up: compiled kernels loaded, workers started
            venv.step(actions[k])
        rounds = 0
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            venv.step(actions[rounds % len(actions)])
            rounds += 1
        return rounds * n_envs / (time.perf_counter() - start)
    finally:
        venv.close()


def run_env_sweep(kinds: list[str], n_envs_list: list[int], seconds: float, max_subproc: int) -> list[dict[str, object]]:
    """Measure every (kind, n_envs) pair; rows carry the steps/s and the ratio to one ``MissionEnv``."""
    rows: list[dict[str, object]] = []
    baseline = None
    for kind in kinds:
        for n in [1] if kind == "single" else n_envs_list:
            if kind == "subproc" and n > max_subproc:
                rows.append(
                    {"vec_env": kind, "n_envs": n, "steps_per_s": None, "note": f"skipped (> --max-subproc {max_subproc})"}
                )
                continue
            sps = bench_env(kind, n, seconds)
            if kind == "single":
                baseline = sps
            rows.append({"vec_env": kind, "n_envs": n, "steps_per_s": sps, "note": ""})
            print(f"  {kind:>8} n_envs={n:<5} {sps:>12,.0f} env steps/s", file=sys.stderr, flush=True)
    if baseline is None:
        baseline = bench_env("single", 1, seconds)
    for row in rows:
        sps = row["steps_per_s"]
        row["vs_single"] = None if sps is None else sps / baseline
    return rows


TRAIN_KINDS: tuple[str, ...] = ("native", "dummy", "subproc")


def train_one(preset: str, n_envs: int, vec_env: str, rollouts: int, device: str) -> dict[str, object]:
    """Train ``rollouts`` rollouts of ``preset`` with ``n_envs`` envs in this process; the measured row (JSON-able).

    The batch size follows the preset's rule for the new rollout size (``n_envs × n_steps``).
    """
    from mission_gym.hardware import MB
    from mission_gym.ppo.measure import measure_training
    from mission_gym.ppo.memory import estimate_memory
    from mission_gym.ppo.presets import load_preset
    from mission_gym.ppo.sizing import shape_from_config

    config = load_preset(preset)
    config = config.model_validate({**config.model_dump(), "n_envs": n_envs, "vec_env": vec_env, "batch_size": "auto"})
    shape = shape_from_config(config, device=device)
    est = estimate_memory(shape)
    got = measure_training(shape, rollouts=rollouts)
    busy = got.rollout_s + got.update_s
    return {
        "preset": preset,
        "vec_env": vec_env,
        "n_envs": n_envs,
        "device": device,
        "batch_size": shape.batch_size,
        "timesteps": got.timesteps,
        "fps": got.timesteps / got.seconds,
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
    kinds: list[str],
    n_envs_list: list[int],
    rollouts: int,
    device: str,
    env_seconds: float,
    max_subproc: int,
) -> list[dict[str, object]]:
    """Every (preset, vec-env kind, n_envs): a fresh ``python -m mission_gym.scripts.bench --train-worker`` process
    trains a few rollouts; env-only steps/s of each (kind, n_envs) is measured once in this process."""
    env_sps: dict[tuple[str, int], float] = {}
    rows: list[dict[str, object]] = []
    for preset in presets:
        for kind in kinds:
            for n in n_envs_list:
                if kind == "subproc" and n > max_subproc:
                    print(f"  skip {preset} {kind} n_envs={n} (> --max-subproc {max_subproc})", file=sys.stderr)
                    continue
                if (kind, n) not in env_sps:
                    env_sps[(kind, n)] = bench_env(kind, n, env_seconds)
                cmd = [sys.executable, "-m", "mission_gym.scripts.bench", "--train-worker",
                       json.dumps([preset, n, kind, rollouts, device])]  # fmt: skip
                proc = subprocess.run(cmd, capture_output=True, text=True)
                if proc.returncode != 0:
                    tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
                    rows.append({"preset": preset, "vec_env": kind, "n_envs": n, "error": tail})
                    print(f"  {preset:>6} {kind:>8} n_envs={n:<5} failed: {tail}", file=sys.stderr)
                    continue
                row = json.loads(proc.stdout.strip().splitlines()[-1])
                row["env_steps_per_s"] = env_sps[(kind, n)]
                rows.append(row)
                print(
                    f"  {preset:>6} {kind:>8} n_envs={n:<5} {row['fps']:>9,.0f} FPS  peak RSS {row['peak_rss_mb']:,.0f} MB",
                    file=sys.stderr,
                    flush=True,
                )
    return rows


def print_train_table(rows: list[dict[str, object]], title: str) -> None:
    """Print the training sweep as a table."""
    from rich.console import Console
    from rich.table import Table

    cols = ["preset", "vec-env", "n_envs", "batch", "env steps/s", "train FPS", "rollout share", "peak RSS", "workers",
            "est. host", "GPU max alloc", "GPU NVML peak", "est. GPU"]  # fmt: skip
    table = Table(title=title)
    for col in cols:
        table.add_column(col, justify="left" if col in ("preset", "vec-env") else "right")

    def mb(v: object) -> str:
        return f"{v:,.0f} MB" if isinstance(v, (int, float)) and v else "-"

    for r in rows:
        if "error" in r:
            table.add_row(str(r["preset"]), str(r["vec_env"]), str(r["n_envs"]), *["-"] * 9, f"failed: {r['error']}"[:40])
            continue
        share = r["rollout_share"]
        table.add_row(
            str(r["preset"]), str(r["vec_env"]), str(r["n_envs"]), str(r["batch_size"]), f"{r['env_steps_per_s']:,.0f}",
            f"{r['fps']:,.0f}", "-" if share is None else f"{share:.0%}", mb(r["peak_rss_mb"]), mb(r["workers_mb"]),
            mb(r["est_host_mb"]), mb(r["gpu_max_allocated_mb"]), mb(r["gpu_nvml_peak_mb"]), mb(r["est_gpu_mb"]),
        )  # fmt: skip
    Console(width=200).print(table)


def plot_train(rows: list[dict[str, object]], path: Path) -> None:
    """Training FPS and peak memory against n_envs, one line per (preset, vec-env kind)."""
    from mission_gym.optional import require

    matplotlib = require("matplotlib", "--plot")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_fps, ax_mem) = plt.subplots(1, 2, figsize=(11, 4.2))
    series: dict[tuple[str, str], list[dict[str, object]]] = {}
    for r in rows:
        if "error" not in r:
            series.setdefault((str(r["preset"]), str(r["vec_env"])), []).append(r)
    for (preset, kind), pts in sorted(series.items()):
        pts.sort(key=lambda r: r["n_envs"])
        xs = [r["n_envs"] for r in pts]
        ax_fps.plot(xs, [r["fps"] for r in pts], marker="o", label=f"{preset} / {kind}")
        ax_mem.plot(xs, [r["peak_rss_mb"] + r["workers_mb"] for r in pts], marker="o", label=f"{preset} / {kind}")
        ax_mem.plot(xs, [r["est_host_mb"] for r in pts], linestyle="--", color=ax_mem.lines[-1].get_color())
    ticks = sorted({int(r["n_envs"]) for pts in series.values() for r in pts})
    for ax in (ax_fps, ax_mem):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.minorticks_off()
    ax_fps.set(xlabel="n_envs", ylabel="training FPS (env steps/s end to end)", title="Throughput")
    ax_mem.set(xlabel="n_envs", ylabel="host MB incl. workers (dashed: estimate)", title="Peak host memory")
    ax_fps.legend(fontsize=8)
    ax_fps.grid(alpha=0.3)
    ax_mem.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def print_table(rows: list[dict[str, object]], title: str) -> None:
    """Print the sweep as a table."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for col in ("vec-env", "n_envs", "env steps/s", "× single MissionEnv", "note"):
        table.add_column(col, justify="right" if col != "note" else "left")
    for r in rows:
        sps = r["steps_per_s"]
        table.add_row(
            str(r["vec_env"]),
            str(r["n_envs"]),
            "-" if sps is None else f"{sps:,.0f}",
            "-" if r["vs_single"] is None else f"{r['vs_single']:.1f}",
            str(r["note"]),
        )
    Console(width=120).print(table)


def write_csv(rows: list[dict[str, object]], path: Path) -> None:
    """Write the rows as CSV."""
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def build_parser() -> CliParser:
    p = CliParser(
        prog="python -m mission_gym.scripts.bench",
        description="Mission Gym throughput benchmark: env steps/s per vec-env kind and n_envs.",
    )
    p.add_argument(
        "--mode", choices=["env", "train"], default="env", help="env: simulation only; train: PPO rollouts + updates"
    )
    p.add_argument("--preset", nargs="+", default=["cpu", "fast"], metavar="NAME", help="presets swept by --mode train")
    p.add_argument("--rollouts", type=int, default=2, help="rollouts trained per configuration (--mode train)")
    p.add_argument("--device", default="auto", help="training device for --mode train: auto, cpu, cuda[:i]")
    p.add_argument("--plot", type=Path, default=None, metavar="PNG", help="--mode train: also draw FPS and memory to PNG")
    p.add_argument("--train-worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--n-envs", type=int, nargs="+", default=list(DEFAULT_N_ENVS), metavar="N", help="n_envs values to sweep")
    p.add_argument(
        "--vec-env", nargs="+", default=list(ENV_KINDS), metavar="KIND", help=f"kinds to measure: {', '.join(ENV_KINDS)}"
    )
    p.add_argument("--seconds", type=float, default=2.0, help="measuring time per configuration")
    p.add_argument("--max-subproc", type=int, default=16, help="largest n_envs tried with subproc (one process per env)")
    p.add_argument("--csv", type=Path, default=None, help="also write the table to this CSV file")
    return p


def _train_mode(args: argparse.Namespace) -> int:
    from mission_gym.hardware import detect_hardware
    from mission_gym.ppo.presets import is_selector, preset_names

    names = preset_names()
    bad = [k for k in args.vec_env if k not in TRAIN_KINDS]
    if bad:
        return fail(f"--vec-env {bad[0]!r} is not valid for --mode train{suggest(bad[0], list(TRAIN_KINDS))}; "
                    f"valid: {', '.join(TRAIN_KINDS)}")  # fmt: skip
    for name in args.preset:
        if name not in names or is_selector(name):
            runs = [n for n in names if not is_selector(n)]
            return fail(f"--preset {name!r} is not a run preset{suggest(name, runs)}; valid: {', '.join(runs)}")
    if args.rollouts < 1:
        return fail(f"--rollouts must be >= 1, got {args.rollouts}")
    device = args.device
    if device == "auto":
        device = "cuda" if detect_hardware().gpu_mem_gb else "cpu"
    elif not (device == "cpu" or device == "cuda" or (device.startswith("cuda:") and device[5:].isdigit())):
        return fail(f"--device {device!r} is not valid; use auto, cpu, cuda or cuda:N")
    rows = run_train_sweep(args.preset, args.vec_env, sorted(set(args.n_envs)), args.rollouts, device, args.seconds,
                           args.max_subproc)  # fmt: skip
    print_train_table(rows, f"PPO training sweep on {device} ({args.rollouts} rollouts per configuration)")
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


@one_line_missing_extras
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.train_worker is not None:  # one configuration of --mode train, in its own process
        preset, n, kind, rollouts, device = json.loads(args.train_worker)
        print(json.dumps(train_one(preset, int(n), kind, int(rollouts), device)))
        return 0
    if args.mode == "train":
        if args.vec_env == list(ENV_KINDS):
            args.vec_env = ["native"]
        if args.n_envs == list(DEFAULT_N_ENVS):
            args.n_envs = [16, 64]
        if any(n < 1 for n in args.n_envs) or args.seconds <= 0:
            return fail(f"--n-envs values and --seconds must be positive (got {args.n_envs}, {args.seconds})")
        return _train_mode(args)
    bad = [k for k in args.vec_env if k not in ENV_KINDS]
    if bad:
        return fail(f"--vec-env {bad[0]!r} is not valid{suggest(bad[0], list(ENV_KINDS))}; valid: {', '.join(ENV_KINDS)}")
    if any(n < 1 for n in args.n_envs) or args.seconds <= 0:
        return fail(f"--n-envs values and --seconds must be positive (got {args.n_envs}, {args.seconds})")
    rows = run_env_sweep(args.vec_env, sorted(set(args.n_envs)), args.seconds, args.max_subproc)
    print_table(rows, "Mission Gym env steps/s (one env step = 5 physics ticks of every unit; random actions)")
    if args.csv:
        write_csv(rows, args.csv)
        print(f"wrote {args.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
