"""Memory estimator: host RAM and GPU memory of a PPO run, with a breakdown, before the run starts.

Arithmetic only: a run's shape (:class:`RunShape`, plain values) and a few constants in, bytes out. Turning a
configuration into a shape is :mod:`mission_gym.settings.sizing`; measuring a real run is :mod:`mission_gym.training.measure`.
Every constant says where it came from: most were measured on the project's CPU machine (torch 2.13 CPU, SB3 2.9,
numba 0.68, Python 3.11; peak RSS from ``getrusage``, worker memory from ``psutil``), the CUDA ones come from PyTorch
maintainers' published figures and are marked *uncalibrated* until a GPU run of
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

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from mission_gym.hardware import GB, MB
from mission_gym.vec import VEC_ENV_KINDS

# --- Host constants (measured here, see the module docstring for the machine) ----------------------------------
# A process that imported torch + SB3 + mission_gym, built a MissionVecEnv and a PPO MlpPolicy (+80 MB: torch's first
# ops, thread pools), before ``learn``, peaked at 431–442 MB RSS for networks of 64,64 … 1024,512,512,256 (parameters
# are counted separately); the trainer adds rich, pydantic, tqdm and the TensorBoard writer: +13 MB measured. Of a
# process's RSS, the pages of the libraries' mapped files (torch's shared objects above all) are as many as the page
# cache holds of them, not a property of the run: 152 MB of CartPole's `quick` with subproc in a venv installed weeks
# before, 238 MB in one installed a minute before (AMD EPYC Zen 4, torch 2.13 CPU), more on a fresh machine. So the
# baseline is its private memory (RSS less mapped files: 255–258 MB in both venvs, the CartPole run's own terms
# ~11 MB) and the mapped files a row of their own, set near the fresh venv's figure.
HOST_BASELINE_MB = 247.0
HOST_LIBRARY_FILES_MB = 250.0
# Of that, the loaded numba kernels of the simulation are 49 MB (RSS after building and stepping the first env minus
# RSS after the imports); with subproc they live in the workers instead: the main process of `quick` with subproc
# peaked at 395 MB against 443 MB with native.
HOST_SIM_KERNELS_MB = 49.0
# Autograd's and the allocator's first-use memory in ``learn``: a 24k-parameter policy with 8×64 steps peaked
# 11 MB above its pre-learn RSS while buffer, Adam and activations add up to ~1 MB.
HOST_LEARN_FIXED_MB = 10.0
# Freed minibatch tensors that glibc keeps mapped, fragmentation: peak RSS over the counted dynamic terms was
# 1.12–1.55 × across fast/heavy/beast shapes (16×256 … 64×512 steps, batch 2048 … 8192); 1.25 centres them.
HOST_ALLOC_SLACK = 0.25
# Extra host RSS of a CUDA process (CUDA runtime, cuBLAS libraries mapped, pinned staging). Measured with
# ``memory_helper --measure --preset fast --device cuda`` on an H200 (torch 2.11+cu130, driver 580): peak RSS
# 1,784 MB, 1,330 MB above the CPU terms of the same run.
HOST_CUDA_RUNTIME_MB = 1330.0
# Native env: RSS growth per env of MissionVecEnv(4096) after a reset and a step = 2.7 KB (core arrays are
# 2.2 KB/env, the rest is views and the copies returned to SB3).
NATIVE_ENV_BYTES = 2.8e3
# DummyVecEnv of MissionEnv: RSS growth of 256 envs after a reset and a step = 85 KB per env.
DUMMY_ENV_BYTES = 85e3
# SubprocVecEnv(forkserver) workers, for a run with no measured profile of its task (mission_gym.vec.probe measures
# one). The forkserver imports SB3's worker module (and torch) before it forks, so a worker holds only what it adds:
# one running a MissionEnv 102 MB of its own (USS; its compiled simulation), one running another task 24-34 MB
# (CartPole-v1, Ant-v5, an ALE game); the forkserver, with the pages the workers share with it and count in no one's
# USS, 220 MB once (beside Ant-v5's workers; 2-core AMD EPYC Zen 4, torch 2.13).
SUBPROC_WORKER_MB = 102.0
SUBPROC_TASK_WORKER_MB = 35.0
SUBPROC_SERVER_MB = 220.0
# Of the workers' and forkserver's PSS, the pages of mapped files (the forkserver's imported libraries, which the
# workers share): 52 MB and 78 MB for CartPole's `quick` in the two venvs of HOST_LIBRARY_FILES_MB.
SUBPROC_FILES_MB = 65.0

# --- Activation constants -------------------------------------------------------------------------------------
# Peak memory of one forward + backward + Adam step of ``evaluate_actions`` over a minibatch, divided by
# batch × (sum of hidden widths of the policy and value nets) × 4 bytes, measured on CPU for batch 2048–16384 and
# networks 256,256 … 1024,512,512,256: tanh 2.02–2.32, relu 1.82. Autograd keeps each Linear's input and each
# activation's output, and backward holds up to two gradients of a layer at once. Autograd saves the same
# tensors on CUDA, so the factors are used there too (uncalibrated on GPU).
ACTIVATION_FACTOR: dict[str, float] = {"tanh": 2.3, "relu": 1.9, "leaky_relu": 1.9, "elu": 2.3, "gelu": 2.3, "silu": 2.3}
DEFAULT_ACTIVATION_FACTOR = 2.3

# --- GPU constants ---------------------------------------------------------------------------------------------
# What NVML shows for a process beyond its tensors: the CUDA context with lazy module loading plus cuBLAS handles and
# workspaces. Measured on an H200 (torch 2.11+cu130): one member of `fast` 834 MB by NVML at the end of its run
# (torch.cuda.max_memory_allocated 77 MB, most of it cuBLAS workspace), and 16 members of the cpu recipe side by side
# 13,896 MB with the launcher's process, about 830 MB each. 800 MB plus the counted terms gives those figures.
CUDA_CONTEXT_MB = 800.0
# PyTorch's caching allocator rounds blocks up (to 512 B below 1 MB, into 2 MB segments up to 10 MB, to 2 MB
# above) and keeps freed blocks reserved: reserved ≈ allocated × (1 + slack) + a few segments.
CUDA_ALLOC_SLACK = 0.2
CUDA_ALLOC_FIXED_MB = 20.0

# Headroom kept free when deciding whether a run fits: other processes, the desktop on a consumer GPU, fragmentation.
FIT_FRACTION = 0.85

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
    :param obs_bytes: bytes of one observation when its parts differ in type (a Dict's keys); None: ``obs_dim ×
        obs_itemsize``
    :param extractor_params: parameters of the policy's features extractor (a CNN, a Dict's extractors), counted on
        the extractor itself; 0 for a flatten
    :param features_dim: the width the extractor gives the MLPs; None: ``obs_dim`` (a flatten)
    :param features: values per sample that the extractor keeps for backward (a CNN's maps and its float copy of the
        pixels); 0 for a flatten
    :param env_bytes: memory of one in-process env as measured for the task (:mod:`mission_gym.vec.probe`); None:
        Mission Gym's
    :param worker_bytes: a worker process's own memory as measured for the task; None: Mission Gym's
    :param server_bytes: the forkserver's own memory as measured with those workers; None: Mission Gym's
    :param sim_kernels: the run loads Mission Gym's compiled simulation in this process (its game, in-process)
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
    obs_bytes: int | None = None
    extractor_params: int = 0
    features_dim: int | None = None
    features: int = 0
    env_bytes: float | None = None
    worker_bytes: float | None = None
    server_bytes: float | None = None
    sim_kernels: bool = True

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
    def step_obs_bytes(self) -> int:
        """Bytes of one observation as the rollout buffer keeps it."""
        return self.obs_bytes if self.obs_bytes is not None else self.obs_dim * self.obs_itemsize

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

    :param shape: the run's shape (a features extractor's parameters added, the MLPs fed its features)
    """

    def mlp(widths: Sequence[int]) -> tuple[int, int]:
        total, last = 0, shape.obs_dim if shape.features_dim is None else shape.features_dim
        for w in widths:
            total += last * w + w
            last = w
        return total, last

    pi, last_pi = mlp(shape.pi_widths)
    vf, last_vf = (0, last_pi) if shape.trunk else mlp(shape.vf_widths)
    action_head = last_pi * shape.action_outputs + shape.action_outputs
    log_std = shape.action_outputs if shape.action_kind == "box" else 0
    return shape.extractor_params + pi + vf + action_head + log_std + last_vf + 1


