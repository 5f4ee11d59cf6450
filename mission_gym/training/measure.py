"""The measuring harness: train a few rollouts of a configuration in this process, built exactly as the trainer
builds it (or SB3's own PPO with its defaults, the reference a preset's speed is compared with), and measure its
speed and peaks (host RSS, env workers, CUDA allocator and NVML), for comparison with
:func:`~mission_gym.settings.memory.estimate_memory` (``memory_helper --measure``, ``bench --mode train``). Rollout and
update times come from the trainer's own :class:`~mission_gym.training.callbacks.TimingCallback`; and the benchmarks'
tables, plot and CSV of what it measured (``bench``'s output).
"""

from __future__ import annotations

import csv
import os
import resource
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import psutil

from mission_gym.hardware import MB, load_nvml, nvml_handle
from mission_gym.settings.schema import TrainConfig
from mission_gym.training.callbacks import TimingCallback, Timings


@dataclass
class Measurement:
    """Peaks of a short real training run.

    :param peak_rss_bytes: the training process's peak RSS over its whole life (``getrusage``)
    :param worker_bytes: memory of this process's child processes at the end of training (subproc: the env workers,
        their forkserver and multiprocessing's resource tracker), each page counted once (:func:`children_memory`)
    :param file_rss_bytes: of the training process's RSS at the end, the pages of mapped files (the libraries' code
        and data: how many of them a process holds depends on what the page cache holds, not on the run; 0 off Linux)
    :param worker_file_bytes: of ``worker_bytes``, the pages of mapped files (0 off Linux)
    :param cuda_max_allocated: ``torch.cuda.max_memory_allocated`` (0 on CPU)
    :param cuda_max_reserved: ``torch.cuda.max_memory_reserved`` (0 on CPU)
    :param nvml_used_peak: the most device memory NVML reported in use while training (0 on CPU)
    :param nvml_process_used: the memory NVML attributes to this process at the end (0 when unknown)
    :param seconds: wall-clock of ``learn``
    :param timesteps: env steps trained
    :param rollout_s: time spent collecting rollouts (env steps and policy inference)
    :param update_s: time spent in PPO updates
    :param cpu_s: CPU time (user + system) of this process and its env workers over the timed rollouts; on a
        machine shared with other work, ``timesteps / cpu_s`` is the speed the run would have on a core of its own
    """

    peak_rss_bytes: float
    worker_bytes: float = 0.0
    file_rss_bytes: float = 0.0
    worker_file_bytes: float = 0.0
    cuda_max_allocated: float = 0.0
    cuda_max_reserved: float = 0.0
    nvml_used_peak: float = 0.0
    nvml_process_used: float = 0.0
    seconds: float = 0.0
    timesteps: int = 0
    rollout_s: float = 0.0
    update_s: float = 0.0
    cpu_s: float = 0.0


ALGORITHMS = ("lean", "sb3")


def measure_training(
    config: TrainConfig, rollouts: int = 2, warmup: int = 1, algorithm: str = "lean", threads: int | None = None
) -> Measurement:
    """Train ``config`` for ``warmup + rollouts`` rollouts in this process as the trainer builds it and measure its
    peaks and its speed after the warm-up (numba and torch load their kernels in the first rollout).

    Call it in a fresh process: the peak RSS covers the process's whole life.

    :param config: the run's configuration (finalised here)
    :param rollouts: rollouts timed
    :param warmup: rollouts trained first, not timed
    :param algorithm: ``lean`` (the trainer's :class:`~mission_gym.ppo.lean.LeanPPO`) or ``sb3`` (SB3's own ``PPO``
        with the same configuration, for a side-by-side comparison)
    :param threads: learner torch threads (None: the configuration's, else the trainer's choice)
    """
    from mission_gym.settings.resolve import resolve
    from mission_gym.training.build import build_run

    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm {algorithm!r} is not valid; valid: {', '.join(ALGORITHMS)}")
    config = config.without_found_starts()  # the speed of training, not of the run's recordings
    run = resolve(config if threads is None else config.model_copy(update={"num_threads": threads}))
    config = run.config
    setup = build_run(run, algorithm=None if algorithm == "lean" else _sb3_ppo())
    try:
        return _time_learning(setup.model, config.rollout, rollouts, warmup, setup.device)
    finally:
        setup.close()


#: SB3's PPO as it comes, the reference of ``bench --baseline sb3-defaults``
SB3_DEFAULTS = "sb3-defaults"


