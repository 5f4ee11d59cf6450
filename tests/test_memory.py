"""The memory estimator's arithmetic against SB3's real objects, the auto choice, the OOM text and the CLI."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.policies import ActorCriticPolicy

from mission_gym.hardware import GpuInfo, Hardware
from mission_gym.launch import population
from mission_gym.launch.jobs import Job
from mission_gym.launch.resources import estimate_job_memory
from mission_gym.plan import notes
from mission_gym.plan import presets as auto
from mission_gym.plan.presets import choose_preset, is_selector, load_preset, load_presets
from mission_gym.settings import memory as mem
from mission_gym.settings import sizing
from mission_gym.settings.overrides import apply_overrides

PRESETS = Path(__file__).parent / "data" / "memory_presets"
MISSION_OBS = spaces.Box(-np.inf, np.inf, (100,), np.float32)
MISSION_ACT = spaces.MultiDiscrete([11] * 4)
OTHER_SPACES = [
    (MISSION_OBS, MISSION_ACT),
    (spaces.Box(-1, 1, (11,), np.float32), spaces.Box(-1, 1, (3,), np.float32)),  # Hopper-like
    (spaces.Box(-1, 1, (4,), np.float32), spaces.Discrete(2)),  # CartPole-like
    (spaces.Box(-1, 1, (6,), np.float64), spaces.MultiBinary(5)),
]


def small_shape(**kw: object) -> mem.RunShape:
    base = {"n_envs": 4, "n_steps": 8, "batch_size": 16, "net_arch": (32, 16)}
    return mem.RunShape(**{**base, **kw})


@pytest.mark.parametrize("obs_space,act_space", OTHER_SPACES)
@pytest.mark.parametrize("arch", [(8,), (32, 16), (64, 32, 16)])
def test_parameter_count_matches_sb3(obs_space: spaces.Space, act_space: spaces.Space, arch: tuple[int, ...]) -> None:
    policy = ActorCriticPolicy(obs_space, act_space, lambda _: 3e-4, net_arch=list(arch))
    shape = small_shape(net_arch=arch, **sizing.spaces_fields(obs_space, act_space))
    assert mem.count_parameters(shape) == sum(p.numel() for p in policy.parameters())


def test_separate_value_net_is_counted() -> None:
    policy = ActorCriticPolicy(MISSION_OBS, MISSION_ACT, lambda _: 3e-4, net_arch={"pi": [32], "vf": [64, 8]})
    pi, vf = (32,), (64, 8)
    assert mem.count_parameters(small_shape(net_arch=pi, vf_arch=vf)) == sum(p.numel() for p in policy.parameters())


@pytest.mark.parametrize("obs_space,act_space", OTHER_SPACES)
def test_trunk_policy_is_counted_once(obs_space: spaces.Space, act_space: spaces.Space) -> None:
    import torch

    from mission_gym.extras.trunk import trunk_policy_kwargs

    kwargs = trunk_policy_kwargs({"net_arch": [32, 16], "activation_fn": torch.nn.Tanh})
    policy = ActorCriticPolicy(obs_space, act_space, lambda _: 3e-4, **kwargs)
    shape = small_shape(trunk=True, **sizing.spaces_fields(obs_space, act_space))
    assert mem.count_parameters(shape) == sum(p.numel() for p in policy.parameters())
    assert mem.count_parameters(shape) < mem.count_parameters(small_shape(**sizing.spaces_fields(obs_space, act_space)))
    config = load_preset("quick").model_copy(update={"policy": "trunk", "network_arch": [32, 16]})
    assert sizing.shape_from_config(config, cores=2).trunk


@pytest.mark.parametrize("obs_space,act_space", OTHER_SPACES)
def test_rollout_buffer_bytes_match_sb3(obs_space: spaces.Space, act_space: spaces.Space) -> None:
    buf = RolloutBuffer(7, obs_space, act_space, device="cpu", n_envs=3)
    arrays = ("observations", "actions", "rewards", "returns", "episode_starts", "values", "log_probs", "advantages")
    real = sum(getattr(buf, name).nbytes for name in arrays)
    shape = small_shape(n_envs=3, n_steps=7, **sizing.spaces_fields(obs_space, act_space))
    assert mem.rollout_buffer_bytes(shape) == real


def test_mission_buffer_arithmetic() -> None:
    # per step: 100 float32 observations + 4 int64 actions + 6 float32 scalars = 456 bytes
    shape = mem.RunShape(n_envs=16, n_steps=256, batch_size=2048, net_arch=(512, 512))
    assert mem.rollout_buffer_bytes(shape) == 16 * 256 * 456
    assert mem.minibatch_bytes(shape) == 2048 * (400 + 16 + 16)


def test_cpu_estimate_pins_each_term() -> None:
    shape = mem.RunShape(n_envs=16, n_steps=256, batch_size=2048, net_arch=(512, 512), activation="tanh")
    est = mem.estimate_memory(shape)
    params = 651_821  # SB3 MlpPolicy 100 -> 512,512 (pi and vf) -> 44 logits + 1 value
    assert est.params == params
    assert est.gpu is None and est.gpu_bytes == 0.0
    activations = int(2048 * (512 * 4 + 44 + 1) * 4 * mem.ACTIVATION_FACTOR["tanh"])
    expected = {
        mem.HOST_BASELINE: mem.HOST_BASELINE_MB * mem.MB,
        mem.HOST_LIBRARIES: mem.HOST_LIBRARY_FILES_MB * mem.MB,
        mem.HOST_SIM_KERNELS: mem.HOST_SIM_KERNELS_MB * mem.MB,
        mem.HOST_BUFFER: 4096 * 456,
        mem.HOST_BUFFER_COPIES: 4096 * 400 + 2048 * 432,
        mem.HOST_ENV: 16 * mem.NATIVE_ENV_BYTES,
        mem.HOST_MODEL: 16 * params,
        mem.HOST_ACTIVATIONS: activations,
    }
    dynamic = sum(v for k, v in expected.items() if k not in (mem.HOST_BASELINE, mem.HOST_LIBRARIES, mem.HOST_SIM_KERNELS))
    expected[mem.HOST_SLACK] = mem.HOST_LEARN_FIXED_MB * mem.MB + mem.HOST_ALLOC_SLACK * dynamic
    assert est.host == pytest.approx(expected)
    assert est.host_bytes == pytest.approx(sum(expected.values()))


def test_cuda_estimate_moves_model_and_activations_to_the_gpu() -> None:
    shape = mem.RunShape(n_envs=64, n_steps=512, batch_size=8192, net_arch=(1024, 512, 512, 256), device="cuda:1")
    est = mem.estimate_memory(shape)
    assert mem.HOST_MODEL not in est.host and mem.HOST_ACTIVATIONS not in est.host
    assert est.host[mem.HOST_CUDA] == mem.HOST_CUDA_RUNTIME_MB * mem.MB
    assert est.gpu[mem.GPU_CONTEXT] == mem.CUDA_CONTEXT_MB * mem.MB
    assert est.gpu[mem.GPU_MODEL] == 16 * est.params
    allocated = est.gpu[mem.GPU_MODEL] + est.gpu[mem.GPU_BATCH] + est.gpu[mem.GPU_ACTIVATIONS]
    assert est.gpu_allocated_bytes == pytest.approx(allocated)
    assert est.gpu[mem.GPU_SLACK] == pytest.approx(mem.CUDA_ALLOC_SLACK * allocated + mem.CUDA_ALLOC_FIXED_MB * mem.MB)
    assert est.gpu_bytes == pytest.approx(allocated + est.gpu[mem.GPU_CONTEXT] + est.gpu[mem.GPU_SLACK])
    assert "GPU memory:" in est.breakdown() and "CUDA context" in est.breakdown()


def test_activations_scale_with_batch_not_rollout() -> None:
    a = mem.activation_bytes(small_shape(batch_size=64))
    assert mem.activation_bytes(small_shape(batch_size=128)) == pytest.approx(2 * a, abs=1)
    assert mem.activation_bytes(small_shape(batch_size=64, n_envs=400)) == a
    assert mem.activation_bytes(small_shape(batch_size=64, activation="relu")) < a


def test_env_kinds() -> None:
    native = mem.estimate_memory(small_shape(n_envs=8))
    dummy = mem.estimate_memory(small_shape(n_envs=8, vec_env="dummy"))
    sub = mem.estimate_memory(small_shape(n_envs=8, vec_env="subproc"))
    assert native.host[mem.HOST_ENV] == 8 * mem.NATIVE_ENV_BYTES
    assert dummy.host[mem.HOST_ENV] == 8 * mem.DUMMY_ENV_BYTES
    assert sub.worker_bytes == (8 * mem.SUBPROC_WORKER_MB + mem.SUBPROC_SERVER_MB) * mem.MB
    assert mem.HOST_SIM_KERNELS not in sub.host and mem.HOST_SIM_KERNELS in native.host  # the workers hold the kernels
    assert native.worker_bytes == 0
    normalized = mem.estimate_memory(small_shape(n_envs=8, normalize=True))
    assert normalized.host[mem.HOST_ENV] == native.host[mem.HOST_ENV] + 2 * 8 * 100 * 4


@pytest.mark.parametrize(
    "bad",
    [{"n_envs": 0}, {"batch_size": -1}, {"vec_env": "ray"}, {"device": "tpu"}, {"action_kind": "dict"}, {"net_arch": (0,)}],
)
def test_bad_shapes_are_rejected(bad: dict) -> None:
    with pytest.raises(ValueError):
        small_shape(**bad)


def test_shape_from_config_resolves_what_the_trainer_resolves() -> None:
    sizes = {"n_envs": 16, "n_steps": 256, "batch_size": 2048, "network_arch": "512, 512", "vec_env": "dummy"}
    shape = sizing.shape_from_config(apply_overrides(load_preset("quick"), sizes), device="cuda")
    assert (shape.n_envs, shape.rollout, shape.net_arch, shape.vec_env, shape.device) == (
        16,
        4096,
        (512, 512),
        "dummy",
        "cuda",
    )
    auto_batch = apply_overrides(load_preset("quick"), {"n_envs": 4, "n_steps": 10, "target_batch": 16, "min_batch": 8})
    shape = sizing.shape_from_config(auto_batch)
    assert shape.batch_size == 10  # the trainer's rule: largest divisor of the rollout (40) in [min_batch, target]
    assert shape.vec_env == "native" and shape.device == "cpu"  # vec_env auto on Mission Gym; quick trains on the CPU
    pendulum = apply_overrides(auto_batch, {"env": "Pendulum-v1"})
    # a Pendulum step is far too cheap for a worker process to pay for itself (the probe's rule: test_recipes.py)
    assert sizing.shape_from_config(pendulum, cores=4).vec_env == "dummy"
    assert sizing.shape_from_config(pendulum, cores=1).vec_env == "dummy"
    cartpole = apply_overrides(auto_batch, {"env": "CartPole-v1"})  # it has a native env of its own (classic_vec)
    assert sizing.shape_from_config(cartpole, cores=4).vec_env == "native"
    if importlib.util.find_spec("mujoco") is not None:  # Hopper has a native env of its own (mujoco_vec)
        hopper = apply_overrides(auto_batch, {"env": "Hopper-v5"})
        assert sizing.shape_from_config(hopper, cores=4).vec_env == "native"
    relu = apply_overrides(auto_batch, {"activation": "relu", "device": "auto"})
    assert (sizing.shape_from_config(relu).activation, sizing.shape_from_config(relu).device) == ("relu", "cpu")


def test_presets_estimates_are_ordered() -> None:
    presets = load_presets(PRESETS)
    assert "auto" not in presets and is_selector("auto", PRESETS)
    gpu = {name: mem.estimate_memory(sizing.shape_from_config(c, device="cuda")).gpu_bytes for name, c in presets.items()}
    assert gpu["quick"] < gpu["fast"] < gpu["heavy"] < gpu["beast"]


@pytest.mark.parametrize(
    "gpu_gb,cores,ram_gb,expected",
    [
        (None, 2, 16.0, "cpu"),  # no GPU
        (8.0, 16, 64.0, "beast"),  # everything fits: the largest
        (24.0, 4, 64.0, "heavy"),  # beast wants 8 cores
        (24.0, 2, 64.0, "fast"),
        (1.1, 16, 64.0, "fast"),  # beast (~1.2 GiB) and heavy (~0.98 GiB) exceed 85% of 1.1 GiB
        (0.3, 16, 64.0, "cpu"),  # no GPU preset fits the card
        (8.0, 16, 1.0, "cpu"),  # nor the host RAM (each needs ~1.7 GiB with the CUDA libraries)
    ],
)
def test_choose_preset(gpu_gb: float | None, cores: int, ram_gb: float, expected: str) -> None:
    assert choose_preset(gpu_gb, cores, ram_gb, PRESETS) == expected


def test_oom_message_has_breakdown_and_the_preset_that_fits() -> None:
    presets = load_presets(PRESETS)
    shape = sizing.shape_from_config(presets["beast"], device="cuda")
    text = notes.oom_message(shape, gpu_mem_gb=1.1, ram_gb=64.0, cores=16, directory=PRESETS)
    assert text.startswith("CUDA out of memory (card: 1.1 GiB)")
    assert "activations" in text and "CUDA context" in text
    assert "The preset that fits this machine (what --preset auto picks): --preset fast." in text
    assert choose_preset(1.1, 16, 64.0, PRESETS) == "fast"  # the advice is --preset auto's rule
    assert "No GPU preset fits" in notes.oom_message(shape, gpu_mem_gb=0.1, ram_gb=64.0, cores=16, directory=PRESETS)


def test_shipped_presets_load() -> None:
    presets = load_presets()
    assert {"quick", "cpu", "fast", "heavy", "beast"} <= set(presets) and "auto" not in presets
    assert choose_preset(None, 4, 16.0) == "cpu"


def test_launcher_estimates_a_job_from_train_ppos_own_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus = [GpuInfo(0, "fake", 8192.0, 8192.0)]
    fast = str(PRESETS / "fast.yaml")
    host, gpu = estimate_job_memory(Job("j", ("--preset", fast, "--seed", "3")), gpus)
    est = mem.estimate_memory(sizing.shape_from_config(load_preset("fast", PRESETS), device="cuda"))
    assert (host, gpu) == pytest.approx((est.host_bytes / mem.MB, est.gpu_bytes / mem.MB))
    host_cpu, gpu_cpu = estimate_job_memory(Job("j", ("--preset", fast, "--device", "cpu", "--n-envs", "64")), gpus)
    assert gpu_cpu == 0.0 and host_cpu > 0
    monkeypatch.setattr(auto, "detect_hardware", lambda: Hardware(8.0, "fake", 16, 64.0))
    _, gpu_auto = estimate_job_memory(Job("j", ("--preset", str(PRESETS / "auto.yaml"))), gpus)  # -> beast here
    beast = mem.estimate_memory(sizing.shape_from_config(load_preset("beast", PRESETS), device="cuda"))
    assert gpu_auto == pytest.approx(beast.gpu_bytes / mem.MB)


def test_other_envs_are_sized_by_their_own_spaces() -> None:
    """A MuJoCo preset or --env is estimated with Hopper's 11 observations and 3 actions, not Mission Gym's."""
    assert sizing.env_spaces("MissionGym-v0")["obs_dim"] == mem.RunShape(1, 1, 1, (8,)).obs_dim == 100
    hopper = sizing.env_spaces("Hopper-v5")
    assert hopper == {"obs_dim": 11, "obs_itemsize": 8, "obs_bytes": None, "action_kind": "box", "action_sizes": (3,)}
    shape = sizing.shape_from_config(load_preset("mujoco"))
    assert (shape.obs_dim, shape.action_sizes) == (11, (3,))
    mission, _ = estimate_job_memory(Job("j", ("--preset", "cpu", "--device", "cpu")), [])
    cheetah, _ = estimate_job_memory(Job("j", ("--preset", "cpu", "--device", "cpu", "--env", "HalfCheetah-v5")), [])
    config = load_preset("cpu", env="HalfCheetah-v5")  # HalfCheetah's own recipe at the cpu tier
    assert config.recipe == "halfcheetah"
    assert cheetah == pytest.approx(mem.estimate_memory(sizing.shape_from_config(config)).host_bytes / mem.MB)
    assert cheetah != mission


# --- CLI --------------------------------------------------------------------------------------------------------
def run_cli(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "mission_gym.scripts.memory_helper", "--presets-dir", str(PRESETS), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_cli_compare_memory_and_breakdown() -> None:
    out = run_cli("--compare")
    assert out.returncode == 0, out.stderr
    for name in ("quick", "cpu", "fast", "heavy", "beast"):
        assert name in out.stdout
    assert "651,821" in out.stdout  # fast's parameter count
    out = run_cli("--memory", "1.1", "--ram", "64", "--cores", "4")  # --cores: the same verdict on any machine
    assert out.returncode == 0, out.stderr
    assert "Largest preset that fits: fast" in out.stdout
    out = run_cli("--preset", "heavy", "--device", "cuda")
    assert out.returncode == 0, out.stderr
    assert "GPU memory:" in out.stdout and "1,530,669" in out.stdout


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--preset", "hevy"], "did you mean 'heavy'"),
        (["--memory", "0"], "--memory must be a positive"),
        (["--memory", "abc"], "invalid float value"),
        (["--preset", "fast", "--device", "gpu"], "--device 'gpu' is not valid"),
        (["--preset", "nope.yaml"], "does not exist"),
        (["--compare", "--memory", "8"], "not allowed with"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(args: list[str], needle: str, cli_here: Callable[..., tuple[int, str, str]]) -> None:
    from mission_gym.scripts.memory_helper import main

    code, _, err = cli_here(main, ["--presets-dir", str(PRESETS), *args])
    assert code == 2
    assert needle in err
    assert len(err.strip().splitlines()) == 1


def test_cli_measure_tiny_run(tmp_path: Path) -> None:
    preset = tmp_path / "tiny.yaml"
    preset.write_text("n_envs: 2\nn_steps: 16\nbatch_size: 16\nn_epochs: 1\nnetwork_arch: [8, 8]\ndevice: cpu\n")
    out = run_cli("--measure", "--preset", str(preset), "--rollouts", "1")
    assert out.returncode == 0, out.stderr
    assert "peak RSS of the training process" in out.stdout
    assert "Estimate vs measured: tiny on MissionGym-v0, 32 steps" in out.stdout


@pytest.mark.parametrize(
    "gpu_gb,cores,ram_gb,expected",
    [
        (80.0, 16, 128.0, "beast"),  # 32 members in one batched learner, a core for every two
        (80.0, 8, 64.0, "heavy"),
        (24.0, 4, 32.0, "fast"),
        (80.0, 16, 20.0, "beast"),  # one process holds the batched members: about 2 GiB of host RAM, one CUDA context
        (80.0, 16, 1.5, "cpu"),  # not even that process fits 1.5 GiB of RAM
        (1.0, 16, 128.0, "cpu"),  # not even one CUDA context and its graphs fit 1 GiB
        (None, 16, 128.0, "cpu"),
    ],
)
def test_auto_sizes_the_members_to_the_cores_the_card_and_the_ram(gpu_gb, cores, ram_gb, expected) -> None:
    assert choose_preset(gpu_gb, cores, ram_gb) == expected


def test_a_gpu_preset_without_cuda_says_it_trains_on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(notes, "detect_hardware", lambda: Hardware(None, None, 2, 16.0))
    (line,) = notes.device_notes(load_preset("heavy"))
    assert "no CUDA device here" in line and "16 members on the CPU, 2 at a time" in line and "--preset cpu" in line
    assert notes.device_notes(load_preset("cpu")) == []
    # a member (no population of its own), pinned to one core: no member or core count that reads "1 members"
    member = population.member_config(load_preset("heavy"), seed=7)
    assert notes.device_notes(member) == [
        "no CUDA device here: the GPU preset 'heavy' trains on the CPU (slower; --preset cpu is this machine's)"
    ]
    monkeypatch.setattr(notes, "detect_hardware", lambda: Hardware(80.0, "fake", 16, 128.0))
    assert notes.device_notes(load_preset("heavy")) == []
