"""One network for the actor and the critic (``policy: trunk`` in a preset).

SB3's ``MlpPolicy`` builds two MLPs of ``network_arch``: one for the action logits, one for the value. Here a single
MLP of ``network_arch`` (the trunk) is SB3's shared features extractor, and the action and value heads are linear
layers on its output, so each forward and backward pass does about half the arithmetic, and the value loss shapes
the features the policy uses. On Mission Gym's default scenario it trains about 1.25× the steps per second of two
[128, 128] networks and its members take off sooner, but the agents it ends with win no more: the committed preset
with it won 82.0% and 80.0% on seeds 1-2, below its two networks (docs/experiments.md, "The `cpu` recipe, newest
first"), so no preset uses it.
"""

from __future__ import annotations

from typing import Any

import torch
from stable_baselines3.common.preprocessing import get_flattened_obs_dim
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor, create_mlp
from torch import nn


class MlpTrunk(BaseFeaturesExtractor):
    """A flattened observation through ``widths`` hidden layers, each followed by ``activation``.

    :param observation_space: the env's observation space (a ``Box``)
    :param widths: hidden layer widths; the last is the features' size
    :param activation: activation module class (e.g. ``torch.nn.Tanh``)
    """

    def __init__(self, observation_space: Any, widths: list[int], activation: type[nn.Module]) -> None:
        super().__init__(observation_space, widths[-1])
        layers = create_mlp(get_flattened_obs_dim(observation_space), -1, list(widths), activation)
        self.net = nn.Sequential(nn.Flatten(), *layers)

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return self.net(observations)


def trunk_policy(policy_kwargs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The registered policy ``trunk`` (:mod:`mission_gym.training.parts`): SB3's ``MlpPolicy`` over a shared trunk."""
    return "MlpPolicy", trunk_policy_kwargs(policy_kwargs)


def trunk_policy_kwargs(policy_kwargs: dict[str, Any]) -> dict[str, Any]:
    """``MlpPolicy`` keyword arguments for a trunk of ``policy_kwargs['net_arch']`` shared by both heads.

    :param policy_kwargs: the run's policy arguments (``net_arch`` a list of widths, ``activation_fn``)
    """
    return {
        **policy_kwargs,
        "features_extractor_class": MlpTrunk,
        "features_extractor_kwargs": {"widths": list(policy_kwargs["net_arch"]), "activation": policy_kwargs["activation_fn"]},
        "share_features_extractor": True,
        "net_arch": {"pi": [], "vf": []},
    }
