"""Several PPO members of one network shape trained as one batched learner.

A population's members are independent PPO runs (their own seed, hyperparameters, schedules, optimizer state,
minibatch order, envs, VecNormalize statistics, callbacks and run directory), but each is too small to keep a GPU
or even a CPU core's vector units busy: most of a member's update is per-operation overhead around matrix products
of 128 columns. :class:`BatchedLearner` keeps every member an ordinary :class:`~mission_gym.ppo.lean.LeanPPO` model
(what it saves, logs and loads is unchanged) and computes their work together:

- the members' weights are stacked along a leading member axis (:class:`StackedPolicies`), so one rollout step is
  one batched forward pass for all members and one minibatch step is one batched forward, backward, gradient clip
  and Adam step (:func:`torch.baddbmm` over the member axis), each member with its own learning rate, clip range,
  coefficients and Adam moments;
- each member keeps its own random streams: its minibatch order comes from a NumPy generator and its actions from
  a torch generator, both in the state a lone run's global generators would be in, so on the CPU a member trained
  in the batch follows the same member trained alone to within float rounding (``tests/test_batched.py``);
- after each update the stacked weights and Adam moments are copied back into every member's own policy and
  optimizer, so checkpoints, evaluations and ``PPO.load`` see an ordinary model.

Members must share what shapes the arrays: the env's spaces, ``n_envs``, ``n_steps``, ``batch_size``,
``n_epochs``, the network and whether ``clip_range_vf`` is set (:func:`batch_key`). Covered policies are SB3's
actor-critic MLPs over equal categorical heads (Mission Gym), one categorical (``Discrete``) or a diagonal
Gaussian; :func:`batchable` says why another is not.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.distributions import (
    CategoricalDistribution,
    DiagGaussianDistribution,
    MultiCategoricalDistribution,
)
from stable_baselines3.common.torch_layers import FlattenExtractor

from mission_gym.ppo.lean import _LOG_SQRT_2PI, _sb3_actor_critic


def batchable(model: Any) -> str | None:
    """Why ``model`` cannot train in a batch, or None when it can."""
    policy = model.policy
    if getattr(model, "teachers", None) is not None:
        return "a student of a distillation trains alone (its teachers' KL is LeanPPO's)"
    if not _sb3_actor_critic(policy):
        return f"policy {type(policy).__name__} is not SB3's actor-critic MLP"
    if not isinstance(policy.features_extractor, FlattenExtractor):
        return f"features extractor {type(policy.features_extractor).__name__} is not covered"
    if len(model.observation_space.shape or ()) != 1:
        return "the observation is not a flat vector"
    if not isinstance(policy.mlp_extractor.policy_net, th.nn.Sequential):
        return "the policy's MLP is not a plain Sequential"
    return _distribution_problem(model) or _optimizer_problem(policy)


def _distribution_problem(model: Any) -> str | None:
    dist = model.policy.action_dist
    if isinstance(dist, MultiCategoricalDistribution):
        if len(set(dist.action_dims)) != 1:
            return "the categorical heads differ in size"
    elif not isinstance(dist, CategoricalDistribution | DiagGaussianDistribution) or model.use_sde:
        return f"action distribution {type(dist).__name__} is not covered"
    if model.policy.squash_output:
        return "squashed Gaussian actions are not covered"
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
        dist = first.action_dist
        self.gaussian = isinstance(dist, DiagGaussianDistribution)
        if isinstance(dist, MultiCategoricalDistribution):
            self.heads: tuple[int, int] = (len(dist.action_dims), int(dist.action_dims[0]))
        elif isinstance(dist, CategoricalDistribution):
            self.heads = (1, int(dist.action_dim))
        else:
            self.heads = (1, 0)

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

    def _log_probs(self, out: th.Tensor) -> th.Tensor:
        """Normalised log-probabilities ``(M, B, heads, actions)`` of the heads' logits, as ``Categorical`` keeps them."""
        m, b = out.shape[:2]
        logits = out.view(m, b, *self.heads)
        return logits - logits.logsumexp(dim=-1, keepdim=True)

    def _scale(self, mean: th.Tensor) -> th.Tensor:
        assert self.log_std is not None
        return th.ones_like(mean) * self.params[self.log_std].exp().unsqueeze(1)

    def act(self, obs: th.Tensor, generators: Sequence[th.Generator] | None = None) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        """Sampled actions, values and the actions' log-probabilities of observations ``(M, B, features)``: what
        :meth:`LeanPPO._act <mission_gym.ppo.lean.LeanPPO._act>` computes for each member.

        :param generators: one per member, each drawing that member's actions (as its lone run's global generator
            would); None draws every member's from the global generator in one call
        """
        out, values = self.forward(obs)
        m, b = out.shape[:2]
        if self.gaussian:
            scale = self._scale(out)
            noise = th.empty_like(out)
            if generators is None:
                noise.normal_()
            else:
                for i, g in enumerate(generators):
                    noise[i].normal_(generator=g)
            actions = out + noise * scale
            return actions, values, _gaussian_log_prob(actions, out, scale)
        log_probs = self._log_probs(out)
        n_heads, n_actions = self.heads
        probs = log_probs.exp()
        # each member's draws as LeanPPO's: one multinomial over the heads' rows, head after head
        rows = probs.transpose(1, 2).reshape(m, n_heads * b, n_actions)
        if generators is None:  # one uniform per row against the cumulative probabilities: no host sync
            u = th.rand(m, n_heads * b, 1, device=rows.device, dtype=rows.dtype)
            drawn = (rows.cumsum(-1) < u).sum(-1).clamp_(max=n_actions - 1).view(m, n_heads, b)
        else:
            drawn = th.stack(
                [th.multinomial(rows[i], 1, True, generator=g).view(n_heads, b) for i, g in enumerate(generators)]
            )
        actions = drawn.transpose(1, 2)
        log_prob = log_probs.gather(-1, actions.unsqueeze(-1)).squeeze(-1).sum(dim=-1)
        return actions, values, log_prob

    def evaluate(self, obs: th.Tensor, actions: th.Tensor, entropy_grad: bool) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        """Values, log-probabilities and entropies ``(M, B)`` of taken actions: ``evaluate_actions`` per member.

        :param entropy_grad: keep the entropy's graph (some member's ``ent_coef`` is not 0)
        """
        out, values = self.forward(obs)
        if self.gaussian:
            scale = self._scale(out)
            log_prob = _gaussian_log_prob(actions, out, scale)
            with th.set_grad_enabled(entropy_grad and th.is_grad_enabled()):
                entropy = (0.5 + 0.5 * float(np.log(2 * np.pi)) + th.log(scale)).sum(dim=-1)
            return values, log_prob, entropy
        log_probs = self._log_probs(out)
        log_prob = log_probs.gather(-1, actions.long().view(*log_probs.shape[:3], 1)).squeeze(-1).sum(dim=-1)
        with th.set_grad_enabled(entropy_grad and th.is_grad_enabled()):
            clamped = th.clamp(log_probs, min=th.finfo(log_probs.dtype).min)
            entropy = -(clamped * log_probs.exp()).sum(-1).sum(-1)
        return values, log_prob, entropy


