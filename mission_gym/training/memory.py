"""Memory estimator: host RAM and GPU memory of a PPO run, with a breakdown, before the run starts.

The model is arithmetic over the run's shape (:class:`RunShape`) plus a few constants. Every constant
says where it came from: most were measured on the project's CPU machine (torch 2.13 CPU, SB3 2.9,
numba 0.68, Python 3.11; peak RSS from ``getrusage``, worker memory from ``psutil``), the CUDA ones
come from PyTorch maintainers' published figures and are marked *uncalibrated* until a GPU run of
``python -m mission_gym.scripts.memory_helper --measure`` confirms them.

What is counted
---------------
Host RAM (one training process, plus its env workers):
  * the process baseline: Python, numpy, torch, SB3, gymnasium, the loaded numba kernels, PPO set-up;
  * SB3's ``RolloutBuffer``: per step ``obs_dim`` observation values (observation dtype), ``action_dim``
    actions (the action space dtype: int64 for (Multi)Discrete, float32 for Box) and six float32 scalars
    (rewards, returns, episode_starts, values, log_probs, advantages) — see ``RolloutBuffer.reset``;
  * the buffer's transient copies in ``RolloutBuffer.get``: ``swap_and_flatten`` copies each array
    while the old one is alive (the largest is the observations), and each minibatch is a fancy-index copy;
  * env state: the batched core's arrays (native), one Python env per slot (dummy), or one worker
    process per env (subproc);
  * on a CPU device: parameters, gradients and Adam's two moments (4 × params × 4 bytes) and the
    minibatch activations kept for backward;
  * slack: freed tensors that glibc keeps mapped, autograd's first-use allocations.
GPU memory (device ``cuda``):
  * CUDA context with cuBLAS (not seen by ``torch.cuda.max_memory_allocated``, seen by NVML);
  * parameters, gradients, Adam moments; the minibatch tensors and activations;
  * the caching allocator's slack (reserved > allocated).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

MB = 2**20
GB = 2**30

# --- Host constants (measured here, see the module docstring for the machine) ----------------------------------
# RSS of a process that imported torch + SB3 + mission_gym, built a MissionVecEnv and a PPO MlpPolicy (+80 MB: torch's
# first ops, thread pools), before ``learn``: 431–442 MB for networks of 64,64 … 1024,512,512,256 (parameters are
# counted separately). The trainer adds rich, pydantic, tqdm and the TensorBoard writer: +13 MB measured.
# Of that, the loaded numba kernels of the simulation are 49 MB (RSS after building and stepping the first env minus
# RSS after the imports); with subproc they live in the workers instead: the main process of `quick` with subproc
# peaked at 395 MB against 443 MB with native.
HOST_BASELINE_MB = 386.0
HOST_SIM_KERNELS_MB = 49.0
# Autograd's and the allocator's first-use memory in ``learn``: a 24k-parameter policy with 8×64 steps peaked
# 11 MB above its pre-learn RSS while buffer, Adam and activations add up to ~1 MB.
HOST_LEARN_FIXED_MB = 10.0
# Freed minibatch tensors that glibc keeps mapped, fragmentation: peak RSS over the counted dynamic terms was
# 1.12–1.55 × across fast/heavy/beast shapes (16×256 … 64×512 steps, batch 2048 … 8192); 1.25 centres them.
HOST_ALLOC_SLACK = 0.25
# Extra host RSS of a CUDA process (CUDA runtime, cuBLAS/cuDNN libraries mapped, pinned staging). Uncalibrated:
# PyTorch issue #12873 reports >1 GB before lazy module loading; lazy loading (default since CUDA 11.7) roughly
# halves the kernels loaded. Replace with a ``--measure`` figure from a GPU machine.
HOST_CUDA_RUNTIME_MB = 1000.0
# Native env: RSS growth per env of MissionVecEnv(4096) after a reset and a step = 2.7 KB (core arrays are
# 2.2 KB/env, the rest is views and the copies returned to SB3).
NATIVE_ENV_BYTES = 2.8e3
# DummyVecEnv of MissionEnv: RSS growth of 256 envs after a reset and a step = 85 KB per env.
DUMMY_ENV_BYTES = 85e3
# SubprocVecEnv(forkserver) worker running one MissionEnv: USS (memory only that process holds) of 202 MB,
# RSS 351 MB (shared libraries counted once per process); the forkserver itself has a 6 MB USS. Sum of USS
# is what the machine really spends, so that is what we add.
SUBPROC_WORKER_MB = 205.0
SUBPROC_SERVER_MB = 6.0

# --- Activation constants -------------------------------------------------------------------------------------
# Peak memory of one forward + backward + Adam step of ``evaluate_actions`` over a minibatch, divided by
# batch × (sum of hidden widths of the policy and value nets) × 4 bytes, measured on CPU for batch 2048–16384 and
# networks 256,256 … 1024,512,512,256: tanh 2.02–2.32, relu 1.82. Autograd keeps each Linear's input and each
# activation's output, and backward holds up to two gradients of a layer at once. Autograd saves the same
# tensors on CUDA, so the factors are used there too (uncalibrated on GPU).
ACTIVATION_FACTOR: dict[str, float] = {"tanh": 2.3, "relu": 1.9, "leaky_relu": 1.9, "elu": 2.3, "gelu": 2.3, "silu": 2.3}
DEFAULT_ACTIVATION_FACTOR = 2.3

# --- GPU constants (uncalibrated) -----------------------------------------------------------------------------
# CUDA context with lazy module loading: ~290 MB (PyTorch PR #86509) to ~400 MB (PyTorch maintainer, issue
# #109888); cuBLAS/cuBLASLt handles and workspaces for the first matmul add tens of MB. 500 MB covers both.
CUDA_CONTEXT_MB = 500.0
# PyTorch's caching allocator rounds blocks up (to 512 B below 1 MB, into 2 MB segments up to 10 MB, to 2 MB
# above) and keeps freed blocks reserved: reserved ≈ allocated × (1 + slack) + a few segments.
CUDA_ALLOC_SLACK = 0.2
CUDA_ALLOC_FIXED_MB = 20.0

# Headroom kept free when deciding whether a run fits: other processes, the desktop on a consumer GPU, fragmentation.
FIT_FRACTION = 0.85

VEC_ENV_KINDS = ("native", "dummy", "subproc")
ACTION_KINDS = ("multidiscrete", "discrete", "box", "multibinary")
# Bytes per element of the action as SB3 stores it (the action space's dtype).
_ACTION_ITEMSIZE = {"multidiscrete": 8, "discrete": 8, "box": 4, "multibinary": 1}


@dataclass(frozen=True)
class RunShape:
    """What the memory of a PPO run depends on, as plain values (independent of the trainer's config classes).

    :param n_envs: environments stepped together
    :param n_steps: steps per env per rollout
    :param batch_size: minibatch size
    :param net_arch: hidden layer widths of the policy net (SB3 builds the same widths for the value net)
    :param vf_arch: hidden widths of the value net when different from ``net_arch``
    :param trunk: one MLP of ``net_arch`` feeds both heads (``policy: trunk``); no value net of its own
    :param activation: activation name (``tanh``, ``relu``, ...)
    :param obs_dim: flattened observation size
    :param obs_itemsize: bytes per observation element (4 for float32)
    :param action_kind: ``multidiscrete``, ``discrete``, ``box`` or ``multibinary``
    :param action_sizes: ``nvec`` for multidiscrete, ``(n,)`` for discrete, ``(dim,)`` for box and multibinary
    :param vec_env: ``native``, ``dummy`` or ``subproc``
    :param device: ``cpu`` or ``cuda`` (``cuda:i`` is treated as ``cuda``)
    :param normalize: VecNormalize on (adds running statistics and a copy of the observation batch)
    :param n_epochs: PPO epochs per rollout (does not change the peak, kept for speed estimates)
    """

    n_envs: int
    n_steps: int
    batch_size: int
    net_arch: tuple[int, ...]
    vf_arch: tuple[int, ...] | None = None
    trunk: bool = False
    activation: str = "tanh"
    obs_dim: int = 100
    obs_itemsize: int = 4
    action_kind: str = "multidiscrete"
    action_sizes: tuple[int, ...] = (11, 11, 11, 11)
    vec_env: str = "native"
    device: str = "cpu"
    normalize: bool = False
    n_epochs: int = 10

    def __post_init__(self) -> None:
        for name in ("n_envs", "n_steps", "batch_size", "obs_dim", "obs_itemsize", "n_epochs"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if any(w < 1 for w in self.net_arch) or any(w < 1 for w in self.vf_arch or ()):
            raise ValueError(f"layer widths must be positive, got net_arch={self.net_arch} vf_arch={self.vf_arch}")
        if self.action_kind not in ACTION_KINDS:
            raise ValueError(f"action_kind {self.action_kind!r} is not valid; valid: {', '.join(ACTION_KINDS)}")
        if not self.action_sizes or any(n < 1 for n in self.action_sizes):
            raise ValueError(f"action_sizes must be positive, got {self.action_sizes}")
        if self.vec_env not in VEC_ENV_KINDS:
            raise ValueError(f"vec_env {self.vec_env!r} is not valid; valid: {', '.join(VEC_ENV_KINDS)}")
        if not (self.device == "cpu" or self.device.startswith("cuda")):
            raise ValueError(f"device {self.device!r} is not valid; use cpu or cuda[:i]")

    @property
    def rollout(self) -> int:
        """Transitions per rollout (``n_envs × n_steps``)."""
        return self.n_envs * self.n_steps

    @property
    def on_cuda(self) -> bool:
        return self.device.startswith("cuda")

    @property
    def pi_widths(self) -> tuple[int, ...]:
        return tuple(self.net_arch)

    @property
    def vf_widths(self) -> tuple[int, ...]:
        """Hidden widths of the value net's own layers (none when the trunk feeds the value head)."""
        if self.trunk:
            return ()
        return tuple(self.net_arch if self.vf_arch is None else self.vf_arch)

    @property
    def action_dim(self) -> int:
        """Action values stored per step in the rollout buffer (SB3's ``get_action_dim``)."""
        if self.action_kind == "multidiscrete":
            return len(self.action_sizes)
        return 1 if self.action_kind == "discrete" else self.action_sizes[0]

    @property
    def action_outputs(self) -> int:
        """Width of the policy's action head: logits for discrete kinds, means for box."""
        return sum(self.action_sizes) if self.action_kind == "multidiscrete" else self.action_sizes[0]

    def with_device(self, device: str) -> RunShape:
        """The same run on another device."""
        return replace(self, device=device)


def count_parameters(shape: RunShape) -> int:
    """Parameters of SB3's ``ActorCriticPolicy`` (MlpPolicy) for this shape: the policy and value MLPs, the action
    head, the value head and, for Box actions, the state-independent ``log_std``.

    :param shape: the run's shape
    """

    def mlp(widths: Sequence[int]) -> tuple[int, int]:
        total, last = 0, shape.obs_dim
        for w in widths:
            total += last * w + w
            last = w
        return total, last

    pi, last_pi = mlp(shape.pi_widths)
    vf, last_vf = (0, last_pi) if shape.trunk else mlp(shape.vf_widths)
    action_head = last_pi * shape.action_outputs + shape.action_outputs
    log_std = shape.action_outputs if shape.action_kind == "box" else 0
    return pi + vf + action_head + log_std + last_vf + 1


def rollout_buffer_bytes(shape: RunShape) -> int:
    """Bytes of SB3's ``RolloutBuffer`` arrays: observations, actions and six float32 per-step scalars.

    :param shape: the run's shape
    """
    per_step = shape.obs_dim * shape.obs_itemsize + shape.action_dim * _ACTION_ITEMSIZE[shape.action_kind] + 6 * 4
    return shape.rollout * per_step


def minibatch_bytes(shape: RunShape) -> int:
    """Bytes of one minibatch as ``RolloutBuffer._get_samples`` builds it: observations, actions cast to float32 and
    four float32 scalars per sample.

    :param shape: the run's shape
    """
    return shape.batch_size * (shape.obs_dim * shape.obs_itemsize + shape.action_dim * 4 + 4 * 4)


def activation_bytes(shape: RunShape) -> int:
    """Bytes autograd keeps for one minibatch's forward and backward: batch × (hidden widths of both nets + the
    action head) × 4 bytes × an activation-dependent factor (see ``ACTIVATION_FACTOR``).

    :param shape: the run's shape
    """
    widths = sum(shape.pi_widths) + sum(shape.vf_widths) + shape.action_outputs + 1
    factor = ACTIVATION_FACTOR.get(shape.activation.lower(), DEFAULT_ACTIVATION_FACTOR)
    return int(shape.batch_size * widths * 4 * factor)


@dataclass
class MemoryEstimate:
    """An estimate with its breakdown; every value in bytes.

    :param shape: the shape that was estimated
    :param params: parameter count of the policy
    :param host: host RAM terms, in the order they are printed
    :param gpu: GPU memory terms, or None on a CPU device
    """

    shape: RunShape
    params: int
    host: dict[str, float] = field(default_factory=dict)
    gpu: dict[str, float] | None = None

    @property
    def host_bytes(self) -> float:
        """Estimated peak host RAM (main process and env workers)."""
        return sum(self.host.values())

    @property
    def gpu_bytes(self) -> float:
        """Estimated peak GPU memory as NVML reports it (0 on a CPU device)."""
        return sum(self.gpu.values()) if self.gpu else 0.0

    @property
    def gpu_allocated_bytes(self) -> float:
        """The part of the GPU estimate that ``torch.cuda.max_memory_allocated`` sees (no context, no slack)."""
        if not self.gpu:
            return 0.0
        return sum(v for k, v in self.gpu.items() if k not in (GPU_CONTEXT, GPU_SLACK))

    @property
    def worker_bytes(self) -> float:
        """The part of the host estimate that lives in env worker processes (not in the main process's RSS)."""
        return self.host.get(HOST_WORKERS, 0.0)

    def breakdown(self) -> str:
        """The breakdown as aligned text lines, MB per term and the totals."""
        s = self.shape
        lines = [
            f"n_envs={s.n_envs} n_steps={s.n_steps} (rollout {s.rollout}) batch={s.batch_size} "
            f"net={','.join(map(str, s.net_arch))}{' trunk' if s.trunk else ''} {s.activation} "
            f"vec_env={s.vec_env} device={s.device} "
            f"params={self.params:,}",
            "host RAM:",
        ]
        lines += [f"  {name:<44} {value / MB:>10,.1f} MB" for name, value in self.host.items()]
        lines.append(f"  {'total':<44} {self.host_bytes / MB:>10,.1f} MB")
        if self.gpu:
            lines.append("GPU memory:")
            lines += [f"  {name:<44} {value / MB:>10,.1f} MB" for name, value in self.gpu.items()]
            lines.append(f"  {'total (as nvidia-smi shows it)':<44} {self.gpu_bytes / MB:>10,.1f} MB")
        return "\n".join(lines)


HOST_BASELINE = "process baseline (python, torch, SB3)"
HOST_SIM_KERNELS = "simulation kernels (numba, in-process envs)"
HOST_CUDA = "CUDA runtime libraries (host side)"
HOST_BUFFER = "rollout buffer"
HOST_BUFFER_COPIES = "buffer flatten + minibatch copies"
HOST_ENV = "env state"
HOST_WORKERS = "env worker processes"
HOST_MODEL = "params + grads + Adam moments"
HOST_CHECKPOINT = "checkpoint copy of the parameters"
HOST_ACTIVATIONS = "minibatch activations (forward + backward)"
HOST_SLACK = "allocator slack + first-use"
GPU_CONTEXT = "CUDA context + cuBLAS"
GPU_MODEL = "params + grads + Adam moments"
GPU_BATCH = "minibatch + rollout-step tensors"
GPU_ACTIVATIONS = "minibatch activations (forward + backward)"
GPU_SLACK = "caching-allocator slack"


def estimate_memory(shape: RunShape) -> MemoryEstimate:
    """Estimate peak host RAM and GPU memory of a PPO run.

    :param shape: the run's shape
    :return: the estimate with its breakdown
    """
    params = count_parameters(shape)
    model = 4 * params * 4  # parameters, gradients, Adam exp_avg and exp_avg_sq, all float32
    buffer = rollout_buffer_bytes(shape)
    copies = shape.rollout * shape.obs_dim * shape.obs_itemsize + minibatch_bytes(shape)
    activations = activation_bytes(shape)
    obs_batch = shape.n_envs * shape.obs_dim * 4

    host: dict[str, float] = {HOST_BASELINE: HOST_BASELINE_MB * MB}
    if shape.vec_env != "subproc":
        host[HOST_SIM_KERNELS] = HOST_SIM_KERNELS_MB * MB
    if shape.on_cuda:
        host[HOST_CUDA] = HOST_CUDA_RUNTIME_MB * MB
    host[HOST_BUFFER] = buffer
    host[HOST_BUFFER_COPIES] = copies
    if shape.vec_env == "native":
        env = shape.n_envs * NATIVE_ENV_BYTES
    elif shape.vec_env == "dummy":
        env = shape.n_envs * DUMMY_ENV_BYTES
    else:
        env = 0.0
        host[HOST_WORKERS] = (shape.n_envs * SUBPROC_WORKER_MB + SUBPROC_SERVER_MB) * MB
    if shape.normalize:
        env += 2 * obs_batch  # VecNormalize keeps the raw batch next to the normalised one
    host[HOST_ENV] = env
    if shape.on_cuda:
        host[HOST_CHECKPOINT] = params * 4  # torch.save copies the state_dict to the host while a checkpoint is written
    else:
        host[HOST_MODEL] = model
    dynamic = buffer + copies + env + host.get(HOST_MODEL, 0.0) + host.get(HOST_CHECKPOINT, 0.0)
    if not shape.on_cuda:
        host[HOST_ACTIVATIONS] = activations
        dynamic += activations
    host[HOST_SLACK] = HOST_LEARN_FIXED_MB * MB + HOST_ALLOC_SLACK * dynamic

    gpu: dict[str, float] | None = None
    if shape.on_cuda:
        allocated = model + minibatch_bytes(shape) + obs_batch + activations
        gpu = {
            GPU_CONTEXT: CUDA_CONTEXT_MB * MB,
            GPU_MODEL: model,
            GPU_BATCH: minibatch_bytes(shape) + obs_batch,
            GPU_ACTIVATIONS: activations,
            GPU_SLACK: CUDA_ALLOC_SLACK * allocated + CUDA_ALLOC_FIXED_MB * MB,
        }
    return MemoryEstimate(shape=shape, params=params, host=host, gpu=gpu)


def fits(estimate: MemoryEstimate, gpu_mem_gb: float | None, ram_gb: float, fraction: float = FIT_FRACTION) -> bool:
    """Whether an estimate fits a machine, keeping ``1 - fraction`` of each memory free.

    :param estimate: the run's estimate (on the device it would use)
    :param gpu_mem_gb: total GPU memory in GiB, or None without a GPU (then only host RAM counts)
    :param ram_gb: host RAM in GiB available to the run
    :param fraction: share of each memory the run may use
    """
    if estimate.host_bytes > fraction * ram_gb * GB:
        return False
    if estimate.gpu:
        return gpu_mem_gb is not None and estimate.gpu_bytes <= fraction * gpu_mem_gb * GB
    return True


# --- Adapters ------------------------------------------------------------------------------------------------------
_ARCH_KEYS = ("network_arch", "net_arch", "network")
_ACTIVATION_NAMES = {"Tanh": "tanh", "ReLU": "relu", "LeakyReLU": "leaky_relu", "ELU": "elu", "GELU": "gelu", "SiLU": "silu"}


def config_value(config: Any, *names: str, default: Any = None, depth: int = 2) -> Any:
    """The first of ``names`` found on ``config`` (attribute or key), looking into nested sections (e.g. the
    ``ppo:`` or ``policy:`` block of a preset) when the top level lacks it."""
    is_map = isinstance(config, Mapping)
    for name in names:
        if is_map and name in config:
            return config[name]
        if not is_map and hasattr(config, name):
            return getattr(config, name)
    if depth > 0:
        children = config.values() if is_map else getattr(config, "__dict__", {}).values()
        for child in children:
            if isinstance(child, Mapping) or hasattr(child, "model_fields") or hasattr(child, "__dataclass_fields__"):
                found = config_value(child, *names, default=_MISSING, depth=depth - 1)
                if found is not _MISSING:
                    return found
    return default


_MISSING = object()


def parse_arch(value: Any) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """Hidden widths from ``"1024,512,256"``, a list, or SB3's ``dict(pi=[...], vf=[...])``.

    :param value: the network description
    :return: the policy widths and the value widths (None when the same)
    """
    if isinstance(value, str):
        return tuple(int(w) for w in value.replace(" ", "").split(",") if w), None
    if isinstance(value, Mapping):
        pi = tuple(int(w) for w in value.get("pi", ()))
        vf = tuple(int(w) for w in value.get("vf", pi))
        return pi, (vf if vf != pi else None)
    return tuple(int(w) for w in value), None


def spaces_fields(observation_space: Any, action_space: Any) -> dict[str, Any]:
    """``RunShape`` fields that describe a Gymnasium observation and action space.

    :param observation_space: a ``Box`` (other spaces are counted by their flattened size)
    :param action_space: ``MultiDiscrete``, ``Discrete``, ``Box`` or ``MultiBinary``
    """
    from gymnasium import spaces

    obs_dim = int(spaces.flatdim(observation_space))
    dtype = getattr(observation_space, "dtype", None)
    obs_itemsize = int(dtype.itemsize) if dtype is not None else 4
    if isinstance(action_space, spaces.MultiDiscrete):
        kind, sizes = "multidiscrete", tuple(int(n) for n in action_space.nvec.ravel())
    elif isinstance(action_space, spaces.Discrete):
        kind, sizes = "discrete", (int(action_space.n),)
    elif isinstance(action_space, spaces.Box):
        kind, sizes = "box", (int(math.prod(action_space.shape)),)
    elif isinstance(action_space, spaces.MultiBinary):
        kind, sizes = "multibinary", (int(math.prod(action_space.shape)),)
    else:
        raise ValueError(f"action space {action_space} is not supported by PPO's buffers")
    return {"obs_dim": obs_dim, "obs_itemsize": obs_itemsize, "action_kind": kind, "action_sizes": sizes}


@functools.lru_cache(maxsize=32)
def _env_spaces(env_id: str, kwargs_items: tuple[tuple[str, Any], ...]) -> tuple[tuple[str, Any], ...]:
    import gymnasium as gym

    from mission_gym.training.vec_env import check_env_id

    check_env_id(env_id)
    env = gym.make(env_id, **dict(kwargs_items))
    try:
        return tuple(spaces_fields(env.observation_space, env.action_space).items())
    finally:
        env.close()


def env_spaces(env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``RunShape`` space fields of a Gymnasium id (made once, then cached); ``{}`` for Mission Gym, whose default
    scenario the ``RunShape`` defaults describe.

    :param env_id: a registered id (``module:Id`` imports the module first)
    :param env_kwargs: arguments for ``gym.make``
    """
    from mission_gym.training.vec_env import MISSION_ENV_ID

    if env_id == MISSION_ENV_ID and not env_kwargs:
        return {}
    items = tuple(sorted((k, v) for k, v in (env_kwargs or {}).items()))
    try:
        return dict(_env_spaces(env_id, items))
    except TypeError:  # unhashable kwargs: make it uncached
        return dict(_env_spaces.__wrapped__(env_id, items))


def shape_from_config(config: Any, *, device: str | None = None, cores: int | None = None, **spaces: Any) -> RunShape:
    """Build a :class:`RunShape` from a training configuration: the trainer's ``TrainConfig`` or a mapping/object
    with the same field names (looked up one section deep, so ``ppo:``-style blocks work too).

    Reads ``n_envs``, ``n_steps``, ``batch_size`` (``auto``: :func:`~mission_gym.training.batch.choose_batch_size`
    with ``target_batch`` and ``min_batch``), ``n_epochs``, ``network_arch``, ``activation``, ``vec_env`` (``auto``:
    :func:`~mission_gym.training.vec_env.resolve_kind`), ``env``, ``device`` and ``normalize``.

    :param config: the configuration
    :param device: overrides the configuration's device; ``auto`` left unresolved counts as ``cpu`` (so does ``mps``)
    :param cores: CPU cores, for resolving ``vec_env: auto`` (detected when None)
    :param spaces: ``RunShape`` fields for envs other than Mission Gym, e.g. from :func:`spaces_fields`
    """
    from mission_gym.training.batch import DEFAULT_FLOOR, choose_batch_size

    missing = [k for k in ("n_envs", "n_steps") if config_value(config, k) is None]
    if missing:
        raise ValueError(f"the configuration has no {' or '.join(missing)}")
    n_envs = int(config_value(config, "n_envs"))
    n_steps = int(config_value(config, "n_steps"))
    batch = config_value(config, "batch_size")
    if batch in (None, "auto"):
        target = int(config_value(config, "target_batch", default=n_envs * n_steps))
        batch = choose_batch_size(n_envs * n_steps, target, int(config_value(config, "min_batch", default=DEFAULT_FLOOR)))
    pi, vf = parse_arch(config_value(config, *_ARCH_KEYS, default=(64, 64)))
    activation = config_value(config, "activation", "activation_fn", default="tanh")
    trunk = config_value(config, "policy", depth=0) == "trunk"
    activation = _ACTIVATION_NAMES.get(getattr(activation, "__name__", str(activation)), str(activation)).lower()
    dev = device or str(config_value(config, "device", default="cpu"))
    vec_env = str(config_value(config, "vec_env", default="auto"))
    if vec_env == "auto":
        if cores is None:
            from mission_gym.training.hardware import available_cores

            cores = available_cores()
        from mission_gym.training.vec_env import resolve_kind

        vec_env = resolve_kind(vec_env, str(config_value(config, "env", default="MissionGym-v0")), n_envs, cores)
    fields: dict[str, Any] = {
        "n_envs": n_envs,
        "n_steps": n_steps,
        "batch_size": int(batch),
        "net_arch": pi,
        "vf_arch": vf,
        "trunk": trunk,
        "activation": activation,
        "vec_env": vec_env,
        "device": "cpu" if dev in ("auto", "mps") else dev,  # MPS: unified memory, counted as host RAM
        "normalize": bool(config_value(config, "normalize", default=False)),
        "n_epochs": int(config_value(config, "n_epochs", default=10)),
    }
    fields.update(spaces)
    return RunShape(**fields)


def estimate_for_config(config: Any, *, device: str | None = None, **spaces: Any) -> MemoryEstimate:
    """Estimate a training configuration (see :func:`shape_from_config` for what is read).

    This is the adapter the trainer calls with its resolved ``TrainConfig`` and resolved device.

    :param config: the configuration
    :param device: the resolved device (overrides the configuration's ``auto``)
    :param spaces: ``RunShape`` fields for envs other than Mission Gym (see :func:`spaces_fields`)
    """
    return estimate_memory(shape_from_config(config, device=device, **spaces))


# --- Presets and the ``auto`` choice -------------------------------------------------------------------------------
# ``auto`` gives a GPU preset at least n_envs / ENVS_PER_CORE cores (fast 2, heavy 4, beast 8). A heuristic: the
# native env steps in one thread, but each step also runs policy inference and SB3's Python loop, and torch uses
# the remaining cores for its CPU-side work; with fewer cores the bigger presets' longer rollouts leave the GPU idle.
ENVS_PER_CORE = 8


def load_presets(directory: str | Path | None = None) -> dict[str, Any]:
    """Every run preset by name (selectors such as ``auto`` left out), from ``directory`` or the shipped presets.

    :param directory: a directory of ``*.yaml`` presets; None for the package's own
    """
    from mission_gym.training.presets import is_selector, load_preset, preset_names, presets_dir

    names = [n for n in preset_names(directory) if not is_selector(n, directory)]
    if not names:
        raise FileNotFoundError(f"no presets (*.yaml) in {Path(directory) if directory is not None else presets_dir()}")
    return {name: load_preset(name, directory) for name in names}


def preset_shapes(presets: Mapping[str, Any], device: str | None = None) -> dict[str, RunShape]:
    """Shapes of presets.

    :param presets: name → preset (``TrainConfig`` or mapping)
    :param device: ``cpu`` or ``cuda`` for every preset; None keeps each preset's own (``auto`` → cpu)
    """
    return {
        name: shape_from_config(
            cfg,
            device=device,
            **env_spaces(
                str(config_value(cfg, "env", default="MissionGym-v0")), config_value(cfg, "env_kwargs", default=None)
            ),
        )
        for name, cfg in presets.items()
    }


def choose_auto_preset(
    gpu_mem_gb: float | None, cores: int, ram_gb: float, directory: str | Path | None = None, rules: Any = None
) -> str:
    """The preset ``--preset auto`` runs, chosen with the estimator.

    The candidates are the GPU presets ``auto.yaml`` lists and its CPU preset. With a GPU: the candidate with the
    largest estimated GPU memory that fits the card and the host RAM (keeping ``1 - FIT_FRACTION`` of each free)
    and has at least ``n_envs / ENVS_PER_CORE`` cores. Without one, or when no GPU candidate fits: the CPU preset.

    :param gpu_mem_gb: total memory of the GPU in GiB, None without a CUDA GPU
    :param cores: CPU cores available to the run
    :param ram_gb: host RAM in GiB available to the run
    :param directory: a directory of presets with an ``auto.yaml``; None for the package's own
    :param rules: the parsed selector (``AutoPreset``); None reads ``directory``'s ``auto.yaml``
    """
    from mission_gym.config.yaml_io import read_yaml, validate
    from mission_gym.training.presets import AUTO_PRESET, AutoPreset, load_preset, presets_dir

    if rules is None:
        path = Path(directory if directory is not None else presets_dir()) / f"{AUTO_PRESET}.yaml"
        rules = validate(AutoPreset, read_yaml(path), str(path))
    if gpu_mem_gb:
        estimates = [estimate_memory(shape_from_config(load_preset(name, directory), device="cuda", cores=cores))
                     for name in rules.gpu]  # fmt: skip
        for est in sorted(estimates, key=lambda e: e.gpu_bytes, reverse=True):
            if fits(est, gpu_mem_gb, ram_gb) and cores * ENVS_PER_CORE >= est.shape.n_envs:
                return next(name for name, e in zip(rules.gpu, estimates) if e is est)
    return rules.cpu


def largest_fitting_preset(
    gpu_mem_gb: float | None, ram_gb: float, presets: Mapping[str, Any], device: str = "cuda"
) -> tuple[str | None, list[tuple[str, MemoryEstimate, bool]]]:
    """The preset with the largest estimate that fits, and every preset's estimate with its verdict (largest first).

    :param gpu_mem_gb: GPU memory budget in GiB (None: judge host RAM only)
    :param ram_gb: host RAM budget in GiB
    :param presets: name → preset
    :param device: the device the presets would run on
    """
    rows = []
    for name, shape in preset_shapes(presets, device=device).items():
        est = estimate_memory(shape)
        rows.append((name, est, fits(est, gpu_mem_gb, ram_gb)))
    rows.sort(key=lambda r: (r[1].gpu_bytes, r[1].host_bytes), reverse=True)
    best = next((name for name, _, ok in rows if ok), None)
    return best, rows


def oom_message(shape: RunShape, gpu_mem_gb: float | None, ram_gb: float, presets: Mapping[str, Any] | None = None) -> str:
    """The text shown when training runs out of CUDA memory: the estimator's breakdown of the failing run and the
    largest preset that fits the card. Call it from the handler of ``torch.cuda.OutOfMemoryError``.

    :param shape: the run that failed
    :param gpu_mem_gb: total memory of the card in GiB (None if it cannot be read)
    :param ram_gb: host RAM in GiB
    :param presets: name → preset; None reads the shipped presets (a failure to read them is reported, not raised)
    """
    est = estimate_memory(shape)
    card = f"{gpu_mem_gb:.1f} GiB" if gpu_mem_gb else "unknown size"
    lines = [f"CUDA out of memory (card: {card}). The estimator's view of this run:", est.breakdown()]
    try:
        best, _ = largest_fitting_preset(gpu_mem_gb, ram_gb, load_presets() if presets is None else presets)
    except (OSError, ValueError) as exc:
        best = None
        lines.append(f"(presets could not be read: {exc})")
    if best:
        lines.append(f"Largest preset that fits this card: --preset {best}.")
    elif gpu_mem_gb:
        lines.append("No preset fits this card; try --device cpu.")
    lines.append(
        "Other ways out: a smaller --batch-size (activations scale with it), a narrower --network-arch, "
        "or stop other processes on the GPU (nvidia-smi)."
    )
    return "\n".join(lines)


def estimate_for_args(argv: Sequence[str], presets_directory: str | Path | None = None) -> tuple[float, float]:
    """Estimated ``(host_mb, gpu_mb)`` of a ``train_ppo`` command line (the launcher admits jobs with it).

    Reads ``--preset`` (default ``auto``, resolved with :func:`choose_auto_preset` for this machine) and the flags
    that change memory: ``--n-envs``, ``--n-steps``, ``--batch-size``, ``--n-epochs``, ``--network-arch``,
    ``--vec-env``, ``--device``, ``--env`` (its spaces). Other flags are ignored. ``gpu_mb`` is 0 when the run
    would use the CPU.

    :param argv: the ``train_ppo`` arguments
    :param presets_directory: where named presets live; None for the package's own
    """
    import argparse

    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--preset", default="auto")
    for flag in ("--n-envs", "--n-steps", "--n-epochs"):
        p.add_argument(flag, type=int)
    for flag in ("--batch-size", "--network-arch", "--vec-env", "--device", "--env"):
        p.add_argument(flag)
    args, _ = p.parse_known_args(list(argv))
    from mission_gym.training.presets import apply_overrides, load_preset

    hw = detect_hardware()
    config = load_preset(args.preset, presets_directory)
    overrides = {
        "n_envs": args.n_envs,
        "n_steps": args.n_steps,
        "n_epochs": args.n_epochs,
        "batch_size": args.batch_size if args.batch_size in (None, "auto") else int(args.batch_size),
        "network_arch": args.network_arch,
        "vec_env": args.vec_env,
        "device": args.device,
        "env": args.env,
    }
    config = apply_overrides(config, {k: v for k, v in overrides.items() if v is not None})
    device = config.device
    if device == "auto":
        device = "cuda" if hw.gpu_mem_gb else "cpu"
    spaces = env_spaces(config.env, config.env_kwargs)
    est = estimate_memory(shape_from_config(config, device=device, cores=hw.cores, **spaces))
    return est.host_bytes / MB, est.gpu_bytes / MB


@dataclass(frozen=True)
class Hardware:
    """What the machine offers a run.

    :param gpu_mem_gb: total memory of GPU 0 in GiB, None without CUDA
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
    import psutil

    from mission_gym.training.hardware import available_cores, gpu_memory_gb

    gpu_mem = name = None
    try:
        gpu_mem = gpu_memory_gb(device)
        if gpu_mem is not None:
            import torch

            name = torch.cuda.get_device_name(torch.device(device))
    except Exception:  # a broken driver counts as no GPU here; the trainer reports the real error when it uses one
        gpu_mem = None
    return Hardware(gpu_mem_gb=gpu_mem, gpu_name=name, cores=available_cores(), ram_gb=psutil.virtual_memory().total / GB)


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

    Builds the trainer's vec env (:func:`~mission_gym.training.vec_env.make_vec_env`) and SB3's PPO with the
    shape's sizes (the same buffers, policy and optimizer the trainer uses), so the figures compare like with like
    against :func:`estimate_memory`. Call it in a fresh process: the peak RSS
    covers the process's whole life.

    :param shape: the run's shape (Mission Gym's spaces)
    :param rollouts: rollouts to collect and train on
    :param seed: seed of the env and the policy
    """
    import resource
    import time

    import psutil
    import torch
    from stable_baselines3 import PPO

    from mission_gym.training.monitor import ResourceSampler
    from mission_gym.training.vec_env import make_vec_env

    env = make_vec_env("MissionGym-v0", shape.n_envs, shape.vec_env, seed=seed, normalize=shape.normalize,
                       normalize_reward=shape.normalize)  # fmt: skip
    activation = {"relu": torch.nn.ReLU, "leaky_relu": torch.nn.LeakyReLU, "elu": torch.nn.ELU, "gelu": torch.nn.GELU,
                  "silu": torch.nn.SiLU}.get(shape.activation, torch.nn.Tanh)  # fmt: skip
    policy_kwargs: dict[str, Any] = {"net_arch": {"pi": list(shape.pi_widths), "vf": list(shape.vf_widths)}}
    if shape.trunk:
        from mission_gym.training.trunk import trunk_policy_kwargs

        policy_kwargs = trunk_policy_kwargs({"net_arch": list(shape.net_arch), "activation_fn": activation})
    model = PPO(
        "MlpPolicy",
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
    timer = _phase_timer()
    start = time.perf_counter()
    with sampler:
        model.learn(timesteps, callback=timer)
    seconds = time.perf_counter() - start
    timer.close()
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
        rollout_s=timer.rollout_s,
        update_s=timer.update_s,
    )
    if on_cuda:
        out.cuda_max_allocated = torch.cuda.max_memory_allocated()
        out.cuda_max_reserved = torch.cuda.max_memory_reserved()
        out.nvml_used_peak = window.get("gpu/mem_used_mb", 0.0) * MB
        out.nvml_process_used = _nvml_process_memory(shape.device)
    env.close()
    return out


def _phase_timer() -> Any:
    """An SB3 callback that adds up the time of rollout collection and of updates (built lazily: SB3 import)."""
    import time

    from stable_baselines3.common.callbacks import BaseCallback

    class PhaseTimer(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.rollout_s = self.update_s = 0.0
            self._t: float | None = None

        def _on_rollout_start(self) -> None:
            now = time.perf_counter()
            if self._t is not None:  # the update that just ended
                self.update_s += now - self._t
            self._t = now

        def _on_rollout_end(self) -> None:
            now = time.perf_counter()
            self.rollout_s += now - (self._t or now)
            self._t = now

        def _on_step(self) -> bool:
            return True

        def close(self) -> None:  # the last update ends with learn()
            if self._t is not None:
                self.update_s += time.perf_counter() - self._t
                self._t = None

    return PhaseTimer()


def _nvml_process_memory(device: str) -> float:
    """Bytes NVML attributes to this process on ``device`` (0 when NVML cannot say, e.g. inside some containers)."""
    import os

    from mission_gym.training.monitor import load_nvml, nvml_handle

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
