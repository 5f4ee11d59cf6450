"""The batched PPO update: every member's minibatch step at once (:class:`BatchedUpdate`, its loss
:func:`~mission_gym.ppo.maths.ppo_loss` over the member axis), each member's gradients clipped on their own
(:func:`clip_grad_norms`) and Adam over the stacked weights (:class:`BatchedAdam`), each member with its own learning
rate, clip range, coefficients and moments; on CUDA the whole update is one captured graph.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch as th

from mission_gym.ppo.batched.stack import StackedPolicies, capture_graph
from mission_gym.ppo.maths import LossInputs, ppo_loss


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
    :param key: ``(members, entropy with a graph, a target KL, a distillation's KL term)``: what changes the captured
        code
    """

    def __init__(self, stack: StackedPolicies, adam: BatchedAdam, model: Any, key: tuple[int, bool, bool, bool]) -> None:
        self.key = key
        self.stack, self.adam = stack, adam
        self.n_epochs, self.batch = model.n_epochs, model.batch_size
        self.size = model.n_steps * model.n_envs
        self.normalize_advantage = model.normalize_advantage
        self.clip_vf_set = model.clip_range_vf is not None
        self.device = stack.params[0].device
        m = key[0]
        self.members, self.entropy_grad, self.has_kl, self.distill = key
        self.data: list[th.Tensor] | None = None
        self.order = th.zeros(self.n_epochs, m * self.size, dtype=th.long, device=self.device)
        self.offsets = (th.arange(m) * self.size).view(1, m, 1).numpy()
        self.hyper = {
            k: th.zeros(m, device=self.device) for k in ("lr", "clip", "clip_vf", "ent", "vf", "max_norm", "kl_limit", "kl")
        }
        self.sums = th.zeros(m, 5 + self.distill, dtype=th.float64, device=self.device)
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
        returns, and with a distillation the teachers' log-probabilities, each ``(M, size, ...)`` in SB3's flattened
        order) with the minibatch orders ``(epochs, M, size)``; ``(per member: mean policy loss, clip fraction, value
        loss, entropy loss[, KL to the teacher]; approx KL; epochs run; last loss)``."""
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
        means = [[s[k] / max(s[-1], 1.0) for k in range(len(s) - 1)] for s in sums]
        kl = (self.kl_sum / self.kl_n.clamp(min=1)).tolist()
        return means, kl, [int(e) for e in self.epochs.tolist()], self.loss.tolist()

    def _capture(self) -> Any:
        """Capture :meth:`_run` in a CUDA graph (after a warm-up run on a side stream, which is also this
        iteration's update); None, with one warning, where capture fails."""
        import warnings

        saved = [p.detach().clone() for p in self.stack.params]
        saved_adam = [t.clone() for t in (*self.adam.exp_avg, *self.adam.exp_avg_sq, self.adam.steps)]
        try:
            graph, _ = capture_graph(self._run)
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
        """Every member's minibatch loss ``(M,)``, its logged terms ``(M, 4)`` (``(M, 5)`` with a distillation's KL)
        and approximate KL ``(M,)``: :func:`~mission_gym.ppo.maths.ppo_loss` over the member axis."""
        observations, actions, old_values, old_log_prob, advantages, returns, *teacher = mb
        values, log_prob, entropy, dist = self.stack.evaluate(observations, actions, self.entropy_grad)
        inputs = LossInputs(log_prob, values, entropy, old_log_prob, old_values, advantages, returns,
                            dist if teacher else None, teacher[0] if teacher else None)  # fmt: skip
        hyper = self.hyper
        return ppo_loss(inputs, clip, clip_vf, hyper["ent"], hyper["vf"], self.normalize_advantage, hyper["kl"])