def _gaussian_log_prob(actions: th.Tensor, mean: th.Tensor, scale: th.Tensor) -> th.Tensor:
    """``Normal(mean, scale).log_prob(actions)`` summed over the action's dimensions, per member and row."""
    log_prob = -((actions - mean) ** 2) / (2 * scale**2) - scale.log() - _LOG_SQRT_2PI
    return log_prob.sum(dim=-1)


class BatchedAdam:
    """Adam over stacked weights, each member with its own learning rate, step count and moments (PyTorch's
    ``Adam`` formula, member by member).

    :param params: the stacked weights
    :param betas: Adam's betas (shared)
    :param eps: Adam's epsilon (shared)
    """

    def __init__(self, params: Sequence[th.Tensor], betas: tuple[float, float], eps: float) -> None:
        self.params = list(params)
        self.betas, self.eps = betas, eps
        m = self.params[0].shape[0]
        device = self.params[0].device
        self.exp_avg = [th.zeros_like(p) for p in self.params]
        self.exp_avg_sq = [th.zeros_like(p) for p in self.params]
        self.steps = th.zeros(m, dtype=th.float32, device=device)

    def load(self, optimizers: Sequence[th.optim.Optimizer]) -> None:
        """Take each member's moments and step count from its own ``Adam`` (zeros where it has not stepped)."""
        with th.no_grad():
            for i, opt in enumerate(optimizers):
                params = opt.param_groups[0]["params"]
                for k, p in enumerate(params):
                    state = opt.state.get(p)
                    if state:
                        self.exp_avg[k][i].copy_(state["exp_avg"])
                        self.exp_avg_sq[k][i].copy_(state["exp_avg_sq"])
                        self.steps[i] = float(state["step"])

    @th.no_grad()
    def store(self, optimizers: Sequence[th.optim.Optimizer]) -> None:
        """Write each member's moments and step count into its own ``Adam``, as its ``step()`` would leave them."""
        steps = self.steps.tolist()
        for i, opt in enumerate(optimizers):
            for k, p in enumerate(opt.param_groups[0]["params"]):
                state = opt.state[p]
                if "exp_avg" not in state:
                    state["step"] = th.zeros((), dtype=th.float32, device=p.device)
                    state["exp_avg"] = th.zeros_like(p)
                    state["exp_avg_sq"] = th.zeros_like(p)
                state["exp_avg"].copy_(self.exp_avg[k][i])
                state["exp_avg_sq"].copy_(self.exp_avg_sq[k][i])
                state["step"].fill_(steps[i])

    @th.no_grad()
    def step(self, grads: Sequence[th.Tensor], lr: th.Tensor, active: th.Tensor | None = None) -> None:
        """One Adam step of every member with ``grads`` (``lr``: ``(M,)``); members not ``active`` are left as
        they were. Device operations only (no host synchronisation), so a CUDA graph can hold it."""
        beta1, beta2 = self.betas
        steps = self.steps + 1 if active is None else self.steps + active.float()
        bias1 = 1 - beta1**steps
        bias2_sqrt = (1 - beta2**steps).sqrt()
        step_size = lr / bias1
        for p, g, m, v in zip(self.params, grads, self.exp_avg, self.exp_avg_sq):
            shape = (-1,) + (1,) * (p.dim() - 1)
            new_m = m.lerp(g, 1 - beta1)
            new_v = v * beta2 + (1 - beta2) * g * g
            denom = (new_v.sqrt() / bias2_sqrt.view(shape)).add_(self.eps)
            update = new_m / denom * step_size.view(shape)
            if active is not None:
                keep = active.view(shape)
                new_m, new_v, update = th.where(keep, new_m, m), th.where(keep, new_v, v), update * keep
            m.copy_(new_m)
            v.copy_(new_v)
            p.sub_(update)
        self.steps.copy_(steps)


