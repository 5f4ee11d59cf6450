"""The measuring harness: train a few rollouts of a configuration in this process, built exactly as the trainer
builds it, and measure its speed and peaks (host RSS, env workers, CUDA allocator and NVML), for comparison with
:func:`~mission_gym.ppo.memory.estimate_memory` (``memory_helper --measure``, ``bench --mode train``). Rollout and
update times come from the trainer's own :class:`~mission_gym.ppo.callbacks.TimingCallback`.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass
from typing import Any

import psutil

from mission_gym.hardware import MB, load_nvml, nvml_handle
from mission_gym.ppo.callbacks import TimingCallback, Timings
from mission_gym.ppo.config import TrainConfig


@dataclass
class Measurement:
    """Peaks of a short real training run.

    :param peak_rss_bytes: the training process's peak RSS over its whole life (``getrusage``)
    :param worker_bytes: USS of the env worker processes at the end of training (subproc only)
    :param cuda_max_allocated: ``torch.cuda.max_memory_allocated`` (0 on CPU)
    :param cuda_max_reserved: ``torch.cuda.max_memory_reserved`` (0 on CPU)
    :param nvml_used_peak: the most device memory NVML reported in use while training (0 on CPU)
    :param nvml_process_used: the memory NVML attributes to this process at the end (0 when unknown)
    :param seconds: wall-clock of ``learn``
    :param timesteps: env steps trained
    :param rollout_s: time spent collecting rollouts (env steps and policy inference)
    :param update_s: time spent in PPO updates
    """

    peak_rss_bytes: float
    worker_bytes: float = 0.0
    cuda_max_allocated: float = 0.0
    cuda_max_reserved: float = 0.0
    nvml_used_peak: float = 0.0
    nvml_process_used: float = 0.0
    seconds: float = 0.0
    timesteps: int = 0
    rollout_s: float = 0.0
    update_s: float = 0.0


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
    import torch

    from mission_gym.ppo.build import build_run, finalize_config
    from mission_gym.ppo.monitor import ResourceSampler

    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm {algorithm!r} is not valid; valid: {', '.join(ALGORITHMS)}")
    config = finalize_config(config if threads is None else config.model_copy(update={"num_threads": threads}))
    setup = build_run(config, algorithm=None if algorithm == "lean" else _sb3_ppo())
    model = setup.model
    on_cuda = setup.device.startswith("cuda") and torch.cuda.is_available()
    if warmup:
        model.learn(warmup * config.rollout)
    if on_cuda:
        torch.cuda.reset_peak_memory_stats()
    sampler = ResourceSampler(device=setup.device, hz=10.0)
    timings = Timings()
    start = time.perf_counter()
    with sampler:
        model.learn(rollouts * config.rollout, callback=TimingCallback(timings), reset_num_timesteps=False)
    timings.close_update(time.perf_counter())
    seconds = time.perf_counter() - start
    window = sampler.drain()
    workers = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            workers += child.memory_full_info().uss
        except psutil.Error:
            pass
    out = Measurement(
        peak_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        worker_bytes=workers,
        seconds=seconds,
        timesteps=rollouts * config.rollout,
        rollout_s=timings.rollout_s,
        update_s=timings.train_s,
    )
    if on_cuda:
        out.cuda_max_allocated = torch.cuda.max_memory_allocated()
        out.cuda_max_reserved = torch.cuda.max_memory_reserved()
        out.nvml_used_peak = window.get("gpu/mem_used_mb", 0.0) * MB
        out.nvml_process_used = _nvml_process_memory(setup.device)
    setup.close()
    return out


def _sb3_ppo() -> Any:
    from stable_baselines3 import PPO

    return PPO


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
