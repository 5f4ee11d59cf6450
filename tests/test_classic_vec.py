"""ClassicVecEnv (mission_gym/vec/classic_vec.py) steps CartPole and Acrobot to the bit as SB3's DummyVecEnv of
gym.make envs does, and is the ``native`` kind of those ids."""

from __future__ import annotations

import numpy as np
import pytest
from native_vec import assert_trains_like_dummy, steps_like_dummy

from mission_gym.config import ConfigError
from mission_gym.vec.classic_vec import ClassicVecEnv
from mission_gym.vec.factory import resolve_kind


def _actions(env_id: str, obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Random actions; for Acrobot mostly torque along the second link's swing, which reaches the goal (terminations)."""
    if env_id.startswith("Acrobot"):
        pump = np.where(obs[:, 5] > 0, 2, 0)  # torque along the second link's swing
        return np.where(rng.uniform(size=len(obs)) < 0.8, pump, rng.integers(0, 3, len(obs)))
    return rng.integers(0, 2, len(obs))


@pytest.mark.parametrize(
    "env_id, env_kwargs",
    [
        ("CartPole-v1", {}),  # falls within tens of steps: terminations and resets
        ("CartPole-v1", {"sutton_barto_reward": True, "max_episode_steps": 20}),  # its other reward; truncations
        ("Acrobot-v1", {}),  # swung up: terminations; the state float32 until the first step after a reset
        ("Acrobot-v1", {"max_episode_steps": 90}),  # truncations too
    ],
)
def test_steps_to_the_bit_as_dummy_vec_env(env_id: str, env_kwargs: dict) -> None:
    rng = np.random.default_rng(0)
    ends = steps_like_dummy(ClassicVecEnv(env_id, 4, env_kwargs), env_id, env_kwargs, 5, 1500,
                            lambda obs: _actions(env_id, obs, rng))  # fmt: skip
    assert ends["terminated"] > 0
    if env_kwargs.get("max_episode_steps"):
        assert ends["truncated"] > 0


def test_native_is_the_kind_of_the_classic_tasks_it_steps() -> None:
    assert resolve_kind("auto", "CartPole-v1", 8, 2) == "native"
    assert resolve_kind("auto", "Acrobot-v1", 16, 1) == "native"
    assert resolve_kind("auto", "CartPole-v1", 8, 1, {"render_mode": "rgb_array"}) == "dummy"  # it does not render
    assert resolve_kind("auto", "MountainCar-v0", 8, 1) == "dummy"
    with pytest.raises(ConfigError, match="native"):
        resolve_kind("native", "MountainCar-v0", 4, 2)
    with pytest.raises(ValueError, match="render_mode"):
        ClassicVecEnv("Acrobot-v1", 1, {"render_mode": "rgb_array"})
    with pytest.raises(ValueError, match="CartPole or Acrobot"):
        ClassicVecEnv("Pendulum-v1", 1)


def test_ppo_trains_the_same_on_native_as_on_dummy() -> None:
    """The whole training loop (VecNormalize, truncation bootstrap, resets) sees the same numbers either way."""
    assert_trains_like_dummy("Acrobot-v1", {"max_episode_steps": 40})
