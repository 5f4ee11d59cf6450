"""``MujocoVecEnv``: Gymnasium's locomotion tasks (Hopper-v5, Walker2d-v5, HalfCheetah-v5, Ant-v5, Humanoid-v5)
stepped together in this process, their physics on the process's cores, their rewards, ends and observations computed
for all envs at once.

Through ``DummyVecEnv``, much of a step of one of these envs is Python around its physics: ``gym.make``'s wrappers,
the task's per-env code (the healthy check, the observation, the reward terms and their info dict) and a deep copy of
every info dict (docs/experiments.md, "MuJoCo presets", has the figures). Here each env's physics is stepped exactly
as Gymnasium steps it (the same ``mj_step`` and ``mj_rnePostConstraint`` calls on the env's own model and data, the
envs split over threads: MuJoCo lets go of Python's lock while it steps), and the rest is a few array operations over
all envs, with the same formulas in the same float types: env ``i`` gives to the bit the observations, rewards, ends
and terminal observations of ``DummyVecEnv([gym.make(env_id)] * n)`` seeded alike (``tests/test_mujoco_vec.py``).
Resets are the env's own (``reset_model`` and its random stream). The infos carry only what SB3 reads
(``TimeLimit.truncated``, ``terminal_observation``), not the tasks' reward terms.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from stable_baselines3.common.vec_env.base_vec_env import VecEnvStepReturn

from mission_gym.vec.gym_batch import GymBatchVecEnv, plain_reason


@dataclass(frozen=True)
class _Task:
    """What differs between the tasks: whether it ends when unhealthy (and how healthy is judged), whether the
    velocities in its observation are clipped to ±10, how many position entries its observation leaves out, whether
    it is Ant's (forward speed from the main body's position rather than the first joint's, and clipped contact forces
    in its cost and, as its argument says, in its observation), and whether it is Humanoid's (forward speed from the
    centre of mass, the control cost of the physics' float64 controls, a contact cost clipped as a whole, and the
    bodies' inertia and velocity, the actuator forces and the contact forces in its observation, as its arguments
    say)."""

    healthy: Callable[[Any, np.ndarray, np.ndarray], np.ndarray] | None
    clip_velocity: bool
    skipped: int = 1
    contact: bool = False
    humanoid: bool = False


def _hopper_healthy(env: Any, qpos: np.ndarray, qvel: np.ndarray) -> np.ndarray:
    """HopperEnv.is_healthy for every row: height, angle, and every other state entry inside its ranges."""
    min_state, max_state = env._healthy_state_range
    min_z, max_z = env._healthy_z_range
    min_angle, max_angle = env._healthy_angle_range
    state = np.concatenate((qpos[:, 2:], qvel), axis=1)
    z, angle = qpos[:, 1], qpos[:, 2]
    healthy_state = np.all((min_state < state) & (state < max_state), axis=1)
    return healthy_state & (min_z < z) & (z < max_z) & (min_angle < angle) & (angle < max_angle)


def _walker_healthy(env: Any, qpos: np.ndarray, qvel: np.ndarray) -> np.ndarray:
    """Walker2dEnv.is_healthy for every row: height and angle inside their ranges."""
    min_z, max_z = env._healthy_z_range
    min_angle, max_angle = env._healthy_angle_range
    z, angle = qpos[:, 1], qpos[:, 2]
    return (min_z < z) & (z < max_z) & (min_angle < angle) & (angle < max_angle)


def _ant_healthy(env: Any, qpos: np.ndarray, qvel: np.ndarray) -> np.ndarray:
    """AntEnv.is_healthy for every row: a finite state and the torso's height inside its range (ends included)."""
    min_z, max_z = env._healthy_z_range
    finite = np.isfinite(qpos).all(axis=1) & np.isfinite(qvel).all(axis=1)
    return finite & (min_z <= qpos[:, 2]) & (qpos[:, 2] <= max_z)


def _humanoid_healthy(env: Any, qpos: np.ndarray, qvel: np.ndarray) -> np.ndarray:
    """HumanoidEnv.is_healthy for every row: the torso's height strictly inside its range."""
    min_z, max_z = env._healthy_z_range
    return (min_z < qpos[:, 2]) & (qpos[:, 2] < max_z)


