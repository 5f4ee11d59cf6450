"""Throughput benchmark.

``python -m mission_gym.scripts.bench --mode env`` measures env steps per second of Mission Gym
through each way of batching it (a single ``MissionEnv``, SB3 ``DummyVecEnv`` and ``SubprocVecEnv``
of ``MissionEnv``, and the native ``MissionVecEnv``) over a sweep of ``n_envs``, and prints a table
whose ratios come from the same run.
"""

from __future__ import annotations

import csv
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from mission_gym.config.loader import suggest
from mission_gym.scripts.cli import CliParser, fail

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
    p.add_argument("--mode", choices=["env"], default="env", help="what to measure (env: simulation only)")
    p.add_argument("--n-envs", type=int, nargs="+", default=list(DEFAULT_N_ENVS), metavar="N", help="n_envs values to sweep")
    p.add_argument(
        "--vec-env", nargs="+", default=list(ENV_KINDS), metavar="KIND", help=f"kinds to measure: {', '.join(ENV_KINDS)}"
    )
    p.add_argument("--seconds", type=float, default=2.0, help="measuring time per configuration")
    p.add_argument("--max-subproc", type=int, default=16, help="largest n_envs tried with subproc (one process per env)")
    p.add_argument("--csv", type=Path, default=None, help="also write the table to this CSV file")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
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
