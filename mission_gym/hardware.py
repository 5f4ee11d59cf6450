"""What the machine offers a run: CPU cores, host RAM, CUDA GPUs (through torch and NVML), the training device,
TF32 and thread caps. The one place that asks the machine; everything else asks this module.

torch and pynvml are imported inside the functions that need them, so env worker processes and the launcher's
planning stay light.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import psutil

MB = 2**20
GB = 2**30
#: environment variables that cap the threads of the BLAS/OpenMP/numba pools of a process
THREAD_ENV_VARS = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "NUMBA_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
)


# --- CPU and host RAM -------------------------------------------------------------------------------------------
def core_ids() -> list[int]:
    """The CPU cores this process may run on (its affinity mask, not the machine's total), in order."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))  # macOS, Windows


def available_cores() -> int:
    """How many CPU cores this process may run on."""
    return len(core_ids())


def total_ram_gb() -> float:
    """Total host RAM in GiB."""
    return psutil.virtual_memory().total / GB


def free_host_mb() -> float:
    """Host memory available to new processes, in MiB."""
    return psutil.virtual_memory().available / MB


# --- GPUs -------------------------------------------------------------------------------------------------------
def load_nvml() -> ModuleType | None:
    """``pynvml`` (from nvidia-ml-py) initialised, or None when it is missing or no driver answers."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...: no GPU to watch
        return None
    return pynvml


def nvml_handle(nvml: Any, device_index: int) -> Any:
    """The NVML handle of torch's ``cuda:device_index``.

    CUDA and NVML may number GPUs differently (``CUDA_VISIBLE_DEVICES``, ``CUDA_DEVICE_ORDER``), so the UUID torch
    reports is used when available, then the ``CUDA_VISIBLE_DEVICES`` list, then the index itself.

    :param nvml: the initialised ``pynvml`` module (or a stand-in with the same functions)
    :param device_index: torch's CUDA device index
    """
    try:
        import torch

        uuid = str(torch.cuda.get_device_properties(device_index).uuid)
        return nvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}")
    except Exception:
        pass
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if device_index < len(visible):
        entry = visible[device_index]
        if entry.isdigit():
            return nvml.nvmlDeviceGetHandleByIndex(int(entry))
        return nvml.nvmlDeviceGetHandleByUUID(entry)
    return nvml.nvmlDeviceGetHandleByIndex(device_index)


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as NVML sees it (index = CUDA index under ``CUDA_DEVICE_ORDER=PCI_BUS_ID``)."""

    index: int
    name: str
    total_mb: float
    free_mb: float


def _visible(count: int) -> list[int]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return list(range(count))
    try:
        return [i for i in (int(v) for v in visible.split(",") if v.strip()) if 0 <= i < count]
    except ValueError:  # UUIDs: take the first ones, as CUDA would number them
        return list(range(min(count, len([v for v in visible.split(",") if v.strip()]))))


def list_gpus() -> list[GpuInfo]:
    """The GPUs this process may use with their free memory, from NVML (no torch import); ``[]`` without any."""
    nv = load_nvml()
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


def gpu_memory_by_pid(pids: set[int] | list[int]) -> float:
    """GPU memory (MiB) used by the given processes on all GPUs, as far as NVML can attribute it (0 inside PID
    namespaces where NVML's pids are not ours)."""
    wanted = set(pids)
    nv = load_nvml()
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


def gpu_memory_gb(device: str = "cuda") -> float | None:
    """Total memory of a CUDA device in GiB as torch sees it, or None without CUDA.

    :param device: ``cuda`` or ``cuda:<index>``
    """
    import torch

    if not torch.cuda.is_available():
        return None
    return float(torch.cuda.get_device_properties(torch.device(device)).total_memory) / GB


@dataclass(frozen=True)
class Hardware:
    """What the machine offers a run.

    :param gpu_mem_gb: total memory of the CUDA device in GiB, None without CUDA
    :param gpu_name: its name, None without CUDA
    :param cores: CPU cores this process may use
    :param ram_gb: total host RAM in GiB
    """

    gpu_mem_gb: float | None
    gpu_name: str | None
    cores: int
    ram_gb: float


def detect_hardware(device: str = "cuda") -> Hardware:
    """Detect the GPU (through torch, so ``CUDA_VISIBLE_DEVICES`` is respected), usable cores and host RAM.

    :param device: the CUDA device to report
    """
    gpu_mem = name = None
    try:
        gpu_mem = gpu_memory_gb(device)
        if gpu_mem is not None:
            import torch

            name = torch.cuda.get_device_name(torch.device(device))
    except Exception:  # a broken driver counts as no GPU here; the trainer reports the real error when it uses one
        gpu_mem = None
    return Hardware(gpu_mem_gb=gpu_mem, gpu_name=name, cores=available_cores(), ram_gb=total_ram_gb())


# --- the training device and threads ------------------------------------------------------------------------------
def resolve_device(device: str) -> str:
    """``auto`` → ``cuda`` when present, else ``cpu``; an explicit CUDA device must exist.

    :raises ValueError: for a CUDA device this machine does not have
    """
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ValueError(f"--device {device}: no CUDA device is available here; use --device cpu or auto")
        index = int(device.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            raise ValueError(f"--device {device}: only {torch.cuda.device_count()} CUDA device(s) here (cuda:0..)")
    if device == "mps" and not torch.backends.mps.is_available():
        raise ValueError("--device mps: MPS is not available here; use --device cpu or auto")
    return device


def enable_tf32() -> None:
    """TensorFloat-32 matmuls and convolutions on Ampere+ GPUs: ~2× faster updates at PPO-irrelevant precision."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.set_float32_matmul_precision("high")


def learner_threads(env_workers: int, requested: int | None = None, cores: int | None = None) -> int:
    """Torch threads for the learner: the cores the env worker processes leave free (at least one).

    :param env_workers: env worker processes (0 for in-process vec envs)
    :param requested: an explicit ``--num-threads``, which wins
    :param cores: cores available (detected when None)
    """
    if requested is not None:
        return requested
    cores = available_cores() if cores is None else cores
    return max(1, cores - env_workers)


def thread_env(threads: int) -> dict[str, str]:
    """Environment variables that cap every math thread pool of a new process at ``threads``."""
    return {var: str(threads) for var in THREAD_ENV_VARS}


_PR_SET_PDEATHSIG = 1
_PR_GET_PDEATHSIG = 2


def parent_death_signal(sig: int, parent: int) -> Callable[[], None] | None:
    """A function that asks the kernel to send ``sig`` to the calling process when its parent dies, SIGKILL
    included (Linux ``prctl(PR_SET_PDEATHSIG)``); None where the kernel offers no such thing.

    ``prctl`` is looked up here, so a child between fork and exec only calls it. The kernel watches the *thread*
    that forked the child: the caller must keep that thread until the child ends (waiting for it does).

    :param sig: the signal the child gets
    :param parent: the pid the child's parent has (``os.getpid()`` before a fork): a parent that died before the
        request was made leaves the child adopted by another process, which the function checks for, sending
        ``sig`` at once
    """
    prctl = _prctl()
    if prctl is None:
        return None

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, sig)
        if os.getppid() != parent:  # the parent died before the request: no signal would ever come
            os.kill(os.getpid(), sig)

    return arm


def disarm_parent_death_signal() -> None:
    """Ask for no more parent-death signals (Linux; nothing elsewhere). The kernel sends one each time a dead parent's
    child is handed on to the parent's next exiting thread, so an orphan gets it several times; a process that is
    already stopping on the first wants no more."""
    prctl = _prctl()
    if prctl is not None:
        prctl(_PR_SET_PDEATHSIG, 0)


def armed_parent_death_signal() -> int:
    """The signal the kernel will send this process (its calling thread) when its parent dies; 0 if none (or not
    Linux)."""
    prctl = _prctl()
    if prctl is None:
        return 0
    import ctypes

    armed = ctypes.c_int(0)
    prctl(_PR_GET_PDEATHSIG, ctypes.byref(armed))
    return armed.value


def _prctl() -> Callable[..., int] | None:
    """Linux's ``prctl`` through ctypes; None elsewhere or where libc does not offer it."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def freeze_heap(collect: bool = True) -> None:
    """Leave this process's objects out of the garbage collector's later passes (:func:`gc.freeze`), after one
    collection of its garbage (``collect``). With torch, SB3 and numba loaded a process tracks some 360,000 objects
    and the collections of its exit took 0.8-1.1 s of a core (one whole collection 0.17 s): a command calls this at
    the interpreter's exit (``atexit``, before those collections), a forkserver once it has imported its preload
    list (its children then skip those objects too). A process that multiprocessing started ends with
    ``os._exit``, without those collections, so it does nothing there."""
    import gc
    import multiprocessing

    if multiprocessing.parent_process() is not None:
        return
    if collect:
        gc.collect()
    gc.freeze()


def cap_worker_threads() -> None:
    """Limit a worker process to one math thread (called inside env workers, before the env is built)."""
    os.environ.update(thread_env(1))
    if "torch" in sys.modules:  # SB3's worker module imports torch; don't import it if nothing has
        sys.modules["torch"].set_num_threads(1)
