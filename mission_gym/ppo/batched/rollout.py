"""The batched learner's rollout: every member's steps stored at once on the learner's device (:class:`Storage`,
with SB3's GAE for all members), and each step's batched forward pass and draw (:class:`Act`; on CUDA one captured
graph)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces

from mission_gym.ppo.batched.stack import StackedPolicies, capture_graph


def action_shape(space: Any) -> tuple[int, ...]:
    """The shape of one env's action in the rollout storage (SB3's buffer's)."""
    if isinstance(space, spaces.Discrete):
        return (1,)
    return tuple(space.shape)


class Storage:
    """Every member's rollout, ``(steps, M, envs, ...)``: what the policy computed on the learner's device, what the
    envs returned in NumPy; returns and advantages by SB3's GAE for all members at once."""

    def __init__(
        self, m: int, n_steps: int, n_envs: int, obs_dim: int, action_shape: tuple[int, ...], device: th.device
    ) -> None:
        self.shape = (n_steps, m, n_envs)
        self.obs = th.zeros(*self.shape, obs_dim, device=device)
        self.actions = th.zeros(*self.shape, *action_shape, device=device)
        self.values = th.zeros(self.shape, device=device)
        self.log_probs = th.zeros(self.shape, device=device)
        self.rewards = np.zeros(self.shape, dtype=np.float32)
        self.starts = np.zeros(self.shape, dtype=np.float32)
        self.advantages = np.zeros(self.shape, dtype=np.float32)
        self.returns = np.zeros(self.shape, dtype=np.float32)
        self.device = device

    def take(self, other: Storage, rows: list[int]) -> None:
        """This storage's members are ``rows`` of ``other``'s, their rollout copied over."""
        index = th.tensor(rows, device=self.device)
        for name in ("obs", "actions", "values", "log_probs"):
            getattr(self, name).copy_(getattr(other, name).index_select(1, index))
        for name in ("rewards", "starts", "advantages", "returns", "_values"):
            setattr(self, name, getattr(other, name)[:, rows].copy())

    def compute_returns(self, last_values: np.ndarray, dones: np.ndarray, models: Sequence[Any]) -> None:
        """``RolloutBuffer.compute_returns_and_advantage`` for every member (each with its gamma and lambda, in
        SB3's float32 order of operations)."""
        values = self.values.cpu().numpy()
        gamma = np.array([[m.gamma] for m in models], dtype=np.float32)
        gamma_lambda = np.array([[m.gamma * m.gae_lambda] for m in models], dtype=np.float32)
        last = np.zeros(self.shape[1:], dtype=np.float32)
        n_steps = self.shape[0]
        for step in reversed(range(n_steps)):
            if step == n_steps - 1:
                non_terminal = 1.0 - dones.astype(np.float32)
                next_values = last_values.astype(np.float32)
            else:
                non_terminal = 1.0 - self.starts[step + 1]
                next_values = values[step + 1]
            delta = self.rewards[step] + gamma * next_values * non_terminal - values[step]
            last = delta + gamma_lambda * non_terminal * last
            self.advantages[step] = last
        self.returns = self.advantages + values
        self._values = values

    def flat(self) -> list[th.Tensor]:
        """Observations, actions, values, log-probabilities, advantages and returns, each ``(M, envs * steps, ...)``
        in ``RolloutBuffer.swap_and_flatten``'s order (env-major), on the learner's device."""

        def flatten(x: th.Tensor) -> th.Tensor:
            steps, m, n = x.shape[:3]
            return x.permute(1, 2, 0, *range(3, x.dim())).reshape(m, n * steps, *x.shape[3:])

        adv = th.as_tensor(self.advantages, device=self.device)
        ret = th.as_tensor(self.returns, device=self.device)
        return [flatten(t) for t in (self.obs, self.actions, self.values, self.log_probs, adv, ret)]

    def explained_variance(self) -> list[float]:
        """SB3's ``explained_variance`` of each member's values against its returns."""
        out = []
        for i in range(self.shape[1]):
            y_pred, y_true = self._values[:, i].ravel(), self.returns[:, i].ravel()
            var_y = np.var(y_true)
            out.append(float("nan") if var_y == 0 else float(1 - np.var(y_true - y_pred) / var_y))
        return out


class Act:
    """The rollout's batched forward pass and draw, written into the storage. On CUDA the observations go through a
    pinned buffer and one captured graph (forward and draw) per step, with one copy back of the actions; on the CPU
    it is :meth:`StackedPolicies.act`, each member drawing from its own generator when given.

    :param stack: the members' stacked weights
    :param storage: where each step's observations, actions, values and log-probabilities go
    """

    def __init__(self, stack: StackedPolicies, storage: Storage) -> None:
        self.stack, self.storage = stack, storage
        self.device = stack.params[0].device
        self.graph: Any = None
        self.capture = self.device.type == "cuda"
        _, m, n_envs, obs_dim = storage.obs.shape
        width = storage.actions.shape[-1]
        if self.capture:
            self.host_obs = th.zeros(m, n_envs, obs_dim, dtype=th.float32).pin_memory()
            self.obs = th.zeros(m, n_envs, obs_dim, dtype=th.float32, device=self.device)
            self.host_actions = th.zeros(m, n_envs, width, dtype=th.float32).pin_memory()
            self.out: tuple[th.Tensor, th.Tensor, th.Tensor] | None = None

    def _forward(
        self, obs: th.Tensor, generators: Sequence[th.Generator] | None = None
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        with th.no_grad():
            actions, values, log_prob, _ = self.stack.act(obs, generators)
            return actions.float().reshape(*actions.shape[:2], -1), values, log_prob

    def __call__(self, obs: np.ndarray, generators: Sequence[th.Generator] | None, n: int) -> np.ndarray:
        """Each member's actions (NumPy, ``(M, envs, ...)`` as its env takes them) for its observations at step ``n``."""
        storage = self.storage
        if not self.capture:
            obs_t = th.as_tensor(obs, device=self.device)
            actions, values, log_prob = self._forward(obs_t, generators)
            storage.obs[n].copy_(obs_t)
            storage.actions[n].copy_(actions)
            storage.values[n].copy_(values)
            storage.log_probs[n].copy_(log_prob)
            out = actions.cpu().numpy()
        else:
            np.copyto(self.host_obs.numpy(), obs, casting="same_kind")
            self.obs.copy_(self.host_obs, non_blocking=True)
            if self.graph is None:
                self.out = self._capture()
            else:
                self.graph.replay()
            assert self.out is not None
            actions, values, log_prob = self.out
            storage.obs[n].copy_(self.obs)
            storage.actions[n].copy_(actions)
            storage.values[n].copy_(values)
            storage.log_probs[n].copy_(log_prob)
            self.host_actions.copy_(actions, non_blocking=True)
            th.cuda.current_stream().synchronize()
            out = self.host_actions.numpy()
        if not self.stack.heads.gaussian:
            return out.astype(np.int64)
        return out.copy()

    def _capture(self) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        """Capture the forward pass and draw in a CUDA graph and run it; where capture fails (one warning) this and
        every later step run eagerly."""
        import warnings

        try:
            graph, out = capture_graph(lambda: self._forward(self.obs))
            graph.replay()
            self.graph = graph
            return out
        except Exception as exc:
            warnings.warn(
                f"batched learner: CUDA graph capture of the rollout failed ({type(exc).__name__}: {exc}); it runs eagerly",
                stacklevel=3,
            )
            self.capture = False
            return self._forward(self.obs)
