"""``ClassicVecEnv``: Gymnasium's CartPole-v1 and Acrobot-v1 stepped together in this process, their dynamics one
compiled kernel over all envs.

Through ``DummyVecEnv`` a step of these tasks is almost all Python: an Acrobot step is a Runge-Kutta integration
written in NumPy scalars (57 µs a step of one env on an AMD EPYC Zen 4 core, where this kernel steps 16 envs in 12 µs),
and ``gym.make``'s wrappers and ``DummyVecEnv``'s copies of every info dict cost as much again for CartPole. The
kernels compute each env's step with Gymnasium's formulas in its order and float types (``x ** 2`` of a NumPy scalar
is the C library's ``pow``, taken here as such), so env ``i`` gives to the bit the observations, rewards, ends and
terminal observations of ``DummyVecEnv([gym.make(env_id)] * n)`` seeded alike (``tests/test_classic_vec.py``).
Resets are the env's own (its ``reset`` and random stream), their state read back from it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from numba import njit
from stable_baselines3.common.vec_env.base_vec_env import VecEnvStepReturn

from mission_gym.vec.gym_batch import GymBatchVecEnv, plain_reason

#: the Gymnasium ids :class:`ClassicVecEnv` steps
CLASSIC_IDS = ("CartPole-v1", "Acrobot-v1")


@njit(cache=True)
def _cartpole_step(state: np.ndarray, actions: np.ndarray, p: np.ndarray, euler: bool, obs: np.ndarray,
                   terminated: np.ndarray) -> None:  # fmt: skip
    """``CartPoleEnv.step`` for every row of ``state`` (x, x_dot, theta, theta_dot; float64, updated in place).
    ``p``: gravity, masspole, total_mass, length, polemass_length, force_mag, tau, x_threshold, theta_threshold."""
    gravity, masspole, total_mass, length, polemass_length = p[0], p[1], p[2], p[3], p[4]
    force_mag, tau, x_threshold, theta_threshold = p[5], p[6], p[7], p[8]
    for i in range(state.shape[0]):
        x, x_dot, theta, theta_dot = state[i, 0], state[i, 1], state[i, 2], state[i, 3]
        force = force_mag if actions[i] == 1 else -force_mag
        costheta = math.cos(theta)
        sintheta = math.sin(theta)
        temp = (force + polemass_length * (theta_dot * theta_dot) * sintheta) / total_mass
        thetaacc = (gravity * sintheta - costheta * temp) / (
            length * (4.0 / 3.0 - masspole * (costheta * costheta) / total_mass)
        )
        xacc = temp - polemass_length * thetaacc * costheta / total_mass
        if euler:
            x = x + tau * x_dot
            x_dot = x_dot + tau * xacc
            theta = theta + tau * theta_dot
            theta_dot = theta_dot + tau * thetaacc
        else:
            x_dot = x_dot + tau * xacc
            x = x + tau * x_dot
            theta_dot = theta_dot + tau * thetaacc
            theta = theta + tau * theta_dot
        state[i, 0], state[i, 1], state[i, 2], state[i, 3] = x, x_dot, theta, theta_dot
        for j in range(4):
            obs[i, j] = state[i, j]
        terminated[i] = x < -x_threshold or x > x_threshold or theta < -theta_threshold or theta > theta_threshold


@njit(cache=True)
def _acrobot_dsdt(s0: float, s1: float, s2: float, s3: float, a: float, p: np.ndarray, two: float) -> tuple:
    """``AcrobotEnv._dsdt`` (the book's dynamics). ``p``: the masses, lengths, centres of mass and inertias as the
    env has them, g and pi. ``two`` is 2.0 passed at run time, so that ``x ** two`` stays the library's ``pow``."""
    m1, m2, l1, lc1, lc2, i1, i2, g, pi = p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8]
    d1 = m1 * lc1**two + m2 * (l1**two + lc2**two + 2 * l1 * lc2 * math.cos(s1)) + i1 + i2
    d2 = m2 * (lc2**two + l1 * lc2 * math.cos(s1)) + i2
    phi2 = m2 * lc2 * g * math.cos(s0 + s1 - pi / 2.0)
    phi1 = (
        -m2 * l1 * lc2 * s3**two * math.sin(s1)
        - 2 * m2 * l1 * lc2 * s3 * s2 * math.sin(s1)
        + (m1 * lc1 + m2 * l1) * g * math.cos(s0 - pi / 2)
        + phi2
    )
    ddtheta2 = (a + d2 / d1 * phi1 - m2 * l1 * lc2 * s2**two * math.sin(s1) - phi2) / (m2 * lc2**two + i2 - d2**two / d1)
    ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
    return s2, s3, ddtheta1, ddtheta2