def rollout_buffer_bytes(shape: RunShape) -> int:
    """Bytes of SB3's ``RolloutBuffer`` arrays: observations, actions and six float32 per-step scalars.

    :param shape: the run's shape
    """
    per_step = shape.step_obs_bytes + shape.action_dim * _ACTION_ITEMSIZE[shape.action_kind] + 6 * 4
    return shape.rollout * per_step


def minibatch_bytes(shape: RunShape) -> int:
    """Bytes of one minibatch as ``RolloutBuffer._get_samples`` builds it: observations, actions cast to float32 and
    four float32 scalars per sample.

    :param shape: the run's shape
    """
    return shape.batch_size * (shape.step_obs_bytes + shape.action_dim * 4 + 4 * 4)


def activation_bytes(shape: RunShape) -> int:
    """Bytes autograd keeps for one minibatch's forward and backward: batch × (hidden widths of both nets + the
    action head) × 4 bytes × an activation-dependent factor (see ``ACTIVATION_FACTOR``).

    :param shape: the run's shape
    """
    widths = sum(shape.pi_widths) + sum(shape.vf_widths) + shape.action_outputs + 1
    factor = ACTIVATION_FACTOR.get(shape.activation.lower(), DEFAULT_ACTIVATION_FACTOR)
    return int(shape.batch_size * (widths * factor + shape.features) * 4)


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
        return sum(v for k, v in self.gpu.items() if k not in (GPU_CONTEXT, GPU_GRAPHS, GPU_SLACK))

    @property
    def worker_bytes(self) -> float:
        """The part of the host estimate that lives in env worker processes (not in the main process's RSS)."""
        return self.host.get(HOST_WORKERS, 0.0)

    def scaled(self, processes: int) -> MemoryEstimate:
        """The estimate of ``processes`` such runs side by side (a population's members), every term times that."""
        if processes == 1:
            return self
        gpu = None if self.gpu is None else {k: v * processes for k, v in self.gpu.items()}
        return MemoryEstimate(self.shape, self.params, {k: v * processes for k, v in self.host.items()}, gpu)

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
HOST_LIBRARIES = "libraries' mapped files (as the page cache holds them)"
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
GPU_GRAPHS = "CUDA graphs' pools + pinned buffers (batched learner)"
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
    copies = shape.rollout * shape.step_obs_bytes + minibatch_bytes(shape)
    activations = activation_bytes(shape)
    obs_batch = shape.n_envs * max(shape.obs_dim * 4, shape.step_obs_bytes)

    host: dict[str, float] = {HOST_BASELINE: HOST_BASELINE_MB * MB, HOST_LIBRARIES: HOST_LIBRARY_FILES_MB * MB}
    if shape.vec_env != "subproc" and shape.sim_kernels:
        host[HOST_SIM_KERNELS] = HOST_SIM_KERNELS_MB * MB
    if shape.on_cuda:
        host[HOST_CUDA] = HOST_CUDA_RUNTIME_MB * MB
    host[HOST_BUFFER] = buffer
    host[HOST_BUFFER_COPIES] = copies
    if shape.vec_env == "native":
        env = shape.n_envs * (NATIVE_ENV_BYTES if shape.env_bytes is None else shape.env_bytes)
    elif shape.vec_env == "dummy":
        env = shape.n_envs * (DUMMY_ENV_BYTES if shape.env_bytes is None else shape.env_bytes)
    else:
        env = 0.0
        # a task's measured worker shares the forkserver's imports (torch, SB3), which the forkserver holds once
        constant = SUBPROC_WORKER_MB if shape.sim_kernels else SUBPROC_TASK_WORKER_MB
        worker = constant * MB if shape.worker_bytes is None else shape.worker_bytes
        server = SUBPROC_SERVER_MB * MB if shape.server_bytes is None else shape.server_bytes
        host[HOST_WORKERS] = shape.n_envs * worker + server
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