def _tasks() -> dict[type, _Task]:
    from gymnasium.envs.mujoco.ant_v5 import AntEnv
    from gymnasium.envs.mujoco.half_cheetah_v5 import HalfCheetahEnv
    from gymnasium.envs.mujoco.hopper_v5 import HopperEnv
    from gymnasium.envs.mujoco.humanoid_v5 import HumanoidEnv
    from gymnasium.envs.mujoco.walker2d_v5 import Walker2dEnv

    return {
        HopperEnv: _Task(_hopper_healthy, clip_velocity=True),
        Walker2dEnv: _Task(_walker_healthy, clip_velocity=True),
        HalfCheetahEnv: _Task(None, clip_velocity=False),
        AntEnv: _Task(_ant_healthy, clip_velocity=False, skipped=2, contact=True),
        HumanoidEnv: _Task(_humanoid_healthy, clip_velocity=False, skipped=2, humanoid=True),
    }


def unsupported_reason(env: gym.Env) -> str | None:
    """Why :class:`MujocoVecEnv` cannot step this (``gym.make``-built) env, or None when it can."""
    try:
        task = _tasks().get(type(env.unwrapped))
    except ImportError as exc:  # no mujoco
        return str(exc)
    if task is None:
        return f"{type(env.unwrapped).__name__} is not Gymnasium's v5 Hopper, Walker2d, HalfCheetah, Ant or Humanoid"
    return plain_reason(env)


