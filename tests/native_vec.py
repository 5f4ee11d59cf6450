"""What the tests of the native batched envs of Gymnasium tasks share (test_mujoco_vec.py, test_classic_vec.py): a
native VecEnv against SB3's DummyVecEnv of gym.make envs, step by step and through a short PPO run."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3.common.vec_env import DummyVecEnv

from mission_gym.vec.factory import make_vec_env


def steps_like_dummy(
    native: Any, env_id: str, env_kwargs: dict, seed: int, steps: int, actions: Callable[[np.ndarray], np.ndarray]
) -> dict[str, int]:
    """Step ``native`` and a DummyVecEnv of the same envs, seeded alike, with ``actions(observations)``; assert every
    observation, reward, end and terminal observation is the same to the bit; the ends counted by kind."""
    dummy = DummyVecEnv([lambda: gym.make(env_id, **env_kwargs)] * native.num_envs)
    try:
        dummy.seed(seed)
        native.seed(seed)
        obs = dummy.reset()
        assert np.array_equal(obs, native.reset())
        ends = {"terminated": 0, "truncated": 0}
        for _ in range(steps):
            act = actions(obs)
            want, got = dummy.step(act), native.step(act)
            for a, b in zip(want[:3], got[:3]):  # observations, rewards, dones
                assert a.dtype == b.dtype and np.array_equal(a, b)
            for a, b in zip(want[3], got[3]):
                assert a["TimeLimit.truncated"] == b["TimeLimit.truncated"]
                assert ("terminal_observation" in a) == ("terminal_observation" in b)
                if "terminal_observation" in a:
                    assert np.array_equal(a["terminal_observation"], b["terminal_observation"])
                    ends["truncated" if a["TimeLimit.truncated"] else "terminated"] += 1
            obs = want[0]
        return ends
    finally:
        dummy.close()
        native.close()


def assert_trains_like_dummy(env_id: str, env_kwargs: dict) -> None:
    """The whole training loop (VecNormalize, truncation bootstrap, resets) sees the same numbers on the native env
    as on the dummy one: a short LeanPPO run ends with the same weights."""
    from mission_gym.ppo.lean import LeanPPO

    torch.set_num_threads(1)

    def train(kind: str) -> dict[str, torch.Tensor]:
        venv = make_vec_env(env_id, 2, kind, seed=3, env_kwargs=env_kwargs, normalize=True, normalize_reward=True)
        try:
            model = LeanPPO("MlpPolicy", venv, n_steps=64, batch_size=64, n_epochs=2, seed=3, device="cpu",
                            policy_kwargs={"net_arch": [16]})  # fmt: skip
            model.learn(3 * 2 * 64)
            return {k: v.clone() for k, v in model.policy.state_dict().items()}
        finally:
            venv.close()

    dummy, native = train("dummy"), train("native")
    assert [k for k in dummy if not torch.equal(dummy[k], native[k])] == []
