"""What a task costs to step, measured once on this machine and kept for the next run (as PufferLib's ``autotune``
measures an env before sizing its vector): :func:`task_profile`.

A probe builds the task's env in this process and steps it with random actions for a fraction of a second: the
time per step (resets included), the memory each env holds and what kind of observations and actions it has. Where
a step costs enough that worker processes could pay for themselves, it also starts one worker as training would
(SB3's ``SubprocVecEnv`` with forkserver and thread caps) and measures that worker's own memory, and it times
``cores`` envs stepped in this process against the same envs in that many workers. Profiles are kept in a JSON file
(``$MISSION_GYM_CACHE/tasks.json``, default ``~/.cache/mission_gym``), keyed by the task, its arguments, the versions
of Gymnasium and this package and the CPU model, so a run on the same machine starts without probing again.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from mission_gym.hardware import MB, available_cores
from mission_gym.vec.factory import EnvFactory, probe_env

#: a step cheaper than this (µs) never pays for a worker process: SB3's pipe round trip and its pickling cost about
#: as much per env and step (measured on 2-core Intel Xeon and AMD EPYC machines, docs/experiments.md "Sizing a run
#: from the task")
SUBPROC_MIN_STEP_US = 60.0
#: workers must step the envs at least this much faster than this process does for ``auto`` to use them: the rollout
#: also runs the policy between steps, where workers only wait
SUBPROC_MIN_GAIN = 1.3
#: seconds each timing of a probe steps for
PROBE_SECONDS = 0.4
#: bump when what a profile holds or how it is measured changes: older entries are measured again
PROFILE_VERSION = 2


@dataclass(frozen=True)
class TaskProfile:
    """A task as this machine found it.

    :param env_id: the Gymnasium id
    :param obs_kind: ``vector``, ``image`` (SB3's ``is_image_space``), ``dict`` or ``other``
    :param action_kind: ``discrete``, ``multidiscrete``, ``multibinary``, ``continuous`` or ``other``
    :param step_us: microseconds per env step in this process, random actions, resets included (None: its step
        raised ``error`` while probed)
    :param env_bytes: memory one more env holds in this process (None: not measured)
    :param obs_bytes: bytes of one observation as the env gives it
    :param worker_bytes: a worker process's own memory (USS) with the env built and stepped; None when not measured
    :param subproc_gain: env steps/s of ``cores`` envs in as many workers over the same envs in this process; None
        when not measured (a step too cheap to be worth a process, or one core)
    :param cores: the cores the gain was measured with
    :param server_bytes: the forkserver's own memory with the pages it shares with the workers (its imports), which
        the workers' USS leaves out: what a run of any number of workers adds once
    :param dict_image: a Dict observation with an image among its keys
    :param error: what the env raised while probed, or why its workers were not timed (the machine was busy); such
        a profile is not kept
    """

    env_id: str
    obs_kind: str
    action_kind: str
    step_us: float | None
    env_bytes: float | None
    obs_bytes: int
    worker_bytes: float | None = None
    subproc_gain: float | None = None
    cores: int = 1
    server_bytes: float | None = None
    dict_image: bool = False
    error: str | None = None

    @property
    def recipe_obs_kind(self) -> str:
        """The observations' kind as recipes serve them: a Dict holding an image is a pixel task."""
        return "image" if self.dict_image else self.obs_kind

    @property
    def worth_a_process(self) -> bool:
        """Whether the measured workers step this task fast enough to pay for themselves."""
        return self.subproc_gain is not None and self.subproc_gain >= SUBPROC_MIN_GAIN

    def describe(self) -> str:
        """One line for the user: what was measured."""
        kinds = f"{self.obs_kind} observations, {self.action_kind} actions"
        if self.step_us is None or self.env_bytes is None:
            return f"{kinds}; its step raised {self.error} while probed"
        gain = f", {self.cores} workers {self.subproc_gain:.2f}x this process" if self.subproc_gain is not None else ""
        worker = f", a worker {self.worker_bytes / MB:,.0f} MB" if self.worker_bytes is not None else ""
        return f"{kinds}, {self.step_us:,.0f} µs a step, {self.env_bytes / MB:,.1f} MB an env{worker}{gain}"


def obs_kind(space: gym.Space) -> str:
    """``vector``, ``image``, ``dict`` or ``other``: what decides a task's policy and recipe (:mod:`mission_gym.settings`)."""
    from stable_baselines3.common.preprocessing import is_image_space

    if isinstance(space, gym.spaces.Dict):
        return "dict"
    if isinstance(space, gym.spaces.Box):
        return "image" if is_image_space(space, check_channels=False) else "vector"
    if isinstance(space, gym.spaces.Discrete | gym.spaces.MultiDiscrete | gym.spaces.MultiBinary):
        return "vector"  # SB3 one-hot encodes them for an MLP
    return "other"


def action_kind(space: gym.Space) -> str:
    """What the action space is, as a recipe names it."""
    for kind, cls in (("discrete", gym.spaces.Discrete), ("multidiscrete", gym.spaces.MultiDiscrete),
                      ("multibinary", gym.spaces.MultiBinary), ("continuous", gym.spaces.Box)):  # fmt: skip
        if isinstance(space, cls):
            return kind
    return "other"


def cache_path() -> Path:
    """Where profiles are kept: ``$MISSION_GYM_CACHE/tasks.json`` (default ``~/.cache/mission_gym/tasks.json``)."""
    root = os.environ.get("MISSION_GYM_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "mission_gym")
    return Path(root) / "tasks.json"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def profile_key(env_id: str, env_kwargs: Mapping[str, Any], env_wrapper: Sequence[Any], cores: int) -> str:
    """The cache key of a task on this machine (None-safe JSON of what changes a profile)."""
    from mission_gym import __version__

    text = json.dumps(
        [PROFILE_VERSION, env_id, env_kwargs, list(env_wrapper), cores, gym.__version__, __version__, _cpu_model()],
        sort_keys=True,
        default=str,
    )
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def _read_cache() -> dict[str, Any]:
    try:
        data = json.loads(cache_path().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_cache(key: str, profile: TaskProfile) -> None:
    """Add a profile to the cache file (written whole to a temporary file and renamed; a failure to write is no
    failure of the run: the next one probes again)."""
    path = cache_path()
    data = _read_cache()
    data[key] = asdict(profile)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        os.replace(tmp, path)
    except OSError:
        pass


def known_profile(
    env_id: str, env_kwargs: Mapping[str, Any] | None = None, env_wrapper: Sequence[Any] = (), cores: int | None = None
) -> TaskProfile | None:
    """The task's profile if this process probed it or the cache keeps it; None otherwise (nothing is measured: a
    run whose envs the user chose steps none of them before training does)."""
    cores = available_cores() if cores is None else cores
    key = profile_key(env_id, dict(env_kwargs or {}), env_wrapper, cores)
    if key in _PROBED:
        return _PROBED[key]
    kept = _read_cache().get(key)
    try:
        return TaskProfile(**kept) if isinstance(kept, dict) else None
    except TypeError:
        return None


def task_profile(
    env_id: str,
    env_kwargs: Mapping[str, Any] | None = None,
    env_wrapper: Sequence[Any] = (),
    cores: int | None = None,
    refresh: bool = False,
    workers: bool = False,
) -> TaskProfile:
    """The task's profile on this machine: from the cache, else probed now (a second or two) and kept.

    :param env_id: a registered Gymnasium id (``module:Id`` imports the module)
    :param env_kwargs: keyword arguments for ``gym.make``
    :param env_wrapper: the recipe's wrappers (:mod:`mission_gym.vec.wrappers`)
    :param cores: the cores a run may use (default: this process's)
    :param refresh: probe again even when a profile is kept
    :param workers: measure a worker process's memory even for a step too cheap to be worth one (a run that asks for
        ``subproc`` itself)
    :raises ConfigError: for an id, arguments or wrappers the env refuses
    """
    cores = available_cores() if cores is None else cores
    kwargs = dict(env_kwargs or {})
    key = profile_key(env_id, kwargs, env_wrapper, cores)
    if not refresh and key in _PROBED and (not workers or _PROBED[key].worker_bytes is not None):
        return _PROBED[key]  # this process probed it already (a profile not kept in the file included)
    if not refresh:
        kept = _read_cache().get(key)
        if isinstance(kept, dict):
            try:
                profile = TaskProfile(**kept)
            except TypeError:
                pass  # written by another version: probe again
            else:
                if not workers or profile.worker_bytes is not None:
                    return profile
    profile = probe_task(env_id, kwargs, tuple(env_wrapper), cores, workers)
    _PROBED[key] = profile
    if profile.error is None:  # neither the env's own error nor timings on a busy machine are kept
        _write_cache(key, profile)
    return profile


#: this process's probes, kept or not
_PROBED: dict[str, TaskProfile] = {}


def _rss() -> float:
    import psutil

    return float(psutil.Process().memory_info().rss)


def _step_us(envs: list[gym.Env], seconds: float) -> float:
    """Microseconds per env step of ``envs`` stepped in turn with random actions (resets included)."""
    for i, env in enumerate(envs):
        env.reset(seed=i)
        env.action_space.seed(i)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds or steps < 64:
        for env in envs:
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                env.reset()
        steps += len(envs)
    return (time.perf_counter() - start) / steps * 1e6


def probe_task(
    env_id: str, env_kwargs: dict[str, Any], env_wrapper: tuple[Any, ...], cores: int, workers: bool = False
) -> TaskProfile:
    """Measure a task now (see the module doc); nothing is kept.

    :raises ConfigError: for an id, arguments or wrappers the env refuses
    """
    probe = probe_env(env_id, env_kwargs, env_wrapper)
    space = probe.observation_space
    obs_bytes = sum(int(np.prod(s.shape or (1,))) * np.dtype(s.dtype).itemsize for s in _leaves(space))
    dict_image = isinstance(space, gym.spaces.Dict) and any(obs_kind(sub) == "image" for sub in space.spaces.values())
    kinds = (env_id, obs_kind(space), action_kind(probe.action_space))
    make = EnvFactory(env_id, env_kwargs, env_wrapper=env_wrapper)
    busy = _others_busy(cores)
    first = make()
    try:
        step_us = _step_us([first], PROBE_SECONDS)
        before = _rss()
        more = [make() for _ in range(3)]
        _step_us(more, 0.02)
        env_bytes = max(0.0, (_rss() - before) / len(more))
        for env in more:
            env.close()
    except Exception as exc:  # the task's own error: training meets it where it is reported (a worker's traceback)
        return TaskProfile(
            *kinds, None, None, obs_bytes, cores=cores, dict_image=dict_image, error=f"{type(exc).__name__}: {exc}"
        )
    finally:
        first.close()
    profile = TaskProfile(*kinds, step_us, env_bytes, obs_bytes, cores=cores, dict_image=dict_image)
    if workers or cores > 1 and step_us >= SUBPROC_MIN_STEP_US:
        busy = busy or _others_busy(cores)
        try:
            worker, server, gain = _measure_workers(env_id, env_kwargs, env_wrapper, cores)
        except (EOFError, OSError, RuntimeError):  # a worker could not build the env (an id only this process knows)
            return profile
        profile = TaskProfile(**{**asdict(profile), "worker_bytes": worker, "server_bytes": server, "subproc_gain": gain})
        if busy and gain is not None:  # workers timed on cores others were using: not this machine's figure
            profile = TaskProfile(**{**asdict(profile), "subproc_gain": None})
    if busy:  # timed while other work ran: used for this run, measured again by the next
        profile = TaskProfile(**{**asdict(profile), "error": f"other work kept {busy}"})
    return profile


def _others_busy(cores: int) -> str | None:
    """What other work keeps this machine's cores busy (a line), or None when they are free for timing workers:
    this process sleeps while the machine's load is sampled, so what it sees is others'."""
    import psutil

    used = psutil.cpu_percent(interval=0.25) / 100 * (psutil.cpu_count() or cores)
    return f"{used:.1f} of {psutil.cpu_count()} cores busy" if used > 0.5 else None


def _leaves(space: gym.Space) -> list[gym.Space]:
    if isinstance(space, gym.spaces.Dict):
        return [leaf for sub in space.spaces.values() for leaf in _leaves(sub)]
    return [space] if getattr(space, "dtype", None) is not None else []


def _measure_workers(
    env_id: str, env_kwargs: dict[str, Any], env_wrapper: tuple[Any, ...], cores: int
) -> tuple[float, float | None, float | None]:
    """A worker's own memory (USS), the forkserver's, and for several cores the steps/s of ``cores`` workers over
    the same envs in this process."""
    from multiprocessing import forkserver

    import psutil
    from stable_baselines3.common.vec_env import DummyVecEnv

    from mission_gym.vec.factory import make_vec_env

    venv = make_vec_env(env_id, cores, "subproc", seed=0, env_kwargs=env_kwargs, env_wrapper=env_wrapper)
    try:
        subproc = _vec_steps_per_s(venv, PROBE_SECONDS)
        base = venv.unwrapped if hasattr(venv, "unwrapped") else venv
        pids = [p.pid for p in getattr(base, "processes", [])]
        server_pid = getattr(forkserver._forkserver, "_forkserver_pid", None)
        workers = [psutil.Process(pid).memory_full_info() for pid in pids if psutil.pid_exists(pid)]
        group = [*workers, *([psutil.Process(server_pid).memory_full_info()] if server_pid else [])]
        # USS is what each holds alone; the pages they share (the forkserver's imports) count in no one's USS: the
        # forkserver is counted with them (the group's PSS beyond its USS), once however many workers share them
        shared = sum(m.pss - m.uss for m in group)
        server = float(group[-1].uss + shared) if server_pid else None
        uss = [m.uss for m in workers]
    finally:
        venv.close()
    worker = float(np.mean(uss)) if uss else 0.0
    if cores <= 1:
        return worker, server, None
    dummy = DummyVecEnv([EnvFactory(env_id, env_kwargs, env_wrapper=env_wrapper) for _ in range(cores)])
    try:
        in_process = _vec_steps_per_s(dummy, PROBE_SECONDS)
    finally:
        dummy.close()
    return worker, server, subproc / in_process


def _vec_steps_per_s(venv: Any, seconds: float) -> float:
    venv.seed(0)
    venv.reset()
    space = venv.action_space
    space.seed(0)
    actions = [np.stack([space.sample() for _ in range(venv.num_envs)]) for _ in range(16)]
    for k in range(3):  # workers started, first allocations made
        venv.step(actions[k])
    rounds, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds or rounds < 16:
        venv.step(actions[rounds % len(actions)])
        rounds += 1
    return rounds * venv.num_envs / (time.perf_counter() - start)
