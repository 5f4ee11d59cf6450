"""No entropy gradient while PPO's entropy coefficient is 0.

SB3's PPO takes the entropy of the action distribution on every minibatch and adds ``ent_coef × entropy`` to the
loss, with its autograd graph, even when ``ent_coef`` is 0, where that term adds exact zeros to every gradient. For
categorical actions the entropy needs the softmax of each head's logits, and PyTorch's CPU softmax over a short last
dimension (Mission Gym's 11 actions) is slow: forward and backward took about a sixth of a ``cpu`` preset update,
and the ``cpu`` preset's recipe ran 8% more steps per second without it, training identical to the bit
(docs/experiments.md, "The previous `cpu` preset: a population of 4"). An algorithm built with :class:`LeanEntropy`
gives its policy a categorical distribution whose entropy, while the model's ``ent_coef`` is 0, is computed without
a graph from the normalised log-probabilities (:func:`entropy_no_grad`: ``-Σ p log p`` with ``p = exp(log p)``) and
only feeds the ``train/entropy_loss`` log. The update's arithmetic is otherwise the same, so a run trains to the same
bits as with SB3's distribution; with a nonzero ``ent_coef`` SB3's entropy is used.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from stable_baselines3.common.distributions import CategoricalDistribution, MultiCategoricalDistribution


def entropy_no_grad(logits: torch.Tensor) -> torch.Tensor:
    """Entropy over the last dimension of normalised log-probabilities, without an autograd graph."""
    with torch.no_grad():
        logits = torch.clamp(logits, min=torch.finfo(logits.dtype).min)
        return -(logits.exp() * logits).sum(-1)


class LeanCategorical(CategoricalDistribution):
    """SB3's ``CategoricalDistribution`` with a graph-free entropy while ``coef()`` is 0."""

    def __init__(self, action_dim: int, coef: Callable[[], float]) -> None:
        super().__init__(action_dim)
        self.coef = coef

    def entropy(self) -> torch.Tensor:
        if self.coef() != 0.0:
            return super().entropy()
        return entropy_no_grad(self.distribution.logits)


class LeanMultiCategorical(MultiCategoricalDistribution):
    """SB3's ``MultiCategoricalDistribution`` with a graph-free entropy while ``coef()`` is 0."""

    def __init__(self, action_dims: list[int], coef: Callable[[], float]) -> None:
        super().__init__(action_dims)
        self.coef = coef

    def entropy(self) -> torch.Tensor:
        if self.coef() != 0.0:
            return super().entropy()
        return torch.stack([entropy_no_grad(d.logits) for d in self.distribution], dim=1).sum(dim=1)


class LeanEntropy:
    """A mixin for an SB3 on-policy algorithm (``class LeanPPO(LeanEntropy, PPO)``): when the model is set up (built
    or loaded), its policy's categorical action distribution becomes its lean twin, reading the model's ``ent_coef``
    at each update (phases may change it). Other distributions (Gaussian, Bernoulli) are left alone."""

    policy: Any
    ent_coef: Any

    def _setup_model(self) -> None:
        super()._setup_model()  # type: ignore[misc]
        policy = self.policy
        dist = policy.action_dist

        def coef() -> float:
            return float(self.ent_coef)

        if type(dist) is MultiCategoricalDistribution:
            policy.action_dist = LeanMultiCategorical(list(dist.action_dims), coef)
        elif type(dist) is CategoricalDistribution:
            policy.action_dist = LeanCategorical(dist.action_dim, coef)
