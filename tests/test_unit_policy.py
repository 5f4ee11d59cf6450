"""``policy: units``: one actor network shared by the attackers (mission_gym/training/unit_policy.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mission_gym.config import ConfigError
from mission_gym.envs import MissionVecEnv
from mission_gym.sim import layout as L
from mission_gym.training.agent import load_agent
from mission_gym.training.presets import apply_overrides, load_preset
from mission_gym.training.trainer import Trainer
from mission_gym.training.unit_policy import UnitExtractor, unit_layout

SHORT_MISSION = {"world": {"physics": {"episode_seconds": 2.5}}}


def tiny_units(**changes: object):
    base = load_preset("quick").model_copy(update={"env": "MissionGym-v0", "vec_env": "native", "n_envs": 2, "n_steps": 64})
    return apply_overrides(
        base,
        {"timesteps": 128, "eval_freq": 0, "save_freq": 0, "eval_episodes": 2, "policy": "units",
         "network_arch": [16, 16], "env_kwargs": SHORT_MISSION, **changes},
    )  # fmt: skip


@pytest.mark.parametrize("bearings,motion", [(False, False), (True, False), (True, True)])
def test_each_unit_reads_its_own_block_of_the_observation(bearings, motion):
    venv = MissionVecEnv(3, seed=4, world={"observation": {"defender_bearings": bearings, "defender_motion": motion}})
    obs = venv.reset()
    n_a, n_d = venv.core.n_attackers, venv.core.n_defenders
    layout = unit_layout(n_a, n_d, 8, bearings, motion)
    assert layout["obs_dim"] == obs.shape[1]
    ext = UnitExtractor(layout, [8], torch.nn.Tanh)
    own = obs[:, ext.own_index.numpy()]  # (envs, units, own values)
    size = L.PER_ATTACKER_BASE + 8
    for a in range(n_a):
        np.testing.assert_array_equal(own[:, a, :size], obs[:, a * size : (a + 1) * size])
        if bearings:
            start = n_a * size + n_d * L.PER_DEFENDER + a * n_d * L.PER_BEARING
            np.testing.assert_array_equal(own[:, a, size:], obs[:, start : start + n_d * L.PER_BEARING])
    assert ext.own_index.shape == (n_a, size + (n_d * L.PER_BEARING if bearings else 0))


def test_units_share_the_actor_and_differ_only_by_what_they_see(tmp_path):
    result = Trainer.create(tiny_units(), runs_dir=tmp_path, run_name="u", progress=False).train()
    assert result.final_eval is not None
    agent = load_agent(tmp_path / "u" / "final_model.zip")
    policy = agent.model.policy
    assert type(policy).__name__ == "UnitPolicy"
    n_actions = L.N_ACTIONS
    assert policy.action_net.linear.weight.shape == (n_actions, 16)  # one head for all 4 units
    obs = torch.as_tensor(MissionVecEnv(2, seed=1, **SHORT_MISSION).reset(), dtype=torch.float32)
    logits = policy.action_net(policy.mlp_extractor.forward_actor(obs)).reshape(2, 4, n_actions)
    ext = policy.mlp_extractor
    for a in range(4):  # unit a's logits: the shared trunk and head on (whole obs, its own block, its slot)
        x = torch.cat([obs, obs[:, ext.own_index[a]], torch.eye(4)[a].expand(2, 4)], dim=1)
        torch.testing.assert_close(logits[:, a], policy.action_net.linear(ext.trunk(x)))
    actions = agent.predict(obs.numpy())
    assert actions.shape == (2, 4) and actions.max() < n_actions


@pytest.mark.parametrize("env", ["CartPole-v1", "MissionGym-v0"])
def test_units_policy_is_refused_without_the_batched_core(tmp_path, env):
    config = tiny_units(env=env, vec_env="dummy", **({"env_kwargs": {}} if env != "MissionGym-v0" else {}))
    with pytest.raises(ConfigError, match="policy units needs Mission Gym"):
        Trainer.create(config, runs_dir=tmp_path, run_name="c", progress=False)
    assert not (tmp_path / "c").exists()