@njit(cache=True)
def _acrobot_step(state: np.ndarray, torques: np.ndarray, p: np.ndarray, dt: float, max_vel: np.ndarray,
                  two: float, obs: np.ndarray, terminated: np.ndarray) -> None:  # fmt: skip
    """``AcrobotEnv.step`` for every row of ``state`` (theta1, theta2, dtheta1, dtheta2; float64, updated in place):
    one step of Gymnasium's ``rk4`` over ``[0, dt]``, the angles wrapped, the speeds bounded."""
    half = dt / 2.0
    pi = p[8]
    y = np.empty(4)
    for i in range(state.shape[0]):
        a = torques[i]
        s0, s1, s2, s3 = state[i, 0], state[i, 1], state[i, 2], state[i, 3]
        k1 = _acrobot_dsdt(s0, s1, s2, s3, a, p, two)
        k2 = _acrobot_dsdt(s0 + half * k1[0], s1 + half * k1[1], s2 + half * k1[2], s3 + half * k1[3], a, p, two)
        k3 = _acrobot_dsdt(s0 + half * k2[0], s1 + half * k2[1], s2 + half * k2[2], s3 + half * k2[3], a, p, two)
        k4 = _acrobot_dsdt(s0 + dt * k3[0], s1 + dt * k3[1], s2 + dt * k3[2], s3 + dt * k3[3], a, p, two)
        y[0] = s0 + dt / 6.0 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0])
        y[1] = s1 + dt / 6.0 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1])
        y[2] = s2 + dt / 6.0 * (k1[2] + 2 * k2[2] + 2 * k3[2] + k4[2])
        y[3] = s3 + dt / 6.0 * (k1[3] + 2 * k2[3] + 2 * k3[3] + k4[3])
        diff = pi - -pi
        for j in range(2):  # Gymnasium's wrap(): whole turns taken off or added one at a time
            while y[j] > pi:
                y[j] = y[j] - diff
            while y[j] < -pi:
                y[j] = y[j] + diff
        for j in range(2):  # bound(): min(max(x, -limit), limit)
            v = y[2 + j]
            if -max_vel[j] > v:
                v = -max_vel[j]
            if max_vel[j] < v:
                v = max_vel[j]
            y[2 + j] = v
        for j in range(4):
            state[i, j] = y[j]
        obs[i, 0], obs[i, 1] = math.cos(y[0]), math.sin(y[0])
        obs[i, 2], obs[i, 3] = math.cos(y[1]), math.sin(y[1])
        obs[i, 4], obs[i, 5] = y[2], y[3]
        terminated[i] = -math.cos(y[0]) - math.cos(y[1] + y[0]) > 1.0


@dataclass(frozen=True)
class _Task:
    """One task's reasons not to batch an env (None: it can), and how its state is read."""

    name: str
    reason: Any


def _cartpole_reason(env: Any) -> str | None:
    return None if env.kinematics_integrator in ("euler", "semi-implicit-euler") else "its integrator is not euler"


