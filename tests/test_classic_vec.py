"""ClassicVecEnv (mission_gym/vec/classic_vec.py) steps CartPole and Acrobot to the bit as SB3's DummyVecEnv of
gym.make envs does, and is the ``native`` kind of those ids."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3.common.vec_env import DummyVecEnv

from mission_gym.config import ConfigError
from mission_gym.vec.classic_vec import ClassicVecEnv
from mission_gym.vec.factory import make_vec_env, resolve_kind


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
    n = 4
    dummy = DummyVecEnv([lambda: gym.make(env_id, **env_kwargs)] * n)
    native = ClassicVecEnv(env_id, n, env_kwargs)
    try:
        dummy.seed(5)
        native.seed(5)
        obs = dummy.reset()
        assert np.array_equal(obs, native.reset())
        rng = np.random.default_rng(0)
        ends = {"terminated": 0, "truncated": 0}
        for _ in range(1500):
            actions = _actions(env_id, obs, rng)
            want, got = dummy.step(actions), native.step(actions)
            for a, b in zip(want[:3], got[:3]):  # observations, rewards, dones
                assert a.dtype == b.dtype and np.array_equal(a, b)
            for a, b in zip(want[3], got[3]):
                assert a["TimeLimit.truncated"] == b["TimeLimit.truncated"]
                assert ("terminal_observation" in a) == ("terminal_observation" in b)
                if "terminal_observation" in a:
                    assert np.array_equal(a["terminal_observation"], b["terminal_observation"])
                    ends["truncated" if a["TimeLimit.truncated"] else "terminated"] += 1
            obs = want[0]
        assert ends["terminated"] > 0
        if env_kwargs.get("max_episode_steps"):
            assert ends["truncated"] > 0
    finally:
        dummy.close()
        native.close()


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
    from mission_gym.ppo.lean import LeanPPO

    torch.set_num_threads(1)

    def train(kind: str) -> dict[str, torch.Tensor]:
        venv = make_vec_env("Acrobot-v1", 2, kind, seed=3, env_kwargs={"max_episode_steps": 40}, normalize=True,
                            normalize_reward=True)  # fmt: skip
        try:
            model = LeanPPO("MlpPolicy", venv, n_steps=64, batch_size=64, n_epochs=2, seed=3, device="cpu",
                            policy_kwargs={"net_arch": [16]})  # fmt: skip
            model.learn(3 * 2 * 64)
            return {k: v.clone() for k, v in model.policy.state_dict().items()}
        finally:
            venv.close()

    dummy, native = train("dummy"), train("native")
    assert [k for k in dummy if not torch.equal(dummy[k], native[k])] == []
