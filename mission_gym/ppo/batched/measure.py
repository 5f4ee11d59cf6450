"""Measuring the batched learner: ``members`` members of a configuration built as a population's batch builds them
and trained in this process (``bench --mode population``), timed after a warm-up, with the same peaks as
:func:`~mission_gym.ppo.measure.measure_training`."""

from __future__ import annotations

import resource
import time
from dataclasses import replace

from mission_gym.hardware import MB, available_cores
from mission_gym.ppo.measure import Measurement
from mission_gym.settings.schema import TrainConfig


def measure_batched(config: TrainConfig, members: int, rollouts: int = 2, warmup: int = 1) -> Measurement:
    """Train ``members`` members of ``config`` (seeds ``seed``, ``seed + 1``, ...) as one batched learner for
    ``warmup + rollouts`` iterations; their speed (``timesteps`` counts every member's steps) and peaks after the
    warm-up (the first iterations compile the env's kernels and capture the CUDA graphs). Call it in a fresh
    process."""
    import torch
    from stable_baselines3.common.callbacks import CallbackList

    from mission_gym.ppo.batched.learner import BatchedLearner, Member
    from mission_gym.ppo.build import build_run
    from mission_gym.ppo.monitor import ResourceSampler
    from mission_gym.settings.resolve import resolve

    run = resolve(config)
    setups = [
        build_run(replace(run, config=run.config.model_copy(update={"seed": run.config.seed + k}))) for k in range(members)
    ]
    try:
        batch = []
        for setup in setups:
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
            out.cuda_max_allocated = torch.cuda.max_memory_allocated()
            out.cuda_max_reserved = torch.cuda.max_memory_reserved()
            out.nvml_used_peak = window.get("gpu/mem_used_mb", 0.0) * MB
        return out
    finally:
        for setup in setups:
            setup.close()
