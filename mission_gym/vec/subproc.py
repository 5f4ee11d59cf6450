"""The ``subproc`` training env: SB3's ``SubprocVecEnv`` whose worker processes start when the env is first used
(the first reset of training), not when it is built.

Checking a configuration builds its env and model (:func:`~mission_gym.training.build.build_run`), and a population
checks each recipe that way before any run directory exists: with one worker process per env, ``--preset cpu --env
Hopper-v5`` started 128 processes of ~170 MB just to be checked. Until it starts, the env answers what SB3 asks of
it while building wrappers and the model (spaces, ``render_mode``, which wrappers an env has) from one env built in
the main process. Its forkserver and workers end with the trainer, whatever ends it
(:mod:`mission_gym.vec.forkserver_guard`).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from stable_baselines3.common.vec_env import SubprocVecEnv, VecEnv
from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices, VecEnvObs

from mission_gym.hardware import THREAD_ENV_VARS

#: imported by the forkserver when it starts, to end with this process (never here: importing it acts)
FORKSERVER_GUARD = "mission_gym.vec.forkserver_guard"
#: the variable that tells the forkserver this process's pid (``forkserver_guard.TRAINER_PID``)
TRAINER_PID = "MISSION_GYM_TRAINER_PID"
#: imported last by a forkserver: what it loaded left out of later garbage collections (never here: importing it acts)
FORKSERVER_FROZEN = "mission_gym.vec.forkserver_frozen"


@contextlib.contextmanager
def worker_thread_env() -> Iterator[None]:
    """Thread caps in the environment while workers start: the forkserver (started on first use) and the
    workers forked from it read them when numpy and torch load, before any of our code runs there. The
    forkserver also finds this process's pid there (:mod:`mission_gym.vec.forkserver_guard`)."""
    names = (*THREAD_ENV_VARS, TRAINER_PID)
    saved = {var: os.environ.get(var) for var in names}
    os.environ.update({var: "1" for var in THREAD_ENV_VARS})
    os.environ[TRAINER_PID] = str(os.getpid())
    try:
        yield
    finally:
        for var, value in saved.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value


class DeferredSubprocVecEnv(SubprocVecEnv):
    """A ``SubprocVecEnv`` (forkserver workers) that starts its workers at the first call that needs them.

    :param env_fns: one picklable env factory per worker
    :param observation_space: the envs' observation space (from an env built in this process)
    :param action_space: their action space
    :param render_mode: their ``render_mode``
    :param wrappers: the classes of the gymnasium wrappers around such an env, outermost first
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        observation_space: gym.Space,
        action_space: gym.Space,
        render_mode: str | None = None,
        wrappers: Sequence[type] = (),
    ) -> None:
        self._env_fns = list(env_fns)
        self._render_mode, self._wrappers = render_mode, tuple(wrappers)
        self.started = False
        self.waiting = False
        self.closed = False
        VecEnv.__init__(self, len(self._env_fns), observation_space, action_space)

    def start(self) -> None:
        """Start the worker processes (once); seeds and options set before carry over to them."""
        if self.started:
            return
        if self.closed:
            raise RuntimeError("the env is closed")
        seeds, options = self._seeds, self._options
        # a forkserver that starts now follows this process's death (one already running was started so too; the
        # kernel ties it to the thread that starts it: training's, which lives as long as the env)
        multiprocessing.get_context("forkserver").set_forkserver_preload(
            ["__main__", FORKSERVER_GUARD, "stable_baselines3.common.vec_env.subproc_vec_env", FORKSERVER_FROZEN]
        )
        with worker_thread_env():
            SubprocVecEnv.__init__(self, self._env_fns, start_method="forkserver")
        self._seeds, self._options = seeds, options
        self.started = True

    def reset(self) -> VecEnvObs:
        self.start()
        return super().reset()

    def step_async(self, actions: np.ndarray) -> None:
        self.start()
        super().step_async(actions)

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        if not self.started and attr_name == "render_mode":  # asked by every VecEnv wrapper's constructor
            return [self._render_mode for _ in self._get_indices(indices)]
        self.start()
        return super().get_attr(attr_name, indices)

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        self.start()
        super().set_attr(attr_name, value, indices)

    def env_method(
        self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs: Any
    ) -> list[Any]:
        self.start()
        return super().env_method(method_name, *method_args, indices=indices, **method_kwargs)

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        if not self.started:  # asked by VecMonitor's constructor
            wrapped = any(issubclass(w, wrapper_class) for w in self._wrappers)
            return [wrapped for _ in self._get_indices(indices)]
        return super().env_is_wrapped(wrapper_class, indices)

    def get_images(self) -> Sequence[np.ndarray | None]:
        self.start()
        return super().get_images()

    def close(self) -> None:
        if not self.started:
            self.closed = True
            return
        super().close()
