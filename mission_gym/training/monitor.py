"""Resource monitoring during training: a background sampler and the SB3 callback that logs it per rollout.

:class:`ResourceSampler` polls psutil (system CPU utilisation, the process's RSS) and, on CUDA, NVML (GPU
utilisation and memory in use) at ``hz`` (5 Hz by default) in a daemon thread, and keeps running aggregates that
:meth:`ResourceSampler.drain` returns and resets. :class:`ResourceMonitorCallback` drains it at the end of every
rollout and records ``sys/cpu_percent``, ``sys/rss_mb`` and, on CUDA, ``gpu/util_mean``, ``gpu/util_max`` and
``gpu/mem_used_mb``, so each value covers one collect-and-update cycle.

Without a GPU, without ``pynvml`` or when NVML fails to start, the GPU tags are simply absent: nothing is
printed. A sample costs a few syscalls and two NVML queries (tens of microseconds), so 5 Hz is free next to training.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import psutil
from stable_baselines3.common.callbacks import BaseCallback

from mission_gym.hardware import load_nvml, nvml_handle

DEFAULT_HZ = 5.0


class ResourceSampler:
    """Samples CPU, RSS and (when given a GPU) NVML utilisation and memory in a background thread.

    :param device: the training device; GPU sampling only for ``cuda``/``cuda:i``
    :param hz: samples per second (NVML's utilisation counter itself updates every 1/6 s to 1 s)
    :param nvml: an initialised ``pynvml``-like module; None loads pynvml when ``device`` is CUDA
    :param process: the process whose RSS is reported (default: this one)
    :param clock: monotonic clock, replaceable in tests
    """

    def __init__(
        self,
        device: str = "cpu",
        hz: float = DEFAULT_HZ,
        nvml: Any | None = None,
        process: psutil.Process | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if hz <= 0:
            raise ValueError(f"hz must be positive, got {hz}")
        self.interval = 1.0 / hz
        self.process = process or psutil.Process()
        self.clock = clock
        self._nvml = None
        self._handle = None
        if str(device).startswith("cuda"):
            self._nvml = nvml if nvml is not None else load_nvml()
            if self._nvml is not None:
                index = int(str(device).split(":")[1]) if ":" in str(device) else 0
                try:
                    self._handle = nvml_handle(self._nvml, index)
                except Exception:
                    self._nvml = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reset()
        psutil.cpu_percent(interval=None)  # the first call only sets psutil's reference point

    @property
    def has_gpu(self) -> bool:
        """Whether GPU samples are taken."""
        return self._handle is not None

    def _reset(self) -> None:
        self._n = 0
        self._cpu_sum = 0.0
        self._rss_max = 0.0
        self._gpu_n = 0
        self._util_sum = 0.0
        self._util_max = 0.0
        self._mem_max = 0.0
        self._since = self.clock()

    def sample(self) -> None:
        """Take one sample now (the thread calls this; tests may call it directly)."""
        cpu = psutil.cpu_percent(interval=None)
        try:
            rss = self.process.memory_info().rss / 2**20
        except psutil.Error:
            rss = 0.0
        util = mem = None
        if self._handle is not None and self._nvml is not None:
            try:
                util = float(self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu)
                mem = float(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used) / 2**20
            except Exception:  # a transient NVML error loses one sample, never the run
                util = mem = None
        with self._lock:
            self._n += 1
            self._cpu_sum += cpu
            self._rss_max = max(self._rss_max, rss)
            if util is not None and mem is not None:
                self._gpu_n += 1
                self._util_sum += util
                self._util_max = max(self._util_max, util)
                self._mem_max = max(self._mem_max, mem)

    def drain(self) -> dict[str, float]:
        """Aggregates since the last drain, as TensorBoard tags, and a fresh window.

        ``sys/cpu_percent`` is the mean system-wide CPU utilisation (0–100 over all cores), ``sys/rss_mb`` the
        largest RSS of the process, ``gpu/util_mean`` and ``gpu/util_max`` NVML's utilisation (% of time a kernel
        ran), ``gpu/mem_used_mb`` the most device memory in use (all processes on the card).
        """
        with self._lock:
            empty = self._n == 0
        if empty:  # a window shorter than one tick (or no thread) still gets a value
            self.sample()
        with self._lock:
            out: dict[str, float] = {
                "sys/cpu_percent": self._cpu_sum / max(self._n, 1),
                "sys/rss_mb": self._rss_max,
            }
            if self._gpu_n:
                out["gpu/util_mean"] = self._util_sum / self._gpu_n
                out["gpu/util_max"] = self._util_max
                out["gpu/mem_used_mb"] = self._mem_max
            out["window_s"] = self.clock() - self._since
            self._reset()
        return out

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def start(self) -> ResourceSampler:
        """Start the sampling thread (idempotent)."""
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="resource-sampler", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 2.0) -> None:
        """Stop the thread and wait for it (NVML stays initialised: it is process-wide and cheap to keep)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def __enter__(self) -> ResourceSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ResourceMonitorCallback(BaseCallback):
    """Logs the sampler's aggregates once per rollout (``sys/*`` always, ``gpu/*`` on CUDA).

    The sampler starts with training and stops when ``learn`` returns or raises (SB3 calls ``on_training_end``
    only on a normal return, so the trainer should also call :meth:`close` in its ``finally``; the thread is a
    daemon either way).

    :param device: the training device (``model.device`` is used when None)
    :param hz: samples per second
    :param sampler: a ready sampler (tests); None builds one at the start of training
    """

    def __init__(self, device: str | None = None, hz: float = DEFAULT_HZ, sampler: ResourceSampler | None = None) -> None:
        super().__init__()
        self.device = device
        self.hz = hz
        self.sampler = sampler

    def _on_training_start(self) -> None:
        if self.sampler is None:
            self.sampler = ResourceSampler(device=str(self.device or self.model.device), hz=self.hz)
        self.sampler.start()

    def _on_rollout_end(self) -> None:
        if self.sampler is None:
            return
        for key, value in self.sampler.drain().items():
            if key != "window_s":
                self.logger.record(key, value)

    def _on_step(self) -> bool:
        return True

    def _on_training_end(self) -> None:
        self.close()

    def close(self) -> None:
        """Stop the sampling thread."""
        if self.sampler is not None:
            self.sampler.stop()
