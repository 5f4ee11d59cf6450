"""A policy that shares one network across the attacking units (``policy: units`` in a preset).

SB3's ``MlpPolicy`` maps the whole observation to all units' action logits at once, so each unit's behaviour is
learnt separately. Here every attacker's logits come from the same network, fed with the whole observation (the
context), that unit's own block of it (its state and lidar rays, and its row of the defender-bearings block when the
observation has one) and a one-hot of its slot (the slots are the scenario's unit types). What one unit learns about
the zone or the defenders is then learnt for all of them, from four times the samples. The value function is an
ordinary MLP over the whole observation. Mission Gym only: the layout comes from the env's scenario and
observation settings (:func:`unit_layout`).
"""

from __future__ import annotations

from typing import Any

import torch
from stable_baselines3.common.policies import ActorCriticPolicy
from torch import nn

from mission_gym.sim import layout as L


def unit_layout(
    n_attackers: int,
    n_defenders: int,
    lidar_rays: int,
    defender_bearings: bool,
    defender_motion: bool = False,
    defender_objective: bool = False,
) -> dict[str, int]:
    """Where each attacker's own values lie in the flat observation (see docs/environment.md, Observation)."""
    per_attacker = L.PER_ATTACKER_BASE + lidar_rays
    bearings = n_defenders * L.PER_BEARING if defender_bearings else 0
    return {
        "n_units": n_attackers,
        "unit_size": per_attacker,
        "bearings_start": n_attackers * per_attacker + n_defenders * L.PER_DEFENDER,
        "bearings_size": bearings,
        "obs_dim": L.obs_size(
            n_attackers, n_defenders, lidar_rays, defender_bearings, defender_motion, defender_objective=defender_objective
        ),
    }


def _mlp(sizes: list[int], activation: type[nn.Module]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), activation()]
    return nn.Sequential(*layers)


class UnitExtractor(nn.Module):
    """Latents for :class:`UnitPolicy`: per unit, the shared trunk's output (concatenated over the units) for the
    actor; an MLP over the whole observation for the critic."""

    def __init__(self, layout: dict[str, int], net_arch: list[int], activation: type[nn.Module]) -> None:
        super().__init__()
        n, size, b_start, b_size, obs_dim = (
            layout["n_units"],
            layout["unit_size"],
            layout["bearings_start"],
            layout["bearings_size"],
            layout["obs_dim"],
        )
        own = [torch.arange(a * size, (a + 1) * size) for a in range(n)]
        if b_size:
            rows = [torch.arange(b_start + a * b_size, b_start + (a + 1) * b_size) for a in range(n)]
            own = [torch.cat([idx, row]) for idx, row in zip(own, rows)]
        self.register_buffer("own_index", torch.stack(own), persistent=False)  # (n, own values)
        self.register_buffer("slot", torch.eye(n), persistent=False)
        self.n_units = n
        self.unit_width = net_arch[-1]
        self.trunk = _mlp([obs_dim + self.own_index.shape[1] + n, *net_arch], activation)
        self.critic = _mlp([obs_dim, *net_arch], activation)
        self.latent_dim_pi = n * self.unit_width
        self.latent_dim_vf = net_arch[-1]

    def forward_actor(self, obs: torch.Tensor) -> torch.Tensor:
        batch = obs.shape[0]
        own = obs[:, self.own_index]  # (batch, n, own values)
        context = obs.unsqueeze(1).expand(batch, self.n_units, obs.shape[1])
        slot = self.slot.unsqueeze(0).expand(batch, self.n_units, self.n_units)
        return self.trunk(torch.cat([context, own, slot], dim=2)).reshape(batch, self.latent_dim_pi)

    def forward_critic(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.forward_actor(obs), self.forward_critic(obs)


class UnitHead(nn.Module):
    """One linear layer from a unit's latent to its action logits, the same for every unit."""

    def __init__(self, n_units: int, width: int, n_actions: int) -> None:
        super().__init__()
        self.n_units, self.width = n_units, width
        self.linear = nn.Linear(width, n_actions)

    def forward(self, latent: torch.Tensor) -> torch.Tensor:
        return self.linear(latent.reshape(-1, self.n_units, self.width)).reshape(latent.shape[0], -1)


class UnitPolicy(ActorCriticPolicy):
    """``ActorCriticPolicy`` whose actor is one network shared by the attacking units.

    :param unit_layout: from :func:`unit_layout` for the env's scenario and observation settings
    """

    def __init__(self, *args: Any, unit_layout: dict[str, int], **kwargs: Any) -> None:
        self.unit_layout = dict(unit_layout)
        super().__init__(*args, **kwargs)

    def _build_mlp_extractor(self) -> None:
        arch = self.net_arch if isinstance(self.net_arch, list) else list(self.net_arch["pi"])
        self.mlp_extractor = UnitExtractor(self.unit_layout, list(arch), self.activation_fn)

    def _build(self, lr_schedule: Any) -> None:
        super()._build(lr_schedule)
        nvec = getattr(self.action_space, "nvec", None)
        n = self.unit_layout["n_units"]
        if nvec is None or len(nvec) != n or len(set(int(k) for k in nvec)) != 1:
            raise ValueError(f"policy units needs one discrete action per attacker ({n}), got {self.action_space}")
        self.action_net = UnitHead(n, self.mlp_extractor.unit_width, int(nvec[0]))
        if self.ortho_init:
            self.action_net.apply(lambda m: self.init_weights(m, gain=0.01))
        # the optimizer must see the new head's parameters
        self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data["unit_layout"] = self.unit_layout
        return data
