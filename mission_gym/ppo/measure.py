"""The measuring harness: train a few rollouts of a run's shape in this process and measure its peaks (host RSS,
env workers, CUDA allocator and NVML), for comparison with :func:`~mission_gym.ppo.memory.estimate_memory`
(``memory_helper --measure``, ``bench --mode train``). Rollout and update times come from the trainer's own
:class:`~mission_gym.ppo.callbacks.TimingCallback`.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass
from typing import Any

import psutil

from mission_gym import ENV_ID
from mission_gym.hardware import MB, load_nvml, nvml_handle
from mission_gym.ppo import parts
from mission_gym.ppo.callbacks import TimingCallback, Timings
from mission_gym.ppo.config import ACTIVATIONS
from mission_gym.ppo.memory import RunShape


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


def measure_training(shape: RunShape, rollouts: int = 2, seed: int = 0) -> Measurement:
    """Train PPO on Mission Gym for ``rollouts`` rollouts of ``shape`` in this process and measure its peaks.

    Builds the trainer's vec env (:func:`~mission_gym.ppo.vec_env.make_vec_env`) and SB3's PPO with the
    shape's sizes (the same buffers, policy and optimizer the trainer uses), so the figures compare like with like
    against :func:`estimate_memory`. Call it in a fresh process: the peak RSS
    covers the process's whole life.

    :param shape: the run's shape (Mission Gym's spaces)
    :param rollouts: rollouts to collect and train on
    :param seed: seed of the env and the policy
    """
    import torch
    from stable_baselines3 import PPO

    from mission_gym.ppo.monitor import ResourceSampler
    from mission_gym.ppo.vec_env import make_vec_env

    env = make_vec_env(ENV_ID, shape.n_envs, shape.vec_env, seed=seed, normalize=shape.normalize,
                       normalize_reward=shape.normalize)  # fmt: skip
    activation = getattr(torch.nn, ACTIVATIONS[shape.activation])
    policy_kwargs: dict[str, Any] = {"net_arch": {"pi": list(shape.pi_widths), "vf": list(shape.vf_widths)}}
    policy_name = "mlp"
    if shape.trunk:
        policy_name, policy_kwargs = "trunk", {"net_arch": list(shape.net_arch), "activation_fn": activation}
    policy, policy_kwargs = parts.policy(policy_name, policy_kwargs)
    model = PPO(
        policy,
        env,
        n_steps=shape.n_steps,
        batch_size=shape.batch_size,
        n_epochs=shape.n_epochs,
        policy_kwargs={**policy_kwargs, "activation_fn": activation},
        device=shape.device,
        seed=seed,
        verbose=0,
    )
    on_cuda = shape.on_cuda and torch.cuda.is_available()
    if on_cuda:
        torch.cuda.reset_peak_memory_stats()
    sampler = ResourceSampler(device=shape.device, hz=10.0)
    timesteps = rollouts * shape.rollout
    timings = Timings()
    start = time.perf_counter()
    with sampler:
        model.learn(timesteps, callback=TimingCallback(timings))
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
        timesteps=timesteps,
        rollout_s=timings.rollout_s,
        update_s=timings.train_s,
    )
    if on_cuda:
        out.cuda_max_allocated = torch.cuda.max_memory_allocated()
        out.cuda_max_reserved = torch.cuda.max_memory_reserved()
        out.nvml_used_peak = window.get("gpu/mem_used_mb", 0.0) * MB
        out.nvml_process_used = _nvml_process_memory(shape.device)
    env.close()
    return out


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