def _acrobot_reason(env: Any) -> str | None:
    if env.book_or_nips != "book":
        return "it has the NeurIPS paper's dynamics (book_or_nips)"
    if env.torque_noise_max > 0:
        return "its torque is noisy (torque_noise_max)"
    return None


def _tasks() -> dict[type, _Task]:
    from gymnasium.envs.classic_control.acrobot import AcrobotEnv
    from gymnasium.envs.classic_control.cartpole import CartPoleEnv

    return {CartPoleEnv: _Task("cartpole", _cartpole_reason), AcrobotEnv: _Task("acrobot", _acrobot_reason)}


def unsupported_reason(env: gym.Env) -> str | None:
    """Why :class:`ClassicVecEnv` cannot step this (``gym.make``-built) env, or None when it can."""
    task = _tasks().get(type(env.unwrapped))
    if task is None:
        return f"{type(env.unwrapped).__name__} is not Gymnasium's CartPole or Acrobot"
    return plain_reason(env) or task.reason(env.unwrapped)


class ClassicVecEnv(GymBatchVecEnv):
    """``n_envs`` copies of CartPole-v1 or Acrobot-v1, stepped in this process with SB3's auto-reset semantics.

    :param env_id: ``CartPole-v1`` or ``Acrobot-v1`` (or an id registered with their classes)
    :param n_envs: number of envs
    :param env_kwargs: keyword arguments for ``gym.make`` (CartPole's ``sutton_barto_reward`` included)
    :raises ValueError: for an env this class does not step (see :func:`unsupported_reason`)
    """

    def __init__(self, env_id: str, n_envs: int, env_kwargs: dict[str, Any] | None = None) -> None:
        super().__init__(env_id, n_envs, env_kwargs, unsupported_reason)
        raw = self._raw[0]
        self._kind = _tasks()[type(raw)].name
        self._state = np.zeros((n_envs, 4), dtype=np.float64)
        self._terminated = np.zeros(n_envs, dtype=bool)
        self._actions = np.zeros(n_envs, dtype=np.int64)
        if self._kind == "cartpole":
            self._params = np.array([raw.gravity, raw.masspole, raw.total_mass, raw.length, raw.polemass_length,
                                     raw.force_mag, raw.tau, raw.x_threshold, raw.theta_threshold_radians])  # fmt: skip
            self._sutton_barto = bool(raw._sutton_barto_reward)
            self._euler = raw.kinematics_integrator == "euler"
        else:
            self._params = np.array([raw.LINK_MASS_1, raw.LINK_MASS_2, raw.LINK_LENGTH_1, raw.LINK_COM_POS_1,
                                     raw.LINK_COM_POS_2, raw.LINK_MOI, raw.LINK_MOI, 9.8, math.pi])  # fmt: skip
            self._torques = np.array(raw.AVAIL_TORQUE, dtype=np.float64)
            self._max_vel = np.array([raw.MAX_VEL_1, raw.MAX_VEL_2], dtype=np.float64)
            self._dt = float(raw.dt)

    def _after_reset(self, i: int) -> None:
        self._state[i] = self._raw[i].state  # Acrobot's is float32 until its first step, exactly held in float64

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions).reshape(self.num_envs)

    def step_wait(self) -> VecEnvStepReturn:
        obs = np.empty((self.num_envs, self._obs.shape[1]), dtype=np.float64)
        terminated = self._terminated
        if self._kind == "cartpole":
            _cartpole_step(self._state, self._actions, self._params, self._euler, obs, terminated)
            if self._sutton_barto:
                rewards = np.where(terminated, -1.0, 0.0).astype(np.float32)
            else:
                rewards = np.ones(self.num_envs, dtype=np.float32)
        else:
            torques = self._torques[self._actions]
            _acrobot_step(self._state, torques, self._params, self._dt, self._max_vel, 2.0, obs, terminated)
            rewards = np.where(terminated, 0.0, -1.0).astype(np.float32)
        return self._finish(obs.astype(np.float32), rewards, terminated.copy())
