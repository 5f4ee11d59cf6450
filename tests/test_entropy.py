"""No entropy graph while ``ent_coef`` is 0 (mission_gym/ppo/entropy.py): the same training, to the bit."""

from __future__ import annotations

import pytest
import torch
from stable_baselines3.common.distributions import CategoricalDistribution, MultiCategoricalDistribution

from mission_gym.plan.presets import load_preset
from mission_gym.settings.overrides import apply_overrides
from mission_gym.training.trainer import Trainer

SHORT = {"world": {"physics": {"episode_seconds": 2.5}}}


def tiny(env: str = "MissionGym-v0", **changes: object):
    base = load_preset("quick").model_copy(update={"env": env, "n_envs": 4, "n_steps": 32})
    return apply_overrides(
        base,
        {"timesteps": 384, "eval_freq": 0, "save_freq": 0, "eval_episodes": 2, "network_arch": [16, 16],
         "batch_size": 32, "n_epochs": 2, "env_kwargs": SHORT if env == "MissionGym-v0" else {}, **changes},
    )  # fmt: skip


def trained(tmp_path, name: str, config, sb3_distribution: bool):
    trainer = Trainer.create(config, runs_dir=tmp_path, run_name=name, progress=False)
    policy = trainer.model.policy
    if sb3_distribution:
        dist = policy.action_dist
        policy.action_dist = (
            MultiCategoricalDistribution(list(dist.action_dims))
            if isinstance(dist, MultiCategoricalDistribution)
            else CategoricalDistribution(dist.action_dim)
        )
    trainer.model.learn(config.timesteps)
    return trainer.model


@pytest.mark.parametrize("env", ["MissionGym-v0", "CartPole-v1"])
def test_zero_entropy_coefficient_trains_to_the_same_bits_without_the_entropy_graph(tmp_path, env):
    config = tiny(env, ent_coef=0.0)
    lean = trained(tmp_path, "lean", config, sb3_distribution=False)
    sb3 = trained(tmp_path, "sb3", config, sb3_distribution=True)
    assert type(lean.policy.action_dist).__name__ in ("LeanMultiCategorical", "LeanCategorical")
    for key, value in sb3.policy.state_dict().items():
        assert torch.equal(lean.policy.state_dict()[key], value), key
    # the logged entropy is the same quantity
    obs = torch.as_tensor(lean.env.reset(), dtype=torch.float32)
    actions = torch.as_tensor(lean.policy.predict(obs.numpy())[0])
    _, _, lean_entropy = lean.policy.evaluate_actions(obs, actions)
    _, _, sb3_entropy = sb3.policy.evaluate_actions(obs, actions)
    assert not lean_entropy.requires_grad and sb3_entropy.requires_grad
    torch.testing.assert_close(lean_entropy, sb3_entropy.detach())


def test_a_nonzero_entropy_coefficient_keeps_the_entropy_gradient(tmp_path):
    model = trained(tmp_path, "e", tiny(ent_coef=0.01), sb3_distribution=False)
    obs = torch.as_tensor(model.env.reset(), dtype=torch.float32)
    actions = torch.as_tensor(model.policy.predict(obs.numpy())[0])
    _, _, entropy = model.policy.evaluate_actions(obs, actions)
    assert entropy.requires_grad
    model.ent_coef = 0.0  # a phase that turns the bonus off: read at each update
    assert not model.policy.evaluate_actions(obs, actions)[2].requires_grad
