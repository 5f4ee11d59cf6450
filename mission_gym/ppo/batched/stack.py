"""Several PPO members of one network shape stacked along a leading member axis (:class:`StackedPolicies`): one
forward pass for all members, each with its own weights (``torch.baddbmm`` per layer), their actions sampled and
scored by the one function of :mod:`mission_gym.ppo.maths`. :func:`batchable` says whether a model can join a batch,
:func:`batch_key` what the members of one batch must share.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch as th
from stable_baselines3.common.torch_layers import FlattenExtractor

from mission_gym.ppo.maths import ActionHeads, sb3_actor_critic


def batchable(model: Any) -> str | None:
    """Why ``model`` cannot train in a batch, or None when it can."""
    policy = model.policy
    if not sb3_actor_critic(policy):
        return f"policy {type(policy).__name__} is not SB3's actor-critic MLP"
    if not isinstance(policy.features_extractor, FlattenExtractor):
        return f"features extractor {type(policy.features_extractor).__name__} is not covered"
    if len(model.observation_space.shape or ()) != 1:
        return "the observation is not a flat vector"
    if not isinstance(policy.mlp_extractor.policy_net, th.nn.Sequential):
        return "the policy's MLP is not a plain Sequential"
    return _distribution_problem(model) or _optimizer_problem(policy)


def _distribution_problem(model: Any) -> str | None:
    if model.use_sde or ActionHeads.of(model.policy) is None:
        dist = model.policy.action_dist
        if model.policy.squash_output:
            return "squashed Gaussian actions are not covered"
        if getattr(dist, "action_dims", None) is not None and len(set(dist.action_dims)) != 1:
            return "the categorical heads differ in size"
        return f"action distribution {type(dist).__name__} is not covered"
    return None


def _optimizer_problem(policy: Any) -> str | None:
    opt = policy.optimizer
    group = opt.param_groups[0]
    if type(opt) is not th.optim.Adam or group.get("weight_decay", 0) or group.get("amsgrad", False):
        return f"optimizer {type(opt).__name__} is not plain Adam"
    return None


def batch_key(model: Any) -> tuple[Any, ...]:
    """What members must share to train in one batch (the arrays' shapes and the update's loop)."""
    policy = model.policy
    shapes = tuple((name, tuple(p.shape)) for name, p in policy.named_parameters())
    layers = tuple(type(m).__name__ for m in policy.mlp_extractor.modules())
    group = policy.optimizer.param_groups[0]
    return (
        repr(model.observation_space),
        repr(model.action_space),
        model.n_envs,
        model.n_steps,
        model.batch_size,
        model.n_epochs,
        model.clip_range_vf is None,
        model.normalize_advantage,
        shapes,
        layers,
        tuple(group["betas"]),
        group["eps"],
        str(model.device),
    )


class StackedPolicies:
    """The weights of ``M`` SB3 actor-critic policies of one shape stacked along a leading member axis, and the
    forward passes PPO needs, for all members at once.

    :param policies: the members' policies (checked by :func:`batchable`)
    :param device: where the stacked weights live
    """

    def __init__(self, policies: Sequence[Any], device: th.device | str) -> None:
        first = policies[0]
        self.policies = list(policies)
        self.names = [name for name, _ in first.named_parameters()]
        index = {name: i for i, name in enumerate(self.names)}
        self.params = [
            th.stack([dict(p.named_parameters())[name].detach() for p in policies]).to(device).requires_grad_()
            for name in self.names
        ]
        self.pi = self._program(first.mlp_extractor.policy_net, "mlp_extractor.policy_net", index)
        self.vf = self._program(first.mlp_extractor.value_net, "mlp_extractor.value_net", index)
        self.action_net = (index["action_net.weight"], index["action_net.bias"])
        self.value_net = (index["value_net.weight"], index["value_net.bias"])
        self.log_std = index.get("log_std")
        heads = ActionHeads.of(first)
        assert heads is not None, "batchable() checks the members' action heads"
        self.heads = heads

    @staticmethod
    def _program(net: th.nn.Sequential, prefix: str, index: dict[str, int]) -> list[tuple[str, Any]]:
        """The layers of an MLP as ``("linear", (weight, bias))`` parameter indices or ``("module", activation)``."""
        out: list[tuple[str, Any]] = []
        for name, module in net.named_children():
            if isinstance(module, th.nn.Linear):
                out.append(("linear", (index[f"{prefix}.{name}.weight"], index[f"{prefix}.{name}.bias"])))
            elif any(True for _ in module.parameters()):
                raise ValueError(f"layer {prefix}.{name} ({type(module).__name__}) has weights the batch does not stack")
            else:
                out.append(("module", module))
        return out

    @property
    def size(self) -> int:
        return self.params[0].shape[0]

    # --- weights to and from the members ----------------------------------------------------------------------
    @th.no_grad()
    def push(self) -> None:
        """Copy the stacked weights into each member's own policy."""
        for i, policy in enumerate(self.policies):
            th._foreach_copy_([p for _, p in policy.named_parameters()], [w[i] for w in self.params])

    # --- forward passes ---------------------------------------------------------------------------------------
    def _linear(self, which: tuple[int, int], x: th.Tensor) -> th.Tensor:
        w, b = self.params[which[0]], self.params[which[1]]
        return th.baddbmm(b.unsqueeze(1), x, w.transpose(1, 2))

    def _mlp(self, program: list[tuple[str, Any]], x: th.Tensor) -> th.Tensor:
        for kind, what in program:
            x = self._linear(what, x) if kind == "linear" else what(x)
        return x

    def forward(self, obs: th.Tensor) -> tuple[th.Tensor, th.Tensor]:
        """The action head's output (logits or Gaussian means, ``(M, B, outputs)``) and values ``(M, B)`` of
        observations ``(M, B, features)``."""
        obs = obs.float()
        out = self._linear(self.action_net, self._mlp(self.pi, obs))
        values = self._linear(self.value_net, self._mlp(self.vf, obs)).squeeze(-1)
        return out, values

    def values(self, obs: th.Tensor) -> th.Tensor:
        """The critic's values ``(M, B)`` of observations ``(M, B, features)``."""
        return self._linear(self.value_net, self._mlp(self.vf, obs.float())).squeeze(-1)

    def distribution(self, out: th.Tensor) -> th.Tensor:
        """:meth:`ActionHeads.distribution <mission_gym.ppo.maths.ActionHeads.distribution>` of every member's output."""
        return self.heads.distribution(out, self.params[self.log_std] if self.log_std is not None else None)

    def act(
        self, obs: th.Tensor, generators: Sequence[th.Generator] | None = None
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor, th.Tensor]:
        """Sampled actions, values, the actions' log-probabilities and the distribution of observations
        ``(M, B, features)``: what :meth:`LeanPPO._act <mission_gym.ppo.lean.LeanPPO._act>` computes for each member.

        :param generators: one per member, each drawing that member's actions (as its lone run's global generator
            would); None draws every member's at once inside a captured graph (no host synchronisation)
        """
        out, values = self.forward(obs)
        dist = self.distribution(out)
        actions, log_prob = self.heads.sample_or_score(out, dist, generators=generators, in_graph=generators is None)
        return actions, values, log_prob, dist

    def evaluate(
        self, obs: th.Tensor, actions: th.Tensor, entropy_grad: bool
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor, th.Tensor]:
        """Values, log-probabilities and entropies ``(M, B)`` of taken actions (``evaluate_actions`` per member), and
        the distribution.

        :param entropy_grad: keep the entropy's graph (some member's ``ent_coef`` is not 0)
        """
        out, values = self.forward(obs)
        dist = self.distribution(out)
        _, log_prob = self.heads.sample_or_score(out, dist, actions)
        return values, log_prob, self.heads.entropy(dist, entropy_grad), dist


def capture_graph(fn: Callable[[], Any]) -> tuple[Any, Any]:
    """``fn`` captured in a CUDA graph after one warm-up call on a side stream (which allocates what the graph keeps):
    the graph and the capture's outputs (the tensors each replay writes)."""
    side = th.cuda.Stream()
    side.wait_stream(th.cuda.current_stream())
    with th.cuda.stream(side):
        fn()
    th.cuda.current_stream().wait_stream(side)
    graph = th.cuda.CUDAGraph()
    with th.cuda.graph(graph):
        out = fn()
    return graph, out
