"""A run's configuration as the memory estimator's shape, and what fits a machine.

:func:`shape_from_config` turns a :class:`~mission_gym.settings.schema.TrainConfig` into a
:class:`~mission_gym.settings.memory.RunShape` (reading the spaces of envs other than Mission Gym by making one);
:func:`check_memory` refuses a run that cannot fit the memory available before anything is allocated;
:func:`cores_needed` and :func:`members_at_once` say how many cores a preset wants and how many of a population's
members run at once (which preset fits a machine is :mod:`mission_gym.plan.fit`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from mission_gym import ENV_ID
from mission_gym.config.yaml_io import ConfigError
from mission_gym.hardware import GB, MB, list_gpus
from mission_gym.settings.memory import MemoryEstimate, RunShape, estimate_batched, estimate_memory
from mission_gym.settings.resolve import Resolved, batch_size, policy_name, vec_env_kind
from mission_gym.settings.schema import TrainConfig

# A single run (no population) gets a core per ENVS_PER_CORE envs: each env step also runs policy inference and
# SB3's Python loop, and with fewer cores a long rollout leaves the GPU idle.
ENVS_PER_CORE = 8
# A preset wants a core for every MEMBERS_PER_CORE population members: as processes (on CPU cores) one member trains
# per core at a time (``num_threads`` cores each; the launcher's pool), the rest waiting their turn; in one batched
# learner (on CUDA) every member trains at once and the members' games step on those cores.
MEMBERS_PER_CORE = 2


def cores_needed(config: TrainConfig) -> int:
    """The cores a preset wants: one for every ``MEMBERS_PER_CORE`` population members (times ``num_threads``), or
    for a single run one per ``ENVS_PER_CORE`` envs."""
    if config.population.size > 1:
        return -(-config.population.size // MEMBERS_PER_CORE) * (config.num_threads or 1)
    return max(1, -(-config.n_envs // ENVS_PER_CORE))


def members_at_once(config: TrainConfig, cores: int | None = None) -> int:
    """How many of a population's members train at once as processes on ``cores`` cores (None: the cores the preset
    wants): one per ``num_threads`` cores, as the launcher's pool runs them; 1 for a single run."""
    if config.population.size <= 1:
        return 1
    cores = cores_needed(config) if cores is None else cores
    return max(1, min(config.population.size, cores // (config.num_threads or 1)))


def population_learner(config: TrainConfig, device: str, backend: str = "local") -> str:
    """``processes`` or ``batched`` for a population (``population.learner``): ``auto`` is batched where its members
    train on CUDA (a member alone is launch-bound there, and processes each hold a CUDA context) and processes on CPU
    cores, where separate processes train faster (on 2 cores of an Intel Xeon, family 6 model 167, 8 members of
    ``cpu``: 35,298 steps/s in all as processes, 19,981 batched; ``bench --mode population``); Ray runs processes."""
    if backend != "local":
        return "processes"
    if config.population.learner == "auto":
        return "batched" if device.startswith("cuda") else "processes"
    return config.population.learner


def population_estimate(config: TrainConfig, device: str, cores: int | None = None) -> MemoryEstimate:
    """The memory a population (or a single run) of ``config`` needs at once on ``device``: its members at once as
    processes (:func:`members_at_once`), or all of them in one batched learner."""
    shape = shape_from_config(config, device=device, cores=cores)
    if config.population.size > 1 and population_learner(config, device) == "batched":
        return estimate_batched(shape, config.population.size)
    return estimate_memory(shape).scaled(members_at_once(config, cores))


def spaces_fields(observation_space: Any, action_space: Any) -> dict[str, Any]:
    """``RunShape`` fields that describe a Gymnasium observation and action space.

    :param observation_space: a ``Box``, a ``Dict`` (its keys' bytes added up) or another space (counted by its
        flattened size)
    :param action_space: ``MultiDiscrete``, ``Discrete``, ``Box`` or ``MultiBinary``
    """
    from gymnasium import spaces

    obs_dim = int(spaces.flatdim(observation_space))
    dtype = getattr(observation_space, "dtype", None)
    obs_itemsize = int(dtype.itemsize) if dtype is not None else 4
    obs_bytes = None
    if isinstance(observation_space, spaces.Dict):
        obs_bytes = sum(int(spaces.flatdim(sub)) * int(getattr(sub, "dtype", np.dtype("float32")).itemsize)
                        for sub in observation_space.spaces.values())  # fmt: skip
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
    return {"obs_dim": obs_dim, "obs_itemsize": obs_itemsize, "obs_bytes": obs_bytes, "action_kind": kind,
            "action_sizes": sizes}  # fmt: skip


_SPACES: dict[str, tuple[Any, Any]] = {}


def task_spaces(config: TrainConfig) -> tuple[Any, Any]:
    """The observation and action spaces a configuration's policy sees (its wrappers and frame stack included): one
    env made in this process, then kept for the process."""
    from mission_gym.vec.factory import probe_spaces

    key = repr((config.env, config.env_kwargs, config.env_wrapper, config.frame_stack))
    if key not in _SPACES:
        _SPACES[key] = probe_spaces(config.env, dict(config.env_kwargs), config.env_wrapper, config.frame_stack)
    return _SPACES[key]


def env_spaces(env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``RunShape`` space fields of a Gymnasium id (one env made in this process, then kept).

    :param env_id: a registered id (``module:Id`` imports the module first)
    :param env_kwargs: arguments for ``gym.make``
    :raises ConfigError: for an unknown id or arguments the env rejects
    """
    return spaces_fields(*task_spaces(TrainConfig(env=env_id, env_kwargs=dict(env_kwargs or {}))))


_COUNTS: dict[str, dict[str, int]] = {}


def extractor_counts(config: TrainConfig, observation_space: Any, policy: str) -> dict[str, int]:
    """``RunShape`` fields of the features extractor SB3's policy ``policy`` (``cnn``, ``multi_input``) puts before
    its MLPs for this observation space, counted on the extractor itself: built on PyTorch's ``meta`` device (no
    memory), one sample passed through it and each layer's output counted (what autograd keeps for backward)."""
    key = repr((policy, observation_space, config.hyperparams.get("policy_kwargs")))
    if key in _COUNTS:
        return _COUNTS[key]
    import torch
    from gymnasium import spaces
    from stable_baselines3.common.preprocessing import preprocess_obs
    from stable_baselines3.common.torch_layers import CombinedExtractor, NatureCNN

    from mission_gym.vec.factory import policy_space

    space = policy_space(observation_space)
    kwargs = dict((config.hyperparams.get("policy_kwargs") or {}).get("features_extractor_kwargs") or {})
    with torch.device("meta"):
        extractor = CombinedExtractor(space, **kwargs) if isinstance(space, spaces.Dict) else NatureCNN(space, **kwargs)
        kept = [0]
        leaves = [m for m in extractor.modules() if not list(m.children())]
        hooks = [m.register_forward_hook(lambda _m, _i, out: kept.__setitem__(0, kept[0] + out.numel())) for m in leaves]
        sample: Any
        if isinstance(space, spaces.Dict):
            sample = {k: torch.zeros((1, *(sub.shape or ()))) for k, sub in space.spaces.items()}
        else:
            sample = torch.zeros((1, *(space.shape or ())))
        extractor(preprocess_obs(sample, space))
        for hook in hooks:
            hook.remove()
    params = sum(p.numel() for p in extractor.parameters())
    _COUNTS[key] = {"extractor_params": int(params), "features_dim": int(extractor.features_dim), "features": int(kept[0])}
    return _COUNTS[key]


def shape_from_config(
    config: TrainConfig, *, device: str | None = None, cores: int | None = None, measure: bool = False
) -> RunShape:
    """The memory estimator's shape of a training configuration.

    :param config: the configuration (``batch_size: auto``, ``vec_env: auto`` and ``policy: auto`` are resolved by
        the trainer's rules, :mod:`mission_gym.settings.resolve`)
    :param device: overrides the configuration's device; ``auto`` left unresolved counts as ``cpu`` (so does ``mps``)
    :param cores: CPU cores, for resolving ``vec_env: auto`` (detected when None)
    :param measure: probe the task's env and workers when no profile of it is kept (:mod:`mission_gym.vec.probe`;
        the sizing tools do); otherwise a kept profile's figures, else the estimator's constants. A trainer whose
        envs the user chose steps none of them before training does (an env that hangs or fails after some steps
        meets its worker's handling there)
    """
    # a resolved configuration (a run's) keeps what resolve() fixed; a preset's autos get the same rules here
    batch = batch_size(config) if config.batch_size == "auto" else config.batch_size
    vec_env = vec_env_kind(config, cores) if config.vec_env == "auto" else config.vec_env
    dev = device or config.device
    task: dict[str, Any] = {"sim_kernels": config.env == ENV_ID}
    if config.env != ENV_ID or config.env_kwargs:
        observation_space, action_space = task_spaces(config)
        task.update(spaces_fields(observation_space, action_space))
        policy = policy_name(config)
        if policy in ("cnn", "multi_input"):
            task.update(extractor_counts(config, observation_space, policy))
    # another task's in-process envs (its own batched env's too) and workers as the probe measured them; the game's
    # in-process envs are the constants measured on it, its workers measured like any task's
    if (config.env != ENV_ID and vec_env in ("dummy", "subproc", "native")) or vec_env == "subproc":
        from mission_gym.vec.probe import known_profile, task_profile

        profile = known_profile(config.env, config.env_kwargs, config.env_wrapper, cores)
        if measure and (profile is None or (vec_env == "subproc" and profile.worker_bytes is None)):
            profile = task_profile(config.env, config.env_kwargs, config.env_wrapper, cores, workers=vec_env == "subproc")
        if profile is not None:
            task.update(env_bytes=profile.env_bytes)
            if vec_env == "subproc" and profile.worker_bytes:
                task.update(worker_bytes=profile.worker_bytes, server_bytes=profile.server_bytes)
    return RunShape(
        n_envs=config.n_envs,
        n_steps=config.n_steps,
        batch_size=int(batch),
        net_arch=tuple(config.network_arch),
        trunk=config.policy == "trunk",
        activation=config.activation,
        vec_env=vec_env,
        device="cpu" if dev in ("auto", "mps") else dev,  # MPS: unified memory, counted as host RAM
        normalize=config.normalize,
        n_epochs=config.n_epochs,
        **task,
    )


def memory_available(device: str) -> tuple[float, float | None]:
    """What a run starting in this process may use, in bytes: host RAM (what is free now plus this process's own,
    which the estimate counts) and, on a CUDA device, that device's free memory (None on a CPU)."""
    import psutil

    host = float(psutil.virtual_memory().available + psutil.Process().memory_info().rss)
    if not device.startswith("cuda"):
        return host, None
    index = int(device.split(":", 1)[1]) if ":" in device else 0
    gpu = next((g for g in list_gpus() if g.index == index), None)
    if gpu is not None:  # NVML: asking torch would give this process a CUDA context (hundreds of MB) it may not need
        return host, gpu.free_mb * MB
    import torch

    return host, float(torch.cuda.mem_get_info(torch.device(device))[0])


def _size(n_bytes: float) -> str:
    return f"{n_bytes / GB:,.1f} GiB" if n_bytes >= GB else f"{n_bytes / MB:,.0f} MB"


def memory_refusal(shape: RunShape, host_bytes: float, gpu_bytes: float | None = None) -> str | None:
    """Why a run of ``shape`` cannot fit the memory available (one line: the estimate, what is available and the
    largest ``n_envs`` that fits), or None when it fits.

    :param shape: the run (its device decides whether GPU memory counts)
    :param host_bytes: host RAM available to it
    :param gpu_bytes: GPU memory free on its device (None: not checked)
    """

    def over(est: MemoryEstimate) -> list[str]:
        out = []
        if est.host_bytes > host_bytes:
            out.append(f"~{_size(est.host_bytes)} of host RAM where {_size(host_bytes)} is available")
        if gpu_bytes is not None and est.gpu_bytes > gpu_bytes:
            out.append(f"~{_size(est.gpu_bytes)} on {shape.device} where {_size(gpu_bytes)} is free")
        return out

    problems = over(estimate_memory(shape))
    if not problems:
        return None
    low, high = 0, shape.n_envs - 1  # the largest n_envs below this one that fits (0: none); the estimate grows with it
    while low < high:
        mid = (low + high + 1) // 2
        if over(estimate_memory(replace(shape, n_envs=mid))):
            high = mid - 1
        else:
            low = mid
    advice = (
        f"the largest n_envs that fits is {low:,}"
        if low
        else "not even n_envs 1 fits (a smaller --n-steps, --batch-size or --network-arch may)"
    )
    return (
        f"n_envs {shape.n_envs:,} (n_steps {shape.n_steps:,}, {shape.device}) does not fit this machine: the memory "
        f"estimate is {' and '.join(problems)}; {advice} (--no-memory-check starts it anyway)"
    )


def check_memory(run: Resolved) -> None:
    """Refuse a run that cannot fit the memory available now, before anything of it is allocated.

    :param run: the resolved configuration and the device it would train on
    :raises ConfigError: naming the estimate, what is available and the largest ``n_envs`` that fits
    """
    device = run.device
    try:
        shape = shape_from_config(run.config, device=device)
    except ConfigError:
        raise
    except ValueError:  # spaces the estimator cannot size: nothing to compare, the trainer reports what is wrong
        return
    why = memory_refusal(shape, *memory_available(device))
    if why:
        raise ConfigError(why)