@th.no_grad()
def clip_grad_norms(grads: Sequence[th.Tensor], max_norm: th.Tensor) -> None:
    """``clip_grad_norm_`` of each member's gradients on its own, in place (``max_norm``: ``(M,)``)."""
    norms = th.stack([g.flatten(1).norm(dim=1) for g in grads], dim=1)  # (M, tensors)
    coef = th.clamp(max_norm / (norms.norm(dim=1) + 1e-6), max=1.0)
    for g in grads:
        g.mul_(coef.view((-1,) + (1,) * (g.dim() - 1)))


class BatchedUpdate:
    """The batched PPO update of one set of members (``LeanPPO.train`` for each, minibatch for minibatch): its
    inputs copied into fixed buffers, so that on CUDA the whole update (every epoch's shuffle, every minibatch's
    forward, backward, clipping and Adam step) is one captured CUDA graph, replayed each iteration without a kernel
    launch or host synchronisation of its own; on the CPU, or where capture fails (one warning), the same code runs
    eagerly.

    :param stack: the members' stacked weights, which it updates
    :param adam: their Adam state
    :param model: a member (the update's shape: epochs, minibatch, rollout, advantage normalisation, value clipping)
    :param key: ``(members, entropy with a graph, a target KL)``: what changes the captured code
    """

    def __init__(self, stack: StackedPolicies, adam: BatchedAdam, model: Any, key: tuple[int, bool, bool]) -> None:
        self.key = key
        self.stack, self.adam = stack, adam
        self.n_epochs, self.batch = model.n_epochs, model.batch_size
        self.size = model.n_steps * model.n_envs
        self.normalize_advantage = model.normalize_advantage
        self.clip_vf_set = model.clip_range_vf is not None
        self.device = stack.params[0].device
        m = key[0]
        self.members, self.entropy_grad, self.has_kl = key
        self.data: list[th.Tensor] | None = None
        self.order = th.zeros(self.n_epochs, m * self.size, dtype=th.long, device=self.device)
        self.offsets = (th.arange(m) * self.size).view(1, m, 1).numpy()
        self.hyper = {
            k: th.zeros(m, device=self.device) for k in ("lr", "clip", "clip_vf", "ent", "vf", "max_norm", "kl_limit")
        }
        self.sums = th.zeros(m, 5, dtype=th.float64, device=self.device)
        self.kl_sum = th.zeros(m, dtype=th.float64, device=self.device)
        self.kl_n = th.zeros(m, dtype=th.float64, device=self.device)
        self.epochs = th.zeros(m, dtype=th.float64, device=self.device)
        self.loss = th.zeros(m, device=self.device)
        self.graph: Any = None
        self.capture = self.device.type == "cuda"

    def __call__(
        self, data: list[th.Tensor], orders: np.ndarray, hyper: dict[str, list[float]]
    ) -> tuple[list[list[float]], list[float], list[int], list[float]]:
        """Run the update on the members' rollouts (observations, actions, values, log-probabilities, advantages,
        returns, each ``(M, size, ...)`` in SB3's flattened order) with the minibatch orders ``(epochs, M, size)``;
        ``(per member: mean policy loss, clip fraction, value loss, entropy loss; approx KL; epochs run; last loss)``."""
        with th.no_grad():
            stacked = [d.reshape(self.members * self.size, *d.shape[2:]) for d in data]
            if self.data is None:
                self.data = [d.clone() for d in stacked]
            else:
                th._foreach_copy_(self.data, stacked)
            self.order.copy_(th.from_numpy((orders + self.offsets).reshape(self.n_epochs, -1)))
            for k, values in hyper.items():
                self.hyper[k].copy_(th.tensor(values, dtype=th.float32))
        if self.capture and self.graph is None:
            self.graph = self._capture()
        if self.graph is not None:
            self.graph.replay()
        else:
            self._run()
        sums = self.sums.tolist()
        means = [[s[k] / max(s[4], 1.0) for k in range(4)] for s in sums]
        kl = (self.kl_sum / self.kl_n.clamp(min=1)).tolist()
        return means, kl, [int(e) for e in self.epochs.tolist()], self.loss.tolist()

    def _capture(self) -> Any:
        """Capture :meth:`_run` in a CUDA graph (after a warm-up run on a side stream, which is also this
        iteration's update); None, with one warning, where capture fails."""
        import warnings

        saved = [p.detach().clone() for p in self.stack.params]
        saved_adam = [t.clone() for t in (*self.adam.exp_avg, *self.adam.exp_avg_sq, self.adam.steps)]
        try:
            side = th.cuda.Stream()
            side.wait_stream(th.cuda.current_stream())
            with th.cuda.stream(side):
                self._run()
            th.cuda.current_stream().wait_stream(side)
            graph = th.cuda.CUDAGraph()
            with th.cuda.graph(graph):
                self._run()
        except Exception as exc:  # capture is an optimisation: the same update runs eagerly
            warnings.warn(
                f"batched learner: CUDA graph capture failed ({type(exc).__name__}: {exc}); the update runs eagerly",
                stacklevel=3,
            )
            self.capture = False
            graph = None
        # the warm-up and the capture ran the update: start this iteration's from the weights it had
        with th.no_grad():
            th._foreach_copy_([p.data for p in self.stack.params], saved)
            th._foreach_copy_([*self.adam.exp_avg, *self.adam.exp_avg_sq, self.adam.steps], saved_adam)
        return graph

    def _run(self) -> None:
        """The update itself, device operations only."""
        assert self.data is not None
        params, hyper, m, size, batch = self.stack.params, self.hyper, self.members, self.size, self.batch
        clip, clip_vf = hyper["clip"].unsqueeze(1), hyper["clip_vf"].unsqueeze(1) if self.clip_vf_set else None
        self.sums.zero_()
        self.kl_sum.zero_()
        self.kl_n.zero_()
        self.epochs.zero_()
        active = th.ones(m, dtype=th.bool, device=self.device) if self.has_kl else None
        ones = th.ones(m, 1, dtype=th.float64, device=self.device)
        for epoch in range(self.n_epochs):
            shuffled = [d.index_select(0, self.order[epoch]).view(m, size, *d.shape[1:]) for d in self.data]
            epoch_kl = th.zeros(m, dtype=th.float64, device=self.device)
            epoch_n = th.zeros(m, dtype=th.float64, device=self.device)
            ran = ones.squeeze(1) if active is None else active.double()
            for start in range(0, size, batch):
                mb = [s[:, start : start + batch] for s in shuffled]
                loss, stats, approx_kl = self._loss(mb, clip, clip_vf)
                with th.no_grad():
                    weight = ones if active is None else active.double().unsqueeze(1)
                    self.sums.add_(th.cat((stats.double(), ones), dim=1) * weight)
                    epoch_kl.add_(approx_kl.double() * weight.squeeze(1))
                    epoch_n.add_(weight.squeeze(1))
                    step_mask = active
                    if active is not None:
                        step_mask = active & (approx_kl <= hyper["kl_limit"])
                        active = step_mask
                    self.loss.copy_(loss.detach())
                grads = th.autograd.grad(loss.sum(), params)
                clip_grad_norms(grads, hyper["max_norm"])
                self.adam.step(grads, hyper["lr"], step_mask)
            with th.no_grad():
                moved = epoch_n > 0
                self.kl_sum.copy_(th.where(moved, epoch_kl, self.kl_sum))
                self.kl_n.copy_(th.where(moved, epoch_n, self.kl_n))
                self.epochs.add_(ran)

    def _loss(self, mb: list[th.Tensor], clip: th.Tensor, clip_vf: th.Tensor | None) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        """Every member's minibatch loss ``(M,)``, its logged terms ``(M, 4)`` and approximate KL ``(M,)``:
        ``LeanPPO._loss`` per member."""
        observations, actions, old_values, old_log_prob, advantages, returns = mb
        values, log_prob, entropy = self.stack.evaluate(observations, actions, self.entropy_grad)
        if self.normalize_advantage and advantages.shape[1] > 1:
            advantages = (advantages - advantages.mean(dim=1, keepdim=True)) / (advantages.std(dim=1, keepdim=True) + 1e-8)
        ratio = th.exp(log_prob - old_log_prob)
        policy_loss_1 = advantages * ratio
        policy_loss_2 = advantages * th.clamp(ratio, 1 - clip, 1 + clip)
        policy_loss = -th.min(policy_loss_1, policy_loss_2).mean(dim=1)
        values_pred = values if clip_vf is None else old_values + th.clamp(values - old_values, -clip_vf, clip_vf)
        value_loss = ((returns - values_pred) ** 2).mean(dim=1)
        entropy_loss = -entropy.mean(dim=1)
        loss = policy_loss + self.hyper["ent"] * entropy_loss + self.hyper["vf"] * value_loss
        with th.no_grad():
            clip_fraction = ((ratio - 1).abs() > clip).float().mean(dim=1)
            stats = th.stack((policy_loss, clip_fraction, value_loss, entropy_loss), dim=1)
            log_ratio = log_prob - old_log_prob
            approx_kl = ((th.exp(log_ratio) - 1) - log_ratio).mean(dim=1)
        return loss, stats, approx_kl