def measure_sb3_defaults(
    env_id: str,
    env_kwargs: dict[str, Any] | None = None,
    rollouts: int = 2,
    warmup: int = 1,
    threads: int = 1,
    device: str = "cpu",
    seed: int = 0,
) -> Measurement:
    """Train SB3's own ``PPO("MlpPolicy", env)``, every hyperparameter SB3's default (one env, 2,048-step rollouts,
    minibatches of 64, 10 epochs, [64, 64] tanh, no normalisation), on ``env_id`` as SB3's ``make_vec_env`` builds
    it (a ``DummyVecEnv`` of one ``Monitor``-wrapped env), and measure it as :func:`measure_training` does: the
    reference for the speed of a preset on the same env and machine. Call it in a fresh process.

    :param rollouts: rollouts of 2,048 steps timed
    :param warmup: rollouts trained first, not timed
    :param threads: torch threads
    """
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    from mission_gym.vec.factory import check_env_id

    check_env_id(env_id)
    torch.set_num_threads(threads)
    env = make_vec_env(env_id, n_envs=1, seed=seed, env_kwargs=env_kwargs)
    try:
        model = PPO("MlpPolicy", env, seed=seed, device=device)
        return _time_learning(model, model.n_steps * env.num_envs, rollouts, warmup, device)
    finally:
        env.close()


def _time_learning(model: Any, rollout: int, rollouts: int, warmup: int, device: str) -> Measurement:
    """Train ``warmup`` rollouts of ``rollout`` env steps, then time ``rollouts`` more and measure the peaks."""
    import torch
    from stable_baselines3.common.logger import Logger

    from mission_gym.training.monitor import ResourceSampler

    on_cuda = device.startswith("cuda") and torch.cuda.is_available()
    model.set_logger(Logger(None, []))  # without one, SB3 makes a folder in the temp dir
    if warmup:
        model.learn(warmup * rollout)
    if on_cuda:
        torch.cuda.reset_peak_memory_stats()
    sampler = ResourceSampler(device=device, hz=10.0)
    timings = Timings()
    cpu_start = _cpu_seconds()
    start = time.perf_counter()
    with sampler:
        model.learn(rollouts * rollout, callback=TimingCallback(timings), reset_num_timesteps=False)
    timings.close_update(time.perf_counter())
    seconds = time.perf_counter() - start
    cpu_s = _cpu_seconds() - cpu_start
    window = sampler.drain()
    out = Measurement(
        peak_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        worker_bytes=children_memory(),
        file_rss_bytes=file_rss(),
        worker_file_bytes=children_memory(files=True),
        seconds=seconds,
        timesteps=rollouts * rollout,
        rollout_s=timings.rollout_s,
        update_s=timings.train_s,
        cpu_s=cpu_s,
    )
    if on_cuda:
        _cuda_peaks(out, window)
        out.nvml_process_used = _nvml_process_memory(device)
    return out


def _proc_kb_sum(path: str, keys: tuple[str, ...]) -> float:
    """Bytes: the sum of ``keys`` (kB figures) in a ``/proc`` file of ``Key: N kB`` lines; 0 where it cannot be read."""
    try:
        text = Path(path).read_text()
    except OSError:
        return 0.0
    kb = {k: v.split() for k, _, v in (line.partition(":") for line in text.splitlines())}
    return sum(float(kb[k][0]) * 1024 for k in keys if kb.get(k))


def file_rss() -> float:
    """Bytes of this process's RSS that are pages of mapped files (``RssFile`` + ``RssShmem``; 0 off Linux)."""
    return _proc_kb_sum("/proc/self/status", ("RssFile", "RssShmem"))


def _pss_file(pid: int) -> float:
    return _proc_kb_sum(f"/proc/{pid}/smaps_rollup", ("Pss_File", "Pss_Shmem"))


def children_memory(files: bool = False) -> float:
    """Bytes the child processes of this process hold now (subproc: the env workers, their forkserver and
    multiprocessing's resource tracker), each shared page counted once: the sum of their PSS, which gives a page
    shared by ``k`` processes ``1/k`` to each. That is the workers' USS plus the pages they share with the forkserver
    (its imports) once, as :func:`~mission_gym.vec.probe.task_profile` measures a task's workers; a sum of RSS would
    count those pages once per worker, a sum of USS not at all. Off Linux (no PSS), the sum of USS.

    :param files: only the pages of mapped files in that sum (``Pss_File``; 0 off Linux)
    """
    total = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            info = None if files else child.memory_full_info()
        except psutil.Error:  # ended meanwhile, or not ours to read
            continue
        total += _pss_file(child.pid) if info is None else float(getattr(info, "pss", info.uss))
    return total


