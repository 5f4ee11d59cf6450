"""MujocoVecEnv (mission_gym/vec/mujoco_vec.py) steps Hopper, Walker2d, HalfCheetah, Ant and Humanoid to the bit as SB3's
DummyVecEnv of gym.make envs does, and is the ``native`` kind of those ids."""

from __future__ import annotations

import numpy as np
import pytest
from native_vec import assert_trains_like_dummy, steps_like_dummy

from mission_gym.config import ConfigError
from mission_gym.vec.factory import resolve_kind

pytest.importorskip("mujoco")

from mission_gym.vec.mujoco_vec import MujocoVecEnv  # noqa: E402  (needs mujoco)


@pytest.mark.parametrize(
    "env_id, env_kwargs, scale, threads",
    [
        ("Hopper-v5", {}, 1.0, 1),  # falls within tens of steps: terminations and resets
        ("Hopper-v5", {"max_episode_steps": 40}, 0.1, 2),  # truncations too; the physics on two threads
        ("Walker2d-v5", {"ctrl_cost_weight": 0.01}, 1.0, 1),  # a weight of the task read from the env
        ("HalfCheetah-v5", {"max_episode_steps": 150}, 1.0, 1),  # never terminates: truncations only
        ("Ant-v5", {"max_episode_steps": 150}, 1.0, 2),  # contact forces in its cost and its observation
        # flipped over within tens of steps: terminations; no contact forces in the observation
        ("Ant-v5", {"healthy_z_range": (0.45, 1.0), "include_cfrc_ext_in_observation": False}, 1.0, 3),
        # falls within tens of steps; its observation's bodies' inertia, velocities and forces; the contact cost
        # clipped at a bound low enough to bite
        ("Humanoid-v5", {"contact_cost_range": (-np.inf, 1e-3)}, 0.4, 2),
        ("Humanoid-v5", {"max_episode_steps": 22, "include_cinert_in_observation": False}, 0.4, 1),  # truncations too
    ],
)
def test_steps_to_the_bit_as_dummy_vec_env(env_id: str, env_kwargs: dict, scale: float, threads: int) -> None:
    n = 3
    rng = np.random.default_rng(0)

    def actions(obs: np.ndarray) -> np.ndarray:
        return (scale * rng.uniform(-1, 1, (n, native.action_space.shape[0]))).astype(np.float32)

    native = MujocoVecEnv(env_id, n, env_kwargs, threads=threads)
    ends = steps_like_dummy(native, env_id, env_kwargs, 7, 400, actions)
    if env_id == "HalfCheetah-v5" or env_kwargs.get("max_episode_steps"):
        assert ends["truncated"] > 0
    if env_id != "HalfCheetah-v5":
        assert ends["terminated"] > 0


def test_native_is_the_kind_of_the_mujoco_tasks_it_steps() -> None:
    assert resolve_kind("auto", "Hopper-v5", 8, 2) == "native"
    assert resolve_kind("auto", "HalfCheetah-v5", 1, 1) == "native"
    assert resolve_kind("auto", "Hopper-v5", 8, 2, {"render_mode": "rgb_array"}) == "subproc"  # it does not render
    assert resolve_kind("auto", "Ant-v5", 8, 2) == "native"
    assert resolve_kind("auto", "Humanoid-v5", 8, 2) == "native"
    assert resolve_kind("auto", "Swimmer-v5", 8, 2) == "subproc"
    with pytest.raises(ConfigError, match="native"):
        resolve_kind("native", "Swimmer-v5", 4, 2)
    with pytest.raises(ValueError, match="render_mode"):
        MujocoVecEnv("Hopper-v5", 1, {"render_mode": "rgb_array"})


def test_ppo_trains_the_same_on_native_as_on_dummy() -> None:
    """The whole training loop (VecNormalize, truncation bootstrap, resets) sees the same numbers either way."""
    assert_trains_like_dummy("Hopper-v5", {"max_episode_steps": 50})
