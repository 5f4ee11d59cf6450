"""What the launcher sizes jobs with: the cores it may use, free host RAM and GPU memory, and each job's
estimated memory (from the training memory estimator when it can answer, else a conservative guess)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import psutil

from mission_gym.launch.jobs import Job
from mission_gym.training.presets import load_preset

MB = 1024 * 1024
#: host memory kept free for the system and the launcher itself
HOST_HEADROOM_MB = 512.0
#: when the estimator cannot answer: a train_ppo process (torch + SB3 + numba + buffers) and its CUDA context
FALLBACK_HOST_MB = 2048.0
FALLBACK_GPU_MB = 1536.0


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as NVML sees it (index = CUDA index under ``CUDA_DEVICE_ORDER=PCI_BUS_ID``)."""

    index: int
    name: str
    total_mb: float
    free_mb: float


def available_cores() -> list[int]:
    """The CPU cores this process may run on (its affinity mask), in order."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def free_host_mb() -> float:
    """Host memory available to new processes, in MiB."""
    return psutil.virtual_memory().available / MB


def _nvml():
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:  # no driver, no library, no GPU: a CPU machine
        return None


def _visible(count: int) -> list[int]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return list(range(count))
    try:
        return [i for i in (int(v) for v in visible.split(",") if v.strip()) if 0 <= i < count]
    except ValueError:  # UUIDs: take the first ones, as CUDA would number them
        return list(range(min(count, len([v for v in visible.split(",") if v.strip()]))))


def list_gpus() -> list[GpuInfo]:
    """The GPUs this process may use with their free memory; ``[]`` without NVML or GPUs."""
    nv = _nvml()
    if nv is None:
        return []
    out = []
    try:
        for cuda_index, i in enumerate(_visible(nv.nvmlDeviceGetCount())):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            mem = nv.nvmlDeviceGetMemoryInfo(h)
            name = nv.nvmlDeviceGetName(h)
            label = name.decode() if isinstance(name, bytes) else str(name)
            out.append(GpuInfo(cuda_index, label, mem.total / MB, mem.free / MB))
    except Exception:
        return out
    return out


def gpu_memory_by_pid(pids: Iterable[int]) -> float:
    """GPU memory (MiB) used by the given processes on all GPUs, as far as NVML can attribute it
    (0 inside PID namespaces where NVML's pids are not ours)."""
    wanted = set(pids)
    nv = _nvml()
    if nv is None or not wanted:
        return 0.0
    total = 0.0
    try:
        for i in range(nv.nvmlDeviceGetCount()):
            for p in nv.nvmlDeviceGetComputeRunningProcesses(nv.nvmlDeviceGetHandleByIndex(i)):
                if p.pid in wanted and p.usedGpuMemory:
                    total += p.usedGpuMemory / MB
    except Exception:
        return total
    return total


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
    """The job's target timesteps: its ``--timesteps`` flag, else its preset's; None when unknown."""
    value = job.flag("timesteps")
    if value is None:
        try:
            value = load_preset(job.preset or "auto").timesteps
        except ValueError:  # a bad preset: the job itself will report it
            return None
    try:
        return int(float(str(value).replace("_", "")))
    except ValueError:
        return None


def job_uses_gpu(job: Job, gpus: Sequence[GpuInfo]) -> bool:
    """Whether the job may train on a GPU: not with ``--device cpu`` (flag or preset) or without GPUs."""
    if not gpus:
        return False
    device = job.device
    if device is None:
        try:
            device = load_preset(job.preset or "auto").device
        except ValueError:  # a bad preset: the job itself will report it
            device = None
    return device is None or not str(device).startswith("cpu")


def estimate_job_memory(job: Job, gpus: Sequence[GpuInfo] | None = None) -> tuple[float, float]:
    """Estimated peak memory of one job: ``(host_mb, gpu_mb)``.

    Asks the memory estimator (:func:`mission_gym.training.memory.estimate_for_args`: the job's preset with its
    ``--n-envs``, ``--n-steps``, ``--batch-size``, ``--n-epochs``, ``--network-arch``, ``--vec-env`` and ``--device``
    flags); when it cannot answer, a conservative guess (:data:`FALLBACK_HOST_MB`, plus :data:`FALLBACK_GPU_MB`
    when the job may use a GPU).

    :param gpus: the GPUs jobs may use (default: this machine's); without any, ``gpu_mb`` is 0
    """
    from mission_gym.training.memory import estimate_for_args

    gpus = list_gpus() if gpus is None else gpus
    try:
        host_mb, gpu_mb = estimate_for_args(list(job.args))
        return float(host_mb), (float(gpu_mb) if gpus else 0.0)
    except ValueError:  # a preset or flag the estimator cannot read: the job itself will report it
        return FALLBACK_HOST_MB, (FALLBACK_GPU_MB if job_uses_gpu(job, gpus) else 0.0)


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
    cores = available_cores() if cores is None else cores
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
