"""What the launcher sizes jobs with: the cores it may use, free host RAM and GPU memory, and each job's
estimated memory (from the training memory estimator when it can answer, else a conservative guess)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import psutil

from mission_gym.hardware import MB, GpuInfo, core_ids, free_host_mb, list_gpus
from mission_gym.launch.jobs import Job

#: host memory kept free for the system and the launcher itself
HOST_HEADROOM_MB = 512.0
#: when the estimator cannot answer: a train_ppo process (torch + SB3 + numba + buffers) and its CUDA context
FALLBACK_HOST_MB = 2048.0
FALLBACK_GPU_MB = 1536.0


def tree_pids(pid: int) -> list[int]:
    """``pid`` and every live descendant."""
    try:
        proc = psutil.Process(pid)
        return [pid] + [c.pid for c in proc.children(recursive=True)]
    except psutil.Error:
        return []


def tree_rss_mb(pid: int) -> float:
    """Resident memory of a process and its descendants, in MiB."""
    total = 0.0
    for p in tree_pids(pid):
        try:
            total += psutil.Process(p).memory_info().rss / MB
        except psutil.Error:
            pass
    return total


def job_timesteps(job: Job) -> int | None:
    """The job's target timesteps (its flags over its preset, or its run's); None when unknown."""
    from mission_gym.plan.command import config_for_argv

    try:
        return config_for_argv(job.train_args(".")).timesteps
    except ValueError:  # a bad preset or flag: the job itself will report it
        return None


def estimate_job_memory(job: Job, gpus: Sequence[GpuInfo] | None = None, runs_dir: str = "runs") -> tuple[float, float]:
    """Estimated peak memory of one job: ``(host_mb, gpu_mb)``.

    Asks the memory estimator about the configuration the job's command line resolves to (the same code
    ``train_ppo`` runs, :func:`mission_gym.plan.command.config_for_argv`); when it cannot answer, a conservative
    guess (:data:`FALLBACK_HOST_MB`, plus :data:`FALLBACK_GPU_MB` when the job may use a GPU).

    :param gpus: the GPUs jobs may use (default: this machine's); without any, ``gpu_mb`` is 0
    :param runs_dir: where a resumed job's run lives
    """
    from mission_gym.plan.command import config_for_argv
    from mission_gym.settings.memory import estimate_memory
    from mission_gym.settings.sizing import shape_from_config

    gpus = list_gpus() if gpus is None else gpus
    try:
        config = config_for_argv(job.train_args(runs_dir))
        device = config.device
        if device == "auto":
            device = "cuda" if gpus else "cpu"
        est = estimate_memory(shape_from_config(config, device=device))
        return est.host_bytes / MB, (est.gpu_bytes / MB if gpus else 0.0)
    except ValueError:  # a preset or flag the estimator cannot read: the job itself will report it
        on_gpu = bool(gpus) and not str(job.device or "").startswith("cpu")
        return FALLBACK_HOST_MB, (FALLBACK_GPU_MB if on_gpu else 0.0)


class CoreAllocator:
    """Hands out cores to jobs: disjoint sets while there are enough, the least-used cores after that."""

    def __init__(self, cores: Sequence[int]) -> None:
        self.load = {c: 0 for c in cores}

    def take(self, n: int) -> list[int]:
        n = max(1, min(n, len(self.load)))
        chosen = sorted(sorted(self.load, key=lambda c: (self.load[c], c))[:n])
        for c in chosen:
            self.load[c] += 1
        return chosen

    def release(self, cores: Iterable[int]) -> None:
        for c in cores:
            self.load[c] = max(0, self.load[c] - 1)


@dataclass(frozen=True)
class ParallelPlan:
    """How many jobs run at once and why."""

    max_parallel: int
    by_cores: int
    by_host: int
    by_gpu: int | None
    cores: int

    def explain(self) -> str:
        parts = [f"{self.by_cores} by {self.cores} core(s)", f"{self.by_host} by free host RAM"]
        if self.by_gpu is not None:
            parts.append(f"{self.by_gpu} by free GPU memory")
        return f"{self.max_parallel} at a time ({', '.join(parts)})"


def default_max_parallel(
    jobs: Sequence[Job],
    cores: Sequence[int] | None = None,
    host_free_mb: float | None = None,
    gpus: Sequence[GpuInfo] | None = None,
) -> ParallelPlan:
    """What the machine allows: one job per asked-for core set, and as many as the estimates fit in memory."""
    cores = core_ids() if cores is None else cores
    host_free_mb = free_host_mb() if host_free_mb is None else host_free_mb
    gpus = list_gpus() if gpus is None else gpus
    estimates = [estimate_job_memory(j, gpus) for j in jobs]
    per_job_cores = max((j.cpus or 1) for j in jobs)
    by_cores = max(1, len(cores) // per_job_cores)
    host_mb = max(e[0] for e in estimates)
    by_host = max(1, int((host_free_mb - HOST_HEADROOM_MB) // max(host_mb, 1.0)))
    gpu_mb = max(e[1] for e in estimates)
    by_gpu = None
    if gpu_mb > 0:
        by_gpu = max(1, sum(int(g.free_mb // gpu_mb) for g in gpus))
    n = min(len(jobs), by_cores, by_host, by_gpu if by_gpu is not None else len(jobs))
    return ParallelPlan(max(1, n), by_cores, by_host, by_gpu, len(cores))