def _cuda_peaks(out: Measurement, window: dict[str, float]) -> None:
    """The CUDA allocator's peaks and the most device memory NVML reported in the sampled window."""
    import torch

    out.cuda_max_allocated = torch.cuda.max_memory_allocated()
    out.cuda_max_reserved = torch.cuda.max_memory_reserved()
    out.nvml_used_peak = window.get("gpu/mem_used_mb", 0.0) * MB


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process and its live child processes (subproc env workers)."""
    total = time.process_time()
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def _sb3_ppo() -> Any:
    """SB3's ``PPO`` with the trainer's graph-free entropy (the one change of the trainer's that is not LeanPPO's
    speed-up: a comparison with it measures LeanPPO's update and rollout alone, as it always has)."""
    from stable_baselines3 import PPO

    from mission_gym.ppo.entropy import LeanEntropy

    class SB3PPO(LeanEntropy, PPO):
        pass

    return SB3PPO


def _nvml_process_memory(device: str) -> float:
    """Bytes NVML attributes to this process on ``device`` (0 when NVML cannot say, e.g. inside some containers)."""
    nvml = load_nvml()
    if nvml is None:
        return 0.0
    try:
        handle = nvml_handle(nvml, int(device.split(":")[1]) if ":" in device else 0)
        for proc in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if proc.pid == os.getpid() and proc.usedGpuMemory:
                return float(proc.usedGpuMemory)
    except Exception:
        pass
    return 0.0


def measure_batched(config: TrainConfig, members: int, rollouts: int = 2, warmup: int = 1) -> Measurement:
    """Train ``members`` members of ``config`` (seeds ``seed``, ``seed + 1``, ...) as one batched learner for
    ``warmup + rollouts`` iterations; their speed (``timesteps`` counts every member's steps) and peaks after the
    warm-up (the first iterations compile the env's kernels and capture the CUDA graphs). Call it in a fresh
    process."""
    import torch
    from stable_baselines3.common.callbacks import CallbackList
    from stable_baselines3.common.logger import Logger

    from mission_gym.hardware import available_cores
    from mission_gym.ppo.batched.learner import BatchedLearner, Member
    from mission_gym.settings.resolve import resolve
    from mission_gym.training.build import build_run
    from mission_gym.training.monitor import ResourceSampler

    run = resolve(config.without_found_starts())
    setups = [
        build_run(replace(run, config=run.config.model_copy(update={"seed": run.config.seed + k}))) for k in range(members)
    ]
    try:
        batch = []
        for setup in setups:
            # a logger of no outputs: without one, SB3 makes a folder in the temp dir for every member measured
            setup.model.set_logger(Logger(None, []))
            total, callback = setup.model._setup_learn(10**15, CallbackList([]), True, "bench", False)
            callback.on_training_start({}, {})
            batch.append(Member(setup.model, callback, total, *setup.streams))
        learner = BatchedLearner(batch, threads=available_cores())
        for _ in range(warmup):
            learner.collect_rollouts()
            learner.train()
        on_cuda = run.device.startswith("cuda") and torch.cuda.is_available()
        if on_cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        sampler = ResourceSampler(device=run.device, hz=10.0)
        rollout_s = update_s = 0.0
        with sampler:
            for _ in range(rollouts):
                t0 = time.perf_counter()
                learner.collect_rollouts()
                t1 = time.perf_counter()
                learner.train()
                if on_cuda:
                    torch.cuda.synchronize()
                rollout_s, update_s = rollout_s + t1 - t0, update_s + time.perf_counter() - t1
        window = sampler.drain()
        out = Measurement(
            peak_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            seconds=rollout_s + update_s,
            timesteps=rollouts * run.config.rollout * members,
            rollout_s=rollout_s,
            update_s=update_s,
        )
        if on_cuda:
            _cuda_peaks(out, window)
        return out
    finally:
        for setup in setups:
            setup.close()


# --- the benchmarks' tables (bench --mode train, --env) ------------------------------------------------------
def speedups(rows: list[dict[str, object]]) -> list[str]:
    """``lean`` over ``sb3`` per configuration measured both ways, and each preset's rows over its ``sb3-defaults``
    baseline (per wall-clock and per CPU second), as lines."""

    done = [r for r in rows if "error" not in r]
    by: dict[tuple[object, ...], dict[str, float]] = {}
    for r in done:
        by.setdefault((r["preset"], r["vec_env"], r["n_envs"], r["threads"]), {})[str(r["algo"])] = float(r["fps"])  # type: ignore[arg-type]
    out = []
    for (preset, kind, n, threads), fps in by.items():
        if "lean" in fps and "sb3" in fps:
            out.append(
                f"{preset} ({kind}, {n} envs, {threads} learner thread(s)): {fps['lean']:,.0f} steps/s with the trainer's "
                f"LeanPPO vs {fps['sb3']:,.0f} with SB3's PPO = {fps['lean'] / fps['sb3']:.2f}x"
            )
    base = {r["preset"]: r for r in done if r["algo"] == SB3_DEFAULTS}
    for r in done:
        ref = base.get(r["preset"])
        if ref is None or r is ref:
            continue
        line = (
            f"{r['preset']} ({r['algo']}, {r['vec_env']}, {r['n_envs']} envs) on {ref['env']}: {_num(r['fps']):,.0f} "
            f"steps/s vs SB3's defaults {_num(ref['fps']):,.0f} = {_num(r['fps']) / _num(ref['fps']):.2f}x"
        )
        if r.get("cpu_fps") and ref.get("cpu_fps"):
            mine, theirs = _num(r["cpu_fps"]), _num(ref["cpu_fps"])
            line += f"; per CPU second {mine:,.0f} vs {theirs:,.0f} = {mine / theirs:.2f}x"
        out.append(line)
    return out


def _num(value: object) -> float:
    return float(value)  # type: ignore[arg-type]


def print_train_table(rows: list[dict[str, object]], title: str) -> None:
    """Print the training sweep as a table."""
    from rich.console import Console
    from rich.table import Table

    cols = ["preset", "algo", "threads", "vec-env", "n_envs", "batch", "env steps/s", "train FPS", "per CPU s",
            "rollout share", "peak RSS", "workers", "est. host", "GPU max alloc", "GPU NVML peak", "est. GPU"]  # fmt: skip
    table = Table(title=title)
    for col in cols:
        table.add_column(col, justify="left" if col in ("preset", "algo", "vec-env") else "right")

    def mb(v: object) -> str:
        return f"{v:,.0f} MB" if isinstance(v, (int, float)) and v else "-"

    for r in rows:
        if "error" in r:
            table.add_row(str(r["preset"]), str(r["algo"]), "-", str(r["vec_env"]), str(r["n_envs"]), *["-"] * 10,
                          f"failed: {r['error']}"[:40])  # fmt: skip
            continue
        share = r["rollout_share"]
        table.add_row(
            str(r["preset"]), str(r["algo"]), str(r["threads"]), str(r["vec_env"]), str(r["n_envs"]), str(r["batch_size"]),
            f"{r['env_steps_per_s']:,.0f}",
            f"{r['fps']:,.0f}", "-" if not r.get("cpu_fps") else f"{r['cpu_fps']:,.0f}",
            "-" if share is None else f"{share:.0%}", mb(r["peak_rss_mb"]), mb(r["workers_mb"]),
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
        pts.sort(key=lambda r: _num(r["n_envs"]))
        xs = [_num(r["n_envs"]) for r in pts]
        ax_fps.plot(xs, [_num(r["fps"]) for r in pts], marker="o", label=f"{preset} / {kind}")
        memory = [_num(r["peak_rss_mb"]) + _num(r["workers_mb"]) for r in pts]
        ax_mem.plot(xs, memory, marker="o", label=f"{preset} / {kind}")
        ax_mem.plot(xs, [_num(r["est_host_mb"]) for r in pts], linestyle="--", color=ax_mem.lines[-1].get_color())
    ticks = sorted({int(_num(r["n_envs"])) for pts in series.values() for r in pts})
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
    for col in ("vec-env", "threads", "n_envs", "env steps/s", "× single MissionEnv", "note"):
        table.add_column(col, justify="right" if col != "note" else "left")
    for r in rows:
        sps = r["steps_per_s"]
        table.add_row(
            str(r["vec_env"]),
            str(r["threads"]),
            str(r["n_envs"]),
            "-" if sps is None else f"{sps:,.0f}",
            "-" if r["vs_single"] is None else f"{r['vs_single']:.1f}",
            str(r["note"]),
        )
    Console(width=120).print(table)


def print_task_table(rows: list[dict[str, object]], title: str) -> None:
    """Print a task's sweep (``bench --env ID``) as a table: steps/s, the ratio to one env in this process, and the
    memory of each configuration."""
    from rich.console import Console
    from rich.table import Table

    def mb(value: object) -> str:
        return "-" if value is None else f"{value:,.1f} MB"

    table = Table(title=title)
    columns = ("vec-env", "n_envs", "env steps/s", "× 1 env (dummy)", "main RSS growth", "workers (PSS)", "total", "note")
    for col in columns:
        table.add_column(col, justify="left" if col in ("vec-env", "note") else "right")
    for r in rows:
        sps, grown, workers = r["steps_per_s"], r["main_rss_growth_mb"], r["workers_mb"]
        total = None if grown is None or workers is None else float(grown) + float(workers)  # type: ignore[arg-type]
        table.add_row(
            str(r["vec_env"]), str(r["n_envs"]), "-" if sps is None else f"{sps:,.0f}",
            "-" if r["vs_one_env"] is None else f"{r['vs_one_env']:.2f}", mb(grown),
            "-" if r["vec_env"] != "subproc" else mb(workers), mb(total), str(r["note"]),
        )  # fmt: skip
    Console(width=140).print(table)


def write_csv(rows: list[dict[str, object]], path: Path) -> None:
    """Write the rows as CSV (the columns of every row, in the order they first appear)."""
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for row in rows for k in row)))
        writer.writeheader()
        writer.writerows(rows)
