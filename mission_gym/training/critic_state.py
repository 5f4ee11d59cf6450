"""An asymmetric actor-critic for Mission Gym's ``world.observation.critic_state``.

With ``critic_state`` on, the observation ends with a block the attackers could not know in the game: each
defender's true position, heading, speed, tag reload, integrity and behaviour mode, and the stall clock
(docs/environment.md). The critic may use it, since it only shapes the advantages PPO learns from; the actor must
not, since it plays the game. :class:`CriticStatePolicy` is SB3's ``MlpPolicy`` with its actor network fed the
public part of the observation (the first ``actor_dim`` values) and its critic fed all of it, so the policy a run
ends with acts on exactly what the attackers see, and its values know which defenders guard and which chase.
"""

from __future__ import annotations

from typing import Any

import torch
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.torch_layers import MlpExtractor
from stable_baselines3.common.utils import get_device
from torch import nn

from mission_gym.sim import layout as L


def actor_size(core: Any) -> int | None:
    """Length of the public part of a :class:`~mission_gym.sim.MissionCore`'s observation when it carries the
    critic's block, else None."""
    st = core.static
    if not st.cfg[L.C_CRITIC_STATE]:
        return None
    return st.obs_dim - (st.n_defenders * L.PER_CRITIC_DEFENDER + L.CRITIC_GLOBALS)


class SplitExtractor(MlpExtractor):
    """SB3's ``MlpExtractor`` with the policy network reading only the first ``actor_dim`` features."""

    def __init__(
        self,
        feature_dim: int,
        net_arch: list[int] | dict[str, list[int]],
        activation_fn: type[nn.Module],
        device: torch.device | str,
        actor_dim: int,
    ) -> None:
        super().__init__(feature_dim, net_arch, activation_fn, device)
        widths = net_arch.get("pi", []) if isinstance(net_arch, dict) else net_arch
        layers: list[nn.Module] = []
        last = actor_dim
        for width in widths:
            layers += [nn.Linear(last, width), activation_fn()]
            last = width
        self.policy_net = nn.Sequential(*layers).to(get_device(device))
        self.latent_dim_pi = last
        self.actor_dim = actor_dim

    def forward_actor(self, features: torch.Tensor) -> torch.Tensor:
        return self.policy_net(features[..., : self.actor_dim])


class CriticStatePolicy(ActorCriticPolicy):
    """``MlpPolicy`` whose actor sees the first ``actor_dim`` observation values and whose critic sees them all.

    :param actor_dim: length of the public part of the (flat) observation
    """

    def __init__(self, *args: Any, actor_dim: int, **kwargs: Any) -> None:
        self.actor_dim = actor_dim
        super().__init__(*args, **kwargs)

    def _build_mlp_extractor(self) -> None:
        self.mlp_extractor = SplitExtractor(
            self.features_dim, self.net_arch, self.activation_fn, self.device, actor_dim=self.actor_dim
        )

    def _get_constructor_parameters(self) -> dict[str, Any]:
        return {**super()._get_constructor_parameters(), "actor_dim": self.actor_dim}