class MujocoVecEnv(GymBatchVecEnv):
    """``n_envs`` copies of a Gymnasium locomotion task, stepped in this process with SB3's auto-reset semantics.

    :param env_id: ``Hopper-v5``, ``Walker2d-v5``, ``HalfCheetah-v5``, ``Ant-v5`` or ``Humanoid-v5``
    :param n_envs: number of envs
    :param env_kwargs: keyword arguments for ``gym.make`` (the tasks' weights and ranges are read from each env)
    :param threads: CPU threads the physics runs on, each stepping its share of the envs (the same numbers whatever
        the count)
    :raises ValueError: for an env this class does not step (see :func:`unsupported_reason`)
    """

    def __init__(self, env_id: str, n_envs: int, env_kwargs: dict[str, Any] | None = None, threads: int = 1) -> None:
        import mujoco

        self._mj_step, self._mj_rne = mujoco.mj_step, mujoco.mj_rnePostConstraint
        self._pool: ThreadPoolExecutor | None = None
        super().__init__(env_id, n_envs, env_kwargs, unsupported_reason)
        raw = self._raw[0]  # the MujocoEnv under the wrappers
        self._task = _tasks()[type(raw)]
        self._skip = self._task.skipped if raw._exclude_current_positions_from_observation else 0
        self._frame_skip = raw.frame_skip
        self._dt = raw.dt
        self._forward_weight = raw._forward_reward_weight
        self._ctrl_weight = raw._ctrl_cost_weight
        self._healthy_reward = getattr(raw, "_healthy_reward", 0.0)
        self._terminate = bool(getattr(raw, "_terminate_when_unhealthy", False))
        nq, nv = raw.model.nq, raw.model.nv
        self._qpos = np.zeros((n_envs, nq))
        self._qvel = np.zeros((n_envs, nv))
        self._x_before = np.zeros(n_envs)
        self._x_after = np.zeros(n_envs)
        if self._task.contact:
            self._body = raw.data.body(raw._main_body).id
            self._contact_weight = raw._contact_cost_weight
            self._contact_range = raw._contact_force_range
            self._contact_in_obs = bool(raw._include_cfrc_ext_in_observation)
            self._cfrc = np.zeros((n_envs, *raw.data.cfrc_ext.shape))
        if self._task.humanoid:
            from gymnasium.envs.mujoco.humanoid_v5 import mass_center

            self._mass_center = mass_center  # Gymnasium's own: the same sum in the same order
            self._contact_weight = raw._contact_cost_weight
            self._contact_cost_range = raw._contact_cost_range
            data = raw.data
            self._ctrl = np.zeros((n_envs, raw.model.nu))
            self._cfrc = np.zeros((n_envs, *data.cfrc_ext.shape))
            # the parts of its observation after the velocities, each as its argument says: (array, rows kept)
            wanted = [
                (raw._include_cinert_in_observation, "cinert", slice(1, None)),
                (raw._include_cvel_in_observation, "cvel", slice(1, None)),
                (raw._include_qfrc_actuator_in_observation, "qfrc_actuator", slice(6, None)),
            ]
            self._extra = [(name, rows, np.zeros((n_envs, getattr(data, name)[rows].size))) for on, name, rows in wanted if on]
            self._contact_in_obs = bool(raw._include_cfrc_ext_in_observation)
        groups = max(1, min(threads, n_envs))
        self._groups = [range(i, n_envs, groups) for i in range(groups)]
        self._pool = ThreadPoolExecutor(groups, thread_name_prefix="mujoco") if groups > 1 else None
        self._actions = np.zeros((n_envs, raw.model.nu), dtype=np.float32)

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = actions

    def _step_physics(self, envs: range) -> None:
        """Step these envs' physics as Gymnasium does and read back what the step's numbers are made of."""
        actions, qpos, qvel, skip = self._actions, self._qpos, self._qvel, self._frame_skip
        contact, humanoid = self._task.contact, self._task.humanoid
        for i in envs:
            env = self._raw[i]
            data = env.data
            # the forward speed of Ant is its main body's (xpos lags qpos by one substep, as Gymnasium reads it),
            # Humanoid's its centre of mass's
            if humanoid:
                self._x_before[i] = self._mass_center(env.model, data)[0]
            else:
                self._x_before[i] = data.xpos[self._body, 0] if contact else data.qpos[0]
            data.ctrl[:] = actions[i]
            self._mj_step(env.model, data, nstep=skip)
            self._mj_rne(env.model, data)
            qpos[i] = data.qpos
            qvel[i] = data.qvel
            if contact:
                self._x_after[i] = data.xpos[self._body, 0]
                self._cfrc[i] = data.cfrc_ext
            elif humanoid:
                self._x_after[i] = self._mass_center(env.model, data)[0]
                self._ctrl[i] = data.ctrl
                self._cfrc[i] = data.cfrc_ext
                for name, rows, out in self._extra:
                    out[i] = getattr(data, name)[rows].ravel()

    def step_wait(self) -> VecEnvStepReturn:
        actions, qpos, qvel = self._actions, self._qpos, self._qvel
        if self._pool is None:
            self._step_physics(self._groups[0])
        else:
            list(self._pool.map(self._step_physics, self._groups))  # list(): a thread's error is raised here
        if self._task.humanoid:
            return self._humanoid_step()
        x_after = self._x_after if self._task.contact else qpos[:, 0]
        x_velocity = (x_after - self._x_before) / self._dt
        # the reward in Gymnasium's float types: float64 terms, the control cost in the action's float32
        reward = self._forward_weight * x_velocity
        terminated = np.zeros(self.num_envs, dtype=bool)
        if self._task.healthy is not None:
            healthy = self._task.healthy(self._raw[0], qpos, qvel)
            reward = reward + healthy * self._healthy_reward
            if self._terminate:
                terminated = ~healthy
        ctrl_cost = self._ctrl_weight * np.sum(np.square(actions), axis=1)
        velocity = np.clip(qvel, -10, 10) if self._task.clip_velocity else qvel
        parts = [qpos[:, self._skip :], velocity]
        if self._task.contact:
            forces = np.clip(self._cfrc, *self._contact_range)
            contact_cost = self._contact_weight * np.sum(np.square(forces).reshape(self.num_envs, -1), axis=1)
            rewards = (reward - (ctrl_cost + contact_cost)).astype(np.float32)
            if self._contact_in_obs:
                parts.append(forces[:, 1:].reshape(self.num_envs, -1))  # the world body's row is left out
        else:
            rewards = (reward - ctrl_cost).astype(np.float32)
        return self._finish(np.concatenate(parts, axis=1), rewards, terminated)

    def _humanoid_step(self) -> VecEnvStepReturn:
        """HumanoidEnv.step's numbers for every env, in its float types and order: (forward + healthy) - (control +
        contact), the contact cost clipped as a whole."""
        n, qpos = self.num_envs, self._qpos
        healthy = _humanoid_healthy(self._raw[0], qpos, self._qvel)
        reward = self._forward_weight * ((self._x_after - self._x_before) / self._dt) + healthy * self._healthy_reward
        ctrl_cost = self._ctrl_weight * np.sum(np.square(self._ctrl), axis=1)
        contact_cost = self._contact_weight * np.sum(np.square(self._cfrc).reshape(n, -1), axis=1)
        contact_cost = np.clip(contact_cost, *self._contact_cost_range)
        rewards = (reward - (ctrl_cost + contact_cost)).astype(np.float32)
        terminated = ~healthy if self._terminate else np.zeros(n, dtype=bool)
        parts = [qpos[:, self._skip :], self._qvel, *(out for _, _, out in self._extra)]
        if self._contact_in_obs:
            parts.append(self._cfrc[:, 1:].reshape(n, -1))  # the world body's row is left out
        return self._finish(np.concatenate(parts, axis=1), rewards, terminated)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
        super().close()
