"""Hardware: the device, TF32 and thread counts (load sampling is :mod:`mission_gym.training.monitor`)."""

from __future__ import annotations

import os

THREAD_ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask, not the machine's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def gpu_memory_gb(device: str = "cuda") -> float | None:
    """Total memory of the CUDA device in GiB, or None without CUDA.

    :param device: ``cuda`` or ``cuda:<index>``
    """
    import torch

    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_properties(torch.device(device)).total_memory / 2**30


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


def cap_worker_threads() -> None:
    """Limit a worker process to one math thread (called inside env workers, before the env is built)."""
    for var in THREAD_ENV_VARS:
        os.environ[var] = "1"
    import sys

    if "torch" in sys.modules:  # SB3's worker module imports torch; don't import it if nothing has
        sys.modules["torch"].set_num_threads(1)
