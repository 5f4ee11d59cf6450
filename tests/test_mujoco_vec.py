"""MujocoVecEnv (mission_gym/vec/mujoco_vec.py) steps Hopper, Walker2d, HalfCheetah and Ant to the bit as SB3's
DummyVecEnv of gym.make envs does, and is the ``native`` kind of those ids."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3.common.vec_env import DummyVecEnv

from mission_gym.config import ConfigError
from mission_gym.vec.factory import make_vec_env, resolve_kind

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
    ],
)
def test_steps_to_the_bit_as_dummy_vec_env(env_id: str, env_kwargs: dict, scale: float, threads: int) -> None:
    n = 3
    dummy = DummyVecEnv([lambda: gym.make(env_id, **env_kwargs)] * n)
    native = MujocoVecEnv(env_id, n, env_kwargs, threads=threads)
    try:
        dummy.seed(7)
        native.seed(7)
        assert np.array_equal(dummy.reset(), native.reset())
        rng = np.random.default_rng(0)
        ends = {"terminated": 0, "truncated": 0}
        for _ in range(400):
            actions = (scale * rng.uniform(-1, 1, (n, native.action_space.shape[0]))).astype(np.float32)
            want, got = dummy.step(actions), native.step(actions)
            for a, b in zip(want[:3], got[:3]):  # observations, rewards, dones
                assert a.dtype == b.dtype and np.array_equal(a, b)
            for a, b in zip(want[3], got[3]):
                assert a["TimeLimit.truncated"] == b["TimeLimit.truncated"]
                assert ("terminal_observation" in a) == ("terminal_observation" in b)
                if "terminal_observation" in a:
                    assert np.array_equal(a["terminal_observation"], b["terminal_observation"])
                    ends["truncated" if a["TimeLimit.truncated"] else "terminated"] += 1
        if env_id == "HalfCheetah-v5" or env_kwargs.get("max_episode_steps"):
            assert ends["truncated"] > 0
        if env_id != "HalfCheetah-v5":
            assert ends["terminated"] > 0
    finally:
        dummy.close()
        native.close()


def test_native_is_the_kind_of_the_mujoco_tasks_it_steps() -> None:
    assert resolve_kind("auto", "Hopper-v5", 8, 2) == "native"
    assert resolve_kind("auto", "HalfCheetah-v5", 1, 1) == "native"
    assert resolve_kind("auto", "Hopper-v5", 8, 2, {"render_mode": "rgb_array"}) == "subproc"  # it does not render
    assert resolve_kind("auto", "Ant-v5", 8, 2) == "native"
    assert resolve_kind("auto", "Humanoid-v5", 8, 2) == "subproc"
    with pytest.raises(ConfigError, match="native"):
        resolve_kind("native", "Humanoid-v5", 4, 2)
    with pytest.raises(ValueError, match="render_mode"):
        MujocoVecEnv("Hopper-v5", 1, {"render_mode": "rgb_array"})


def test_ppo_trains_the_same_on_native_as_on_dummy() -> None:
    """The whole training loop (VecNormalize, truncation bootstrap, resets) sees the same numbers either way."""
    from mission_gym.ppo.lean import LeanPPO

    torch.set_num_threads(1)

    def train(kind: str) -> dict[str, torch.Tensor]:
        venv = make_vec_env("Hopper-v5", 2, kind, seed=3, env_kwargs={"max_episode_steps": 50}, normalize=True,
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
