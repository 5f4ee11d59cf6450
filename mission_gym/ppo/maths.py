"""PPO's arithmetic, written once for both learners: the action heads (one function that samples or scores, and their
entropy), the clipped policy and value loss with an optional teacher-KL term, and the update's record.

Every function reduces over the last axis (the rows of a minibatch or a rollout step), so a single model's tensors
``(B, ...)`` (:class:`~mission_gym.ppo.lean.LeanPPO`) and the batched learner's stacked ``(M, B, ...)``
(:mod:`mission_gym.ppo.batched`) go through the same operations, in SB3's order: with ``exact`` heads a single model's
update is SB3's to the bit (``tests/test_lean.py``), and a member of a batch follows its lone run to float rounding
(``tests/test_batched.py``). Two network loops stay, each where it earns its place: the single model's (SB3's modules,
step for step) and the batched one's (stacked weights, captured in CUDA graphs).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch as th
from stable_baselines3.common.distributions import (
    CategoricalDistribution,
    DiagGaussianDistribution,
    MultiCategoricalDistribution,
)
from stable_baselines3.common.policies import ActorCriticPolicy
from torch.nn import functional as F

_LOG_SQRT_2PI = math.log(math.sqrt(2 * math.pi))


def sb3_actor_critic(policy: Any) -> bool:
    """Whether the policy is SB3's actor-critic with its own ``forward`` and ``evaluate_actions`` and one features
    extractor: what the lean paths replace step for step."""
    cls = type(policy)
    return (
        isinstance(policy, ActorCriticPolicy)
        and cls.forward is ActorCriticPolicy.forward
        and cls.evaluate_actions is ActorCriticPolicy.evaluate_actions
        and policy.share_features_extractor
    )


@dataclass(frozen=True)
class ActionHeads:
    """What a policy's action output is: ``heads`` categorical heads of ``actions`` each (Mission Gym's factored
    actions, a ``Discrete`` as one head) or a diagonal Gaussian (``actions`` 0), and the one place it is sampled,
    scored and its entropy taken.

    :param heads: categorical heads (1 for a Gaussian)
    :param actions: actions per head (0: a diagonal Gaussian)
    :param exact: probabilities as ``softmax`` (as ``Categorical`` computes them) rather than the ``exp`` of the
        normalised log-probabilities, the same values within float rounding: PyTorch's CPU softmax over a short last
        dimension took 1.1 ms for a 1,024 × 4 × 9 minibatch against 0.05 ms for ``exp``
    """

    heads: int
    actions: int
    exact: bool = False

    @classmethod
    def of(cls, policy: Any, exact: bool = False) -> ActionHeads | None:
        """The heads of SB3's actor-critic over equal categorical heads, one categorical or a plain diagonal Gaussian
        (no squashing); None for any other policy (its own code then runs)."""
        if not sb3_actor_critic(policy) or policy.squash_output:
            return None
        dist = policy.action_dist
        if type(dist) is DiagGaussianDistribution:
            return cls(1, 0, exact)
        if isinstance(dist, MultiCategoricalDistribution):
            if len(set(dist.action_dims)) != 1:
                return None
            return cls(len(dist.action_dims), int(dist.action_dims[0]), exact)
        if isinstance(dist, CategoricalDistribution):
            return cls(1, int(dist.action_dim), exact)
        return None

    @property
    def gaussian(self) -> bool:
        return self.actions == 0

    # --- the distribution ------------------------------------------------------------------------------------
    def distribution(self, out: th.Tensor, log_std: th.Tensor | None = None) -> th.Tensor:
        """The distribution of the action net's output ``(..., B, outputs)``: the heads' normalised
        log-probabilities ``(..., B, heads, actions)`` (what ``Categorical(logits=...)`` keeps), or the Gaussian's
        standard deviation ``(..., B, dims)`` (as ``DiagGaussianDistribution`` makes it from ``log_std``, ``(dims,)``
        or ``(..., dims)``)."""
        if self.gaussian:
            assert log_std is not None
            return th.ones_like(out) * log_std.exp().unsqueeze(-2)
        logits = out.view(*out.shape[:-1], self.heads, self.actions)
        return logits - logits.logsumexp(dim=-1, keepdim=True)

    def probs(self, log_probs: th.Tensor) -> th.Tensor:
        """The probabilities of normalised log-probabilities (see ``exact``)."""
        return F.softmax(log_probs, dim=-1) if self.exact else log_probs.exp()

    def sample_or_score(
        self,
        out: th.Tensor,
        dist: th.Tensor,
        actions: th.Tensor | None = None,
        generators: Sequence[th.Generator] | None = None,
        in_graph: bool = False,
    ) -> tuple[th.Tensor, th.Tensor]:
        """The actions and their log-probabilities ``(..., B)``: ``actions`` scored when given, else drawn.

        :param out: the action net's output (the Gaussian's mean)
        :param dist: :meth:`distribution` of ``out``
        :param actions: taken actions to score (any float or integer tensor of ``(..., B, heads)`` values)
        :param generators: one per leading member of a stacked ``out`` ``(M, B, ...)``, each drawing that member's
            actions as its lone run's global generator would; None draws from the global generator
        :param in_graph: categorical draws with one uniform per row against the cumulative probabilities, no host
            synchronisation (inside a captured CUDA graph); else ``multinomial``, as ``Categorical.sample`` draws
        """
        if self.gaussian:
            if actions is None:
                actions = out + _normal_like(out, generators) * dist  # Normal.rsample's draw
            return actions, _gaussian_log_prob(actions, out, dist)
        if actions is None:
            actions = self._draw(self.probs(dist), generators, in_graph)
        else:
            actions = actions.long().reshape(dist.shape[:-1])
        log_prob = dist.gather(-1, actions.unsqueeze(-1)).squeeze(-1).sum(dim=-1)
        return actions, log_prob

    def _draw(self, probs: th.Tensor, generators: Sequence[th.Generator] | None, in_graph: bool) -> th.Tensor:
        """Each head's action ``(..., B, heads)``: one multinomial over the heads' rows, head after head (what
        ``Categorical.sample``'s call per head draws, in one call)."""
        single = probs.dim() == 3
        stacked = probs.unsqueeze(0) if single else probs  # (M, B, heads, actions)
        m, b = stacked.shape[:2]
        rows = stacked.transpose(1, 2).reshape(m, self.heads * b, self.actions)
        if in_graph:
            u = th.rand(m, self.heads * b, 1, device=rows.device, dtype=rows.dtype)
            drawn = (rows.cumsum(-1) < u).sum(-1).clamp_(max=self.actions - 1).view(m, self.heads, b)
        else:
            gens: Sequence[th.Generator | None] = generators if generators is not None else [None] * m
            drawn = th.stack([th.multinomial(rows[i], 1, True, generator=g).view(self.heads, b) for i, g in enumerate(gens)])
        actions = drawn.transpose(1, 2)
        return actions[0] if single else actions

    def entropy(self, dist: th.Tensor, grad: bool) -> th.Tensor:
        """The entropy ``(..., B)``, summed over the heads (or the Gaussian's dimensions); ``grad``: keep its graph
        (some ``ent_coef`` is not 0; with 0 the term adds exact zeros to every gradient, so none is built)."""
        with th.set_grad_enabled(grad and th.is_grad_enabled()):
            if self.gaussian:
                return (0.5 + 0.5 * math.log(2 * math.pi) + th.log(dist)).sum(dim=-1)
            clamped = th.clamp(dist, min=th.finfo(dist.dtype).min)
            return -(clamped * self.probs(dist)).sum(-1).sum(dim=-1)


def _normal_like(out: th.Tensor, generators: Sequence[th.Generator] | None) -> th.Tensor:
    noise = th.empty_like(out)
    if generators is None:
        return noise.normal_()
    for i, g in enumerate(generators):
        noise[i].normal_(generator=g)
    return noise


def _gaussian_log_prob(actions: th.Tensor, mean: th.Tensor, scale: th.Tensor) -> th.Tensor:
    """``Normal(mean, scale).log_prob(actions)`` summed over the action's dimensions, as SB3 sums it."""
    log_prob = -((actions - mean) ** 2) / (2 * scale**2) - scale.log() - _LOG_SQRT_2PI
    return log_prob.sum(dim=-1)


def kl_to_teacher(student_log_probs: th.Tensor, teacher_log_probs: th.Tensor) -> th.Tensor:
    """``KL(teacher ‖ student)`` of categorical heads, summed over the heads: ``(..., B, heads, actions)`` normalised
    log-probabilities in, ``(..., B)`` out; its gradient flows to the student only."""
    teacher = teacher_log_probs.detach()
    return (teacher.exp() * (teacher - student_log_probs)).sum(dim=-1).sum(dim=-1)


@dataclass
class LossInputs:
    """A minibatch as the loss takes it, each tensor ``(..., B)``: the policy's log-probabilities, values and entropy
    of the taken actions (None: the distribution has no entropy, SB3 then takes ``-log_prob``), and what the rollout
    stored. ``student``/``teacher``: normalised log-probabilities ``(..., B, heads, actions)`` for a distillation."""

    log_prob: th.Tensor
    values: th.Tensor
    entropy: th.Tensor | None
    old_log_prob: th.Tensor
    old_values: th.Tensor
    advantages: th.Tensor
    returns: th.Tensor
    student: th.Tensor | None = None
    teacher: th.Tensor | None = None


def ppo_loss(
    x: LossInputs,
    clip: Any,
    clip_vf: Any,
    ent_coef: Any,
    vf_coef: Any,
    normalize_advantage: bool,
    kl_coef: Any = 0.0,
) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
    """SB3's clipped PPO loss of one minibatch, plus ``kl_coef × KL(teacher ‖ student)`` when ``x`` has a teacher:
    the loss, its logged terms (policy loss, clip fraction, value loss, entropy loss, and the mean KL to the teacher
    when there is one) along a last axis, and the approximate KL divergence. The coefficients are floats, or tensors
    that broadcast against the reduced shape (``(M,)``; ``clip`` and ``clip_vf`` ``(M, 1)``) for stacked members."""
    advantages = x.advantages
    if normalize_advantage and advantages.shape[-1] > 1:
        advantages = (advantages - advantages.mean(dim=-1, keepdim=True)) / (advantages.std(dim=-1, keepdim=True) + 1e-8)
    ratio = th.exp(x.log_prob - x.old_log_prob)
    policy_loss_1 = advantages * ratio
    policy_loss_2 = advantages * th.clamp(ratio, 1 - clip, 1 + clip)
    policy_loss = -th.min(policy_loss_1, policy_loss_2).mean(dim=-1)
    values_pred = x.values if clip_vf is None else x.old_values + th.clamp(x.values - x.old_values, -clip_vf, clip_vf)
    value_loss = ((x.returns - values_pred) ** 2).mean(dim=-1)
    entropy_loss = -(-x.log_prob if x.entropy is None else x.entropy).mean(dim=-1)
    loss = policy_loss + ent_coef * entropy_loss + vf_coef * value_loss
    terms = [policy_loss, None, value_loss, entropy_loss]
    if x.teacher is not None:
        assert x.student is not None
        distill = kl_to_teacher(x.student, x.teacher).mean(dim=-1)
        loss = loss + kl_coef * distill
        terms.append(distill)
    with th.no_grad():
        terms[1] = ((ratio - 1).abs() > clip).float().mean(dim=-1)
        stats = th.stack([t.detach() for t in terms if t is not None], dim=-1)
        log_ratio = x.log_prob - x.old_log_prob
        approx_kl = ((th.exp(log_ratio) - 1) - log_ratio).mean(dim=-1)
    return loss, stats, approx_kl


@dataclass
class UpdateRecord:
    """What an update logs (SB3's ``train/*`` values), written by :meth:`write` in SB3's order."""

    policy_loss: float
    clip_fraction: float
    value_loss: float
    entropy_loss: float
    approx_kl: float
    loss: float
    explained_variance: float
    n_updates: int
    clip_range: float
    clip_range_vf: float | None = None
    std: float | None = None
    distill_kl: float | None = None
    distill_coef: float | None = None

    def write(self, logger: Any) -> None:
        record = logger.record
        record("train/entropy_loss", self.entropy_loss)
        record("train/policy_gradient_loss", self.policy_loss)
        record("train/value_loss", self.value_loss)
        record("train/approx_kl", self.approx_kl)
        record("train/clip_fraction", self.clip_fraction)
        record("train/loss", self.loss)
        record("train/explained_variance", self.explained_variance)
        if self.distill_kl is not None:
            record("train/distill_kl", self.distill_kl)
            record("train/distill_coef", self.distill_coef)
        if self.std is not None:
            record("train/std", self.std)
        record("train/n_updates", self.n_updates, exclude="tensorboard")
        record("train/clip_range", self.clip_range)
        if self.clip_range_vf is not None:
            record("train/clip_range_vf", self.clip_range_vf)
