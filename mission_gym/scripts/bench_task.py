"""The benchmark of a Gymnasium task (``bench --env ID``): its env steps/s and memory per way of batching it, and the
configuration ``bench --mode train --env ID`` trains.

``python -m mission_gym.scripts.bench --env Hopper-v5 --n-envs 1 2 4 8 16 32 --vec-env dummy subproc native`` steps
the task's envs as the trainer batches them (:func:`~mission_gym.vec.factory.make_vec_env`, no normalisation) with
random actions, each configuration after a warm-up, and measures the memory it takes: this process's RSS growth
(measured from a heap handed back to the system, so a configuration is not charged less because an earlier one left
freed memory behind) and the child processes' total (the env workers, their forkserver and multiprocessing's
resource tracker, each page counted once: :func:`~mission_gym.training.measure.children_memory`).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import sys
import time
from typing import Any

import numpy as np

from mission_gym.config.loader import suggest
from mission_gym.scripts.cli import fail
from mission_gym.vec.wrappers import quiet_mujoco

#: the kinds ``--env`` measures (``native``: the task's own batched env, where it has one)
TASK_KINDS: tuple[str, ...] = ("dummy", "subproc", "native")
DEFAULT_TASK_N_ENVS: tuple[int, ...] = (1, 2, 4, 8, 16, 32)


def steps_per_second(venv: Any, actions: list[np.ndarray], n_envs: int, seconds: float) -> float:
    """Env steps per second of ``venv`` stepping the given batches of actions in turn for about ``seconds``, after a
    warm-up of 3 steps (compiled kernels loaded, workers started)."""
    for k in range(3):
        venv.step(actions[k % len(actions)])
    rounds = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        venv.step(actions[rounds % len(actions)])
        rounds += 1
    return rounds * n_envs / (time.perf_counter() - start)


def _random_actions(venv: Any, n_envs: int, seed: int, batches: int = 64) -> list[np.ndarray]:
    space = venv.action_space
    space.seed(seed)
    return [np.stack([space.sample() for _ in range(n_envs)]) for _ in range(batches)]


def bench_gym_env(env_id: str, kind: str, n_envs: int, seconds: float, seed: int = 0) -> float:
    """Env steps per second of a Gymnasium id batched as the trainer batches it (``native``, ``dummy`` or ``subproc``;
    no normalisation), random actions, measured for about ``seconds`` after a warm-up."""
    from mission_gym.vec.factory import make_vec_env

    venv = make_vec_env(env_id, n_envs, kind, seed=seed)
    try:
        venv.reset()
        return steps_per_second(venv, _random_actions(venv, n_envs, seed), n_envs, seconds)
    finally:
        venv.close()


def _rss() -> float:
    import psutil

    return float(psutil.Process().memory_info().rss)


def _settle() -> None:
    """Collect garbage and hand the heap's free pages back to the system (glibc's ``malloc_trim``), so that the RSS
    growth of the next configuration is its own and not what an earlier one freed and the allocator kept."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: the growth may read low after a larger configuration
        pass


def measure_task(env_id: str, kind: str, n_envs: int, seconds: float, seed: int = 0) -> dict[str, object]:
    """One configuration of :func:`run_task_sweep`: env steps/s, this process's RSS growth and the child processes'
    memory with the envs built and stepped (the row, JSON-able)."""
    from mission_gym.training.measure import children_memory
    from mission_gym.vec.factory import make_vec_env

    _settle()
    before = _rss()
    venv = make_vec_env(env_id, n_envs, kind, seed=seed)
    try:
        venv.reset()
        sps = steps_per_second(venv, _random_actions(venv, n_envs, seed), n_envs, seconds)
        grown, children = max(0.0, _rss() - before), children_memory()
    finally:
        venv.close()
    return {"env": env_id, "vec_env": kind, "n_envs": n_envs, "steps_per_s": sps, "main_rss_growth_mb": grown / 2**20,
            "workers_mb": children / 2**20 if kind == "subproc" else 0.0, "note": ""}  # fmt: skip


