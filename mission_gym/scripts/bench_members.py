"""Members side by side, for ``bench``: ``--mode placement`` (members x learner threads, each member its own
process pinned to its cores) and ``--mode population`` (a population of N members trained as processes side by side,
as many at once as the cores hold, against the same N in one batched learner; steps/s in all and per member)."""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
from typing import Any

from mission_gym.hardware import MB, available_cores, core_ids, thread_env
from mission_gym.scripts.cli import fail
from mission_gym.training.measure import write_csv

#: population sizes of --mode population
DEFAULT_MEMBERS = (1, 2, 4, 8, 16, 32)


def preset_problem(name: str) -> str | None:
    """Why ``--preset NAME`` cannot be measured (one line), or None: a shipped run preset's name, or the path of a
    preset file as ``train_ppo --preset`` takes it (``preset_path`` tells the two apart and suggests names)."""
    from mission_gym.config import ConfigError
    from mission_gym.plan.presets import is_selector, load_preset

    try:
        if is_selector(name):
            return f"--preset {name!r} is not a run preset: it picks one by hardware (selector: true)"
        load_preset(name)
    except ConfigError as exc:
        return f"--preset: {(str(exc).splitlines() or [f'{name!r} is not a valid preset'])[0]}"
    return None


def parse_placement(text: str) -> tuple[int, int]:
    """``"4x1"`` → 4 members of 1 learner thread each."""
    members, _, threads = text.partition("x")
    try:
        m, t = int(members), int(threads)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected MEMBERSxTHREADS like 2x1, got {text!r}") from None
    if m < 1 or t < 1:
        raise argparse.ArgumentTypeError(f"members and threads must be >= 1, got {text!r}")
    return m, t


def run_placements(
    preset: str, placements: list[tuple[int, int]], rollouts: int, device: str, mps: bool = True
) -> list[dict[str, object]]:
    """Each (members, threads): that many train workers of ``preset`` at once, each with ``threads`` learner threads
    pinned to its own ``threads`` cores (round-robin over this process's cores), the way a population's member
    processes run (on CUDA sharing the GPU through MPS as they do, unless ``mps`` is False); the rows give each
    member's steps/s and the machine's total."""
    from mission_gym.launch import mps as gpu_mps

    cores = core_ids()
    rows: list[dict[str, object]] = []
    say = functools.partial(print, file=sys.stderr)
    for members, threads in placements:
        procs = []
        with gpu_mps.sharing(mps and device.startswith("cuda"), members, members, say=say) as extra:
            for k in range(members):
                own = {cores[(k * threads + j) % len(cores)] for j in range(threads)}
                cmd = [sys.executable, "-m", "mission_gym.scripts.bench", "--train-worker",
                       json.dumps([preset, None, "native", rollouts, device, "lean", threads])]  # fmt: skip
                env = {**os.environ, **thread_env(threads), **extra}
                procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                              preexec_fn=lambda own=own: os.sched_setaffinity(0, own)))  # fmt: skip
            fps = []
            for proc in procs:
                out, err = proc.communicate()
                if proc.returncode != 0:
                    raise RuntimeError((err.strip().splitlines() or ["no output"])[-1])
                fps.append(float(json.loads(out.strip().splitlines()[-1])["fps"]))
        row = {"preset": preset, "members": members, "threads": threads, "cores": len(cores), "mps": bool(extra),
               "member_steps_per_s": sum(fps) / len(fps), "total_steps_per_s": sum(fps)}  # fmt: skip
        rows.append(row)
        print(f"  {members} members x {threads} thread(s): {row['total_steps_per_s']:,.0f} steps/s in all", file=sys.stderr)
    return rows


def placement_mode(args: argparse.Namespace) -> int:
    preset = args.preset[0]
    problem = preset_problem(preset)
    if problem:
        return fail(problem)
    c = available_cores()
    placements = args.placements or list(dict.fromkeys([(1, 1), (1, c), (c, 1), (2 * c, 1)]))
    device = "cpu" if args.device == "auto" else args.device
    rows = run_placements(preset, placements, args.rollouts, device, mps=not args.no_mps)
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{preset}: members side by side on {c} cores ({args.rollouts} rollouts each after a warm-up)")
    for col in ("members", "learner threads", "steps/s per member", "steps/s in all"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            str(r["members"]), str(r["threads"]), f"{r['member_steps_per_s']:,.0f}", f"{r['total_steps_per_s']:,.0f}"
        )
    Console(width=120).print(table)
    if args.csv:
        write_csv(rows, args.csv)
        print(f"wrote {args.csv}")
    return 0


def batched_one(preset: str, members: int, rollouts: int, device: str) -> dict[str, Any]:
    """``members`` members of ``preset`` as one batched learner in this process (its device ``device``); the row."""
    from mission_gym.plan.presets import load_preset
    from mission_gym.settings.overrides import apply_overrides
    from mission_gym.training.measure import measure_batched

    config = apply_overrides(load_preset(preset), {"device": device, "population": {"size": 1}}, source="bench")
    got = measure_batched(config, members, rollouts=rollouts)
    busy = got.rollout_s + got.update_s
    return {
        "members": members,
        "learner": "batched",
        "total_steps_per_s": got.timesteps / got.seconds,
        "member_steps_per_s": got.timesteps / got.seconds / members,
        "rollout_share": got.rollout_s / busy if busy else None,
        "peak_rss_mb": got.peak_rss_bytes / MB,
        "gpu_max_allocated_mb": got.cuda_max_allocated / MB,
        "gpu_nvml_peak_mb": got.nvml_used_peak / MB,
    }


