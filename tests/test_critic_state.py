"""``world.observation.critic_state``: the critic sees the defenders' true state, the actor does not
(mission_gym/training/critic_state.py)."""

from __future__ import annotations

import pytest
import torch

from mission_gym.config import ConfigError
from mission_gym.envs import MissionVecEnv
from mission_gym.sim import layout as L
from mission_gym.training.agent import load_agent
from mission_gym.training.presets import apply_overrides, load_preset
from mission_gym.training.trainer import Trainer

CRITIC_STATE = {"world": {"physics": {"episode_seconds": 2.5}, "observation": {"critic_state": True}}}


def tiny(**changes: object):
    base = load_preset("quick").model_copy(update={"n_envs": 2, "n_steps": 64})
    return apply_overrides(
        base,
        {"timesteps": 256, "eval_freq": 0, "save_freq": 0, "eval_episodes": 2, "network_arch": [16, 8],
         "env_kwargs": CRITIC_STATE, **changes},
    )  # fmt: skip


@pytest.mark.parametrize("vec_env", ["native", "dummy"])
def test_the_actor_reads_the_public_observation_and_the_critic_all_of_it(tmp_path, vec_env):
    trainer = Trainer.create(tiny(vec_env=vec_env), runs_dir=tmp_path, run_name="c", progress=False)
    assert trainer.train().final_eval is not None
    policy = load_agent(tmp_path / "c" / "final_model.zip").model.policy
    assert type(policy).__name__ == "CriticStatePolicy"
    obs_dim = policy.observation_space.shape[0]
    public = L.obs_size(4, 2, 8)
    assert policy.actor_dim == public and obs_dim == public + 2 * L.PER_CRITIC_DEFENDER + L.CRITIC_GLOBALS
    extractor = policy.mlp_extractor
    assert extractor.policy_net[0].in_features == public and extractor.value_net[0].in_features == obs_dim
    obs = torch.as_tensor(MissionVecEnv(3, seed=1, **CRITIC_STATE).reset(), dtype=torch.float32)
    other = obs.clone()
    other[:, public:] = torch.rand_like(other[:, public:])  # other defenders' modes and positions, another stall clock
    with torch.no_grad():
        for a, b in zip(policy.get_distribution(obs).distribution, policy.get_distribution(other).distribution):
            torch.testing.assert_close(a.logits, b.logits)  # the actor cannot see the critic's block
        assert not torch.allclose(policy.predict_values(obs), policy.predict_values(other))  # the critic does


@pytest.mark.parametrize("policy", ["trunk", "units"])
def test_critic_state_refuses_policies_whose_actor_would_see_it(tmp_path, policy):
    with pytest.raises(ConfigError, match=f"critic_state needs policy mlp.*got policy '{policy}'"):
        Trainer.create(tiny(policy=policy), runs_dir=tmp_path, run_name="c", progress=False)
    assert not (tmp_path / "c").exists()