def run_task_sweep(
    env_id: str, kinds: list[str], n_envs_list: list[int], seconds: float, max_subproc: int
) -> list[dict[str, object]]:
    """Every (kind, n_envs) of a task measured in this process, after one env of it is built and stepped (the
    task's modules loaded, so the first row is not charged for them); rows carry the ratio to one env in this
    process (``dummy``, 1 env: measured too when the sweep leaves it out)."""
    bench_gym_env(env_id, "dummy", 1, 0.05)  # imports and first-use allocations, before anything is measured
    rows: list[dict[str, object]] = []
    for kind in kinds:
        for n in n_envs_list:
            if kind == "subproc" and n > max_subproc:
                rows.append({"env": env_id, "vec_env": kind, "n_envs": n, "steps_per_s": None, "main_rss_growth_mb": None,
                             "workers_mb": None, "note": f"skipped (> --max-subproc {max_subproc})"})  # fmt: skip
                continue
            row = measure_task(env_id, kind, n, seconds)
            rows.append(row)
            print(f"  {kind:>8} n_envs={n:<5} {row['steps_per_s']:>12,.0f} env steps/s", file=sys.stderr, flush=True)
    one = next((r["steps_per_s"] for r in rows if r["vec_env"] == "dummy" and r["n_envs"] == 1), None)
    if one is None:
        one = bench_gym_env(env_id, "dummy", 1, seconds)
    for row in rows:
        sps = row["steps_per_s"]
        row["vs_one_env"] = None if sps is None else float(sps) / float(one)  # type: ignore[arg-type]
    return rows


def task_refusal(args: argparse.Namespace) -> str | None:
    """Why ``bench --env ID`` cannot run with these flags (one line), or None; the id is checked first, and a MuJoCo
    task's warnings are routed before any of its envs is built (:func:`quiet_mujoco`)."""
    from mission_gym.config.yaml_io import ConfigError
    from mission_gym.vec.factory import check_env_id, has_native

    try:
        check_env_id(args.env)
    except ConfigError as exc:
        return str(exc)
    quiet_mujoco(args.env)
    if args.mode not in ("env", "train"):
        return f"--env goes with --mode env or --mode train, not --mode {args.mode}"
    if args.mode == "env":
        bad = [k for k in args.vec_env or [] if k not in TASK_KINDS]
        if bad:
            return (f"--vec-env {bad[0]!r} is not valid with --env{suggest(bad[0], list(TASK_KINDS))}; "
                    f"valid: {', '.join(TASK_KINDS)}")  # fmt: skip
        if "native" in (args.vec_env or []) and not has_native(args.env):
            return f"--vec-env native: {args.env} has no batched env of its own; use dummy or subproc"
    return None


def task_env_mode(args: argparse.Namespace) -> int:
    """``bench --mode env --env ID``: the sweep, its table and ``--csv``."""
    from mission_gym.hardware import available_cores
    from mission_gym.training.measure import print_task_table, write_csv
    from mission_gym.vec.factory import has_native

    kinds = list(args.vec_env) if args.vec_env else [k for k in TASK_KINDS if k != "native" or has_native(args.env)]
    n_envs = sorted(set(args.n_envs or DEFAULT_TASK_N_ENVS))
    try:
        rows = run_task_sweep(args.env, kinds, n_envs, args.seconds, args.max_subproc)
    except ValueError as exc:  # a ConfigError: the env refuses to be built (a missing extra, bad arguments)
        return fail(str(exc).replace("\n", " "))
    cores = available_cores()
    machine = f"{cores} core{'s' * (cores > 1)}, {_cpu_name()}"
    print_task_table(rows, f"{args.env} env steps/s and memory (random actions; {machine})")
    if args.csv:
        write_csv(rows, args.csv)
        print(f"wrote {args.csv}")
    return 0


def _cpu_name() -> str:
    """The CPU's model name with its family and model numbers (``/proc/cpuinfo``: a name such as "AMD EPYC" alone
    does not say which generation), for the table's title."""
    import platform

    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if not key.strip():
                    break  # the first core's block is enough
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    name = fields.get("model name") or platform.processor() or platform.machine()
    if "cpu family" in fields and "model" in fields:
        name += f" family {fields['cpu family']} model {fields['model']}"
    return name


def task_config(preset: str, env: str | None) -> Any:
    """The configuration ``bench --mode train`` trains for ``--preset`` on ``env`` (None: the preset's own task): a
    tier sizes the task's recipe (``cpu`` by default), a recipe or another file of settings is as written, its env
    replaced by ``env``."""
    from mission_gym.plan.presets import load_preset
    from mission_gym.settings.overrides import apply_overrides

    if env is not None:  # a tier probes the task: its warnings routed first (a train worker's stdout carries its row)
        quiet_mujoco(env)
    config = load_preset(preset, env=env)
    if env is not None and config.env != env:
        config = apply_overrides(config, {"env": env}, source="--env")
    quiet_mujoco(config.env)  # a recipe of a MuJoCo task of its own, read without building its env
    return config
