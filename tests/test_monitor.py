"""The resource sampler with a fake NVML, its silence without a GPU, a clean thread stop, and the SB3 callback."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest
from stable_baselines3 import PPO
from stable_baselines3.common.logger import KVWriter, Logger

from mission_gym.envs import MissionVecEnv
from mission_gym.training import monitor
from mission_gym.training.monitor import ResourceMonitorCallback, ResourceSampler


class FakeNVML:
    """The few pynvml functions the sampler uses, replaying utilisation and memory values."""

    def __init__(self, utils: list[float], used_mb: list[float], fail_at: int | None = None) -> None:
        self.utils, self.used = list(utils), list(used_mb)
        self.calls = 0
        self.fail_at = fail_at
        self.handles: list[Any] = []

    def nvmlDeviceGetHandleByIndex(self, index: int) -> tuple[str, int]:
        self.handles.append(("index", index))
        return ("index", index)

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> tuple[str, str]:
        self.handles.append(("uuid", uuid))
        return ("uuid", uuid)

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> SimpleNamespace:
        self.calls += 1
        if self.fail_at is not None and self.calls == self.fail_at:
            raise RuntimeError("NVML_ERROR_UNKNOWN")
        return SimpleNamespace(gpu=self.utils[(self.calls - 1) % len(self.utils)], memory=0)

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> SimpleNamespace:
        return SimpleNamespace(used=self.used[(self.calls - 1) % len(self.used)] * 2**20, total=8 * 2**30)


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_gpu_aggregates_per_window() -> None:
    nvml, clock = FakeNVML([10, 90, 50], [1000, 3000, 2000]), FakeClock()
    sampler = ResourceSampler(device="cuda", nvml=nvml, clock=clock)
    assert sampler.has_gpu
    for _ in range(3):
        sampler.sample()
    clock.t += 0.6
    out = sampler.drain()
    assert out["gpu/util_mean"] == pytest.approx(50.0)
    assert out["gpu/util_max"] == 90.0
    assert out["gpu/mem_used_mb"] == pytest.approx(3000.0)
    assert out["sys/rss_mb"] > 10 and 0.0 <= out["sys/cpu_percent"] <= 100.0
    assert out["window_s"] == pytest.approx(0.6)
    sampler.sample()  # a fresh window: the next utilisation value only
    assert sampler.drain()["gpu/util_max"] == 10.0


def test_an_nvml_error_drops_one_sample_only() -> None:
    nvml = FakeNVML([40, 60, 80], [500], fail_at=2)
    sampler = ResourceSampler(device="cuda:0", nvml=nvml)
    for _ in range(3):
        sampler.sample()
    out = sampler.drain()
    assert out["gpu/util_mean"] == pytest.approx((40 + 80) / 2)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_silent_without_a_gpu(device: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr(monitor, "load_nvml", lambda: None)  # no driver / no pynvml
    sampler = ResourceSampler(device=device)
    sampler.sample()
    out = sampler.drain()
    assert not sampler.has_gpu
    assert set(out) == {"sys/cpu_percent", "sys/rss_mb", "window_s"}
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""


def test_load_nvml_without_a_driver_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    import pynvml

    def no_driver() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    monkeypatch.setattr(pynvml, "nvmlInit", no_driver)
    assert monitor.load_nvml() is None


def test_cuda_visible_devices_maps_to_the_nvml_index(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    nvml = FakeNVML([0], [0])
    # this CPU build of torch cannot give a UUID, so the CUDA_VISIBLE_DEVICES list decides
    assert monitor.nvml_handle(nvml, 1) == ("index", 3)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-abc")
    assert monitor.nvml_handle(nvml, 0) == ("uuid", "GPU-abc")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert monitor.nvml_handle(nvml, 1) == ("index", 1)


def test_thread_samples_and_stops_cleanly() -> None:
    nvml = FakeNVML([70], [100])
    sampler = ResourceSampler(device="cuda", hz=100.0, nvml=nvml)
    assert ResourceSampler(device="cpu").interval == pytest.approx(0.2)  # 5 Hz by default
    with sampler:
        thread = sampler._thread
        assert thread is not None and thread.is_alive()
        for _ in range(500):  # at most 5 s on a loaded machine
            if nvml.calls >= 3:
                break
            time.sleep(0.01)
    assert not thread.is_alive()
    assert sampler.drain()["gpu/util_max"] == 70.0
    assert not any(t.name == "resource-sampler" for t in threading.enumerate())
    with pytest.raises(ValueError):
        ResourceSampler(hz=0)


class Capture(KVWriter):
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def write(self, key_values: dict[str, Any], key_excluded: dict[str, Any], step: int = 0) -> None:
        self.rows.append(dict(key_values))


def test_callback_logs_each_rollout(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = FakeNVML([25, 75], [1234])
    model = PPO("MlpPolicy", MissionVecEnv(2, seed=0), n_steps=16, batch_size=32, n_epochs=1,
                policy_kwargs={"net_arch": [8]}, device="cpu")  # fmt: skip
    capture = Capture()
    model.set_logger(Logger(folder=None, output_formats=[capture]))
    callback = ResourceMonitorCallback(sampler=ResourceSampler(device="cuda", hz=50.0, nvml=nvml))
    model.learn(3 * 32, callback=callback)
    rows = [r for r in capture.rows if "sys/rss_mb" in r]
    assert len(rows) == 3  # one dump per rollout (log_interval=1)
    for row in rows:
        assert row["sys/rss_mb"] > 10
        assert 25.0 <= row["gpu/util_mean"] <= 75.0 and row["gpu/mem_used_mb"] == pytest.approx(1234.0)
    assert callback.sampler._thread is None  # stopped at the end of training


def test_callback_on_cpu_has_no_gpu_tags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(monitor, "load_nvml", lambda: None)
    model = PPO("MlpPolicy", MissionVecEnv(2, seed=0), n_steps=16, batch_size=32, n_epochs=1,
                policy_kwargs={"net_arch": [8]}, device="cpu")  # fmt: skip
    capture = Capture()
    model.set_logger(Logger(folder=None, output_formats=[capture]))
    callback = ResourceMonitorCallback()
    model.learn(32, callback=callback)
    row = next(r for r in capture.rows if "sys/rss_mb" in r)
    assert "sys/cpu_percent" in row and not any(k.startswith("gpu/") for k in row)
    callback.close()  # idempotent