def game_alone(preset: str, members: int, cores: int, seconds: float = 3.0) -> float:
    """The ceiling of a population of ``members`` members of ``preset`` on ``cores`` cores: its games alone (the
    preset's game, ``members × n_envs`` of them in one core stepped on every core with random actions, each ended
    game reset as the batched learner resets them), in game steps per second after a warm-up."""
    import time

    import numpy as np

    from mission_gym.envs.mission_env import make_config
    from mission_gym.plan.presets import load_preset
    from mission_gym.sim import MissionCore

    config = load_preset(preset)
    core = MissionCore(make_config(overrides=dict(config.env_kwargs)), n_envs=members * config.n_envs, threads=cores)
    core.reset()
    rng = np.random.default_rng(0)
    actions = [rng.integers(0, 11, size=(core.n_envs, core.n_attackers)) for _ in range(16)]

    def step(k: int) -> None:
        _, _, terminated, truncated = core.step(actions[k % len(actions)])
        done = np.flatnonzero(terminated | truncated)
        if done.size:
            core.reset(done)

    for k in range(5):
        step(k)
    rounds, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step(rounds)
        rounds += 1
    return rounds * core.n_envs / (time.perf_counter() - start)


def run_population(
    preset: str, sizes: list[int], learners: list[str], rollouts: int, device: str, mps: bool = True
) -> list[dict[str, Any]]:
    """Each population size with each learner: ``processes`` as a population runs them (as many at once as the cores
    hold, one learner thread each: :func:`run_placements`; per member, the rate each has while all share the
    machine), ``batched`` in one fresh process (:func:`batched_one`); beside each, its games alone on the same cores
    (:func:`game_alone`), the ceiling a population's steps/s in all is measured against."""
    cores = available_cores()
    rows: list[dict[str, Any]] = []
    for n in sizes:
        ceiling = game_alone(preset, n, cores)
        print(f"  {n:>3} members' games alone: {ceiling:>10,.0f} steps/s on {cores} cores", file=sys.stderr, flush=True)
        for learner in learners:
            if learner == "processes":
                at_once = min(n, cores)
                row = run_placements(preset, [(at_once, 1)], rollouts, device, mps=mps)[0]
                total = float(row["total_steps_per_s"])
                row = {"members": n, "learner": "processes", "total_steps_per_s": total, "member_steps_per_s": total / n}
            else:
                cmd = [sys.executable, "-m", "mission_gym.scripts.bench", "--batch-worker",
                       json.dumps([preset, n, rollouts, device])]  # fmt: skip
                proc = subprocess.run(cmd, capture_output=True, text=True)
                if proc.returncode != 0:
                    raise RuntimeError((proc.stderr.strip().splitlines() or ["no output"])[-1])
                row = json.loads(proc.stdout.strip().splitlines()[-1])
            row["game_alone_steps_per_s"] = ceiling
            row["share_of_game_alone"] = row["total_steps_per_s"] / ceiling
            rows.append({"preset": preset, "device": device, "cores": cores, **row})
            print(
                f"  {n:>3} members, {learner:>9}: {row['total_steps_per_s']:>10,.0f} steps/s in all "
                f"({row['member_steps_per_s']:,.0f} per member)",
                file=sys.stderr,
                flush=True,
            )
    return rows


def population_mode(args: argparse.Namespace) -> int:
    """``bench --mode population``: the table of :func:`run_population`, the two learners side by side."""
    from rich.console import Console
    from rich.table import Table

    preset = args.preset[0]
    problem = preset_problem(preset)
    if problem:
        return fail(problem)
    cores = available_cores()
    sizes = sorted(set(args.members or [n for n in DEFAULT_MEMBERS if n <= max(2 * cores, 2)]))
    if any(n < 1 for n in sizes) or args.rollouts < 1:
        return fail(f"--members values and --rollouts must be >= 1, got {sizes} and {args.rollouts}")
    device = args.device
    if device == "auto":
        from mission_gym.hardware import detect_hardware

        device = "cuda" if detect_hardware().gpu_mem_gb else "cpu"
    rows = run_population(preset, sizes, list(dict.fromkeys(args.learners)), args.rollouts, device, mps=not args.no_mps)
    table = Table(title=f"{preset}: a population on {device} with {cores} cores ({args.rollouts} rollouts after a warm-up)")
    cols = ("members", "learner", "steps/s in all", "game alone", "of game alone", "steps/s per member", "rollout share",
            "peak RSS MB", "GPU MB")  # fmt: skip
    for col in cols:
        table.add_column(col, justify="right")
    for r in rows:
        share = r.get("rollout_share")
        table.add_row(
            str(r["members"]), r["learner"], f"{r['total_steps_per_s']:,.0f}", f"{r['game_alone_steps_per_s']:,.0f}",
            f"{100 * r['share_of_game_alone']:.0f}%", f"{r['member_steps_per_s']:,.0f}",
            "" if share is None else f"{100 * share:.0f}%", f"{r.get('peak_rss_mb', 0):,.0f}" if r.get("peak_rss_mb") else "",
            f"{r.get('gpu_nvml_peak_mb', 0):,.0f}" if r.get("gpu_nvml_peak_mb") else "",
        )  # fmt: skip
    Console(width=140).print(table)
    if args.csv:
        write_csv(rows, args.csv)
        print(f"wrote {args.csv}")
    return 0