#: one process holding a population's members as one batched learner on CUDA (:mod:`mission_gym.ppo.batched`) adds,
#: once, its captured CUDA graphs' memory pools, pinned transfer buffers and the batched products' cuBLAS workspace,
#: and per member its rollout on the device four times over (the storage, the update's copy, an epoch's shuffle and
#: its minibatch views):
#: fitted to ``bench --mode population --preset beast`` on an H200 (NVML 1,732 MB for 1 member, 2,532 MB for 32;
#: peak host RSS 1,725 MB and 1,810 MB; torch 2.11+cu130)
BATCH_GRAPHS_MB = 900.0
BATCH_ROLLOUT_COPIES = 4


def estimate_batched(shape: RunShape, members: int) -> MemoryEstimate:
    """Estimate a population of ``members`` members of ``shape`` trained as one batched learner in one process:
    the process, its libraries and (on CUDA) one context once; each member's env, buffers, model and activations."""
    one = estimate_memory(shape)
    once = (HOST_BASELINE, HOST_LIBRARIES, HOST_SIM_KERNELS, HOST_CUDA, HOST_SLACK, HOST_WORKERS)
    host = {k: v if k in once else v * members for k, v in one.host.items()}
    dynamic = sum(v for k, v in host.items() if k not in once)
    host[HOST_SLACK] = HOST_LEARN_FIXED_MB * MB + HOST_ALLOC_SLACK * dynamic
    gpu: dict[str, float] | None = None
    if one.gpu is not None:
        on_device = shape.rollout * (shape.obs_dim + shape.action_dim + 4) * 4 * BATCH_ROLLOUT_COPIES
        allocated = members * (one.gpu[GPU_MODEL] + one.gpu[GPU_BATCH] + one.gpu[GPU_ACTIVATIONS] + on_device)
        gpu = {
            GPU_CONTEXT: CUDA_CONTEXT_MB * MB,
            GPU_GRAPHS: BATCH_GRAPHS_MB * MB,
            GPU_MODEL: members * one.gpu[GPU_MODEL],
            GPU_BATCH: members * (one.gpu[GPU_BATCH] + on_device),
            GPU_ACTIVATIONS: members * one.gpu[GPU_ACTIVATIONS],
            GPU_SLACK: CUDA_ALLOC_SLACK * allocated + CUDA_ALLOC_FIXED_MB * MB,
        }
    return MemoryEstimate(shape=shape, params=one.params, host=host, gpu=gpu)


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
