"""``policy: trunk``: one network for the actor and the critic (mission_gym/extras/trunk.py)."""

from __future__ import annotations

import torch

from mission_gym.agents import load_agent
from mission_gym.envs import MissionVecEnv
from mission_gym.plan.presets import load_preset
from mission_gym.settings.overrides import apply_overrides
from mission_gym.sim import layout as L
from mission_gym.training.trainer import Trainer

SHORT_MISSION = {"world": {"physics": {"episode_seconds": 2.5}}}


def tiny(policy: str, env: str = "MissionGym-v0", **changes: object):
    base = load_preset("quick").model_copy(update={"env": env, "n_envs": 2, "n_steps": 64})
    return apply_overrides(
        base,
        {"timesteps": 256, "eval_freq": 0, "save_freq": 0, "eval_episodes": 2, "policy": policy,
         "network_arch": [16, 8], "env_kwargs": SHORT_MISSION if env == "MissionGym-v0" else {}, **changes},
    )  # fmt: skip


def test_trunk_feeds_both_heads_and_trains_it_with_both_losses(tmp_path):
    trainer = Trainer.create(tiny("trunk"), runs_dir=tmp_path, run_name="t", progress=False)
    before = {k: v.clone() for k, v in trainer.model.policy.features_extractor.state_dict().items()}
    assert trainer.train().final_eval is not None
    agent = load_agent(tmp_path / "t" / "final_model.zip")
    assert agent.safe  # rebuilt from its safe files: the trunk's extractor comes from the registry, not a pickle
    policy = agent.policy
    trunk = policy.features_extractor
    assert type(trunk).__name__ == "MlpTrunk"
    assert policy.pi_features_extractor is trunk and policy.vf_features_extractor is trunk
    obs_dim = policy.observation_space.shape[0]
    assert [m.weight.shape for m in trunk.net if isinstance(m, torch.nn.Linear)] == [(16, obs_dim), (8, 16)]
    assert policy.action_net.weight.shape == (4 * L.N_ACTIONS, 8) and policy.value_net.weight.shape == (1, 8)
    # half the parameters of two MLPs of the same widths: one hidden stack instead of two
    hidden = obs_dim * 16 + 16 + 16 * 8 + 8
    heads = 8 * 4 * L.N_ACTIONS + 4 * L.N_ACTIONS + 8 + 1
    assert sum(p.numel() for p in policy.parameters()) == hidden + heads
    assert any(not torch.equal(before[k], v) for k, v in trunk.state_dict().items())  # it learnt
    obs = torch.as_tensor(MissionVecEnv(3, seed=1, **SHORT_MISSION).reset(), dtype=torch.float32)
    with torch.no_grad():
        features = trunk(obs)
        _, values, _ = policy(obs)
    torch.testing.assert_close(values, policy.value_net(features))


def test_trunk_policy_trains_other_gymnasium_envs(tmp_path):
    config = tiny("trunk", env="CartPole-v1", vec_env="dummy")
    result = Trainer.create(config, runs_dir=tmp_path, run_name="c", progress=False).train()
    assert result.final_eval is not None
    policy = load_agent(tmp_path / "c" / "final_model.zip").policy
    assert policy.action_net.weight.shape == (2, 8)
