"""SB3's PPO with the same update and rollout, computed with less overhead around the arithmetic.

A profile of a ``cpu``-preset member (one thread, [128, 128] actor and critic, 1,024-sample minibatches) found most
of an update's time outside the matrix products: a fancy-indexed copy and a NumPy-to-torch copy of every array for
every minibatch, four ``torch.distributions.Categorical`` objects per forward pass, Adam's and gradient clipping's
per-tensor loops, a ``.item()`` per logged value per minibatch; and in the rollout, a Python loop over every env at
every step to find the truncated episodes. :class:`LeanPPO` keeps SB3's algorithm, API, saving and callbacks and
computes the same numbers:

- each epoch draws SB3's permutation of the rollout (the same ``np.random.permutation`` call) and gathers every array
  once (``index_select``, a quarter of the time of fancy indexing); the minibatches are then contiguous views;
- categorical heads of equal size are evaluated as one ``(batch, heads, actions)`` tensor with the operations of
  ``Categorical`` (normalise by ``logsumexp``, ``gather``, ``softmax``), and sampled with one ``multinomial`` call
  over every head's rows, which draws what ``Categorical.sample``'s call per head draws;
- a diagonal Gaussian (SB3's continuous actions) is sampled and scored with ``Normal``'s own operations, in SB3's
  order, without building a ``Normal`` (and its argument checks) per forward pass;
- gradient clipping takes PyTorch's ``foreach`` path (one kernel over all the parameters);
- the update's logged means are accumulated as tensors and read once per update;
- the rollout looks only at the envs whose episode ended.

Two more paths compute the same functions to within float rounding (``exact = False``, the default): PyTorch's CPU
``tanh`` is several times slower than its ``sigmoid``, so the MLPs' ``Tanh`` layers compute ``2 σ(2x) − 1`` (at most
2e-7 from ``tanh``; the saved policy still says ``nn.Tanh`` and loads anywhere; a policy whose rollout is only a few
rows, as MuJoCo's 8 envs, keeps ``tanh`` on inputs too small for the sigmoid form's extra calls to pay), Adam takes
PyTorch's fused kernel (1e-7 from the per-tensor loop), and the probabilities of the normalised log-probabilities are
their ``exp`` rather than their ``softmax`` (the CPU softmax over a short last dimension is about 20 times slower; the
entropy term of a phase with a nonzero ``ent_coef`` took a sixth of its update).

``tests/test_lean.py`` checks that with ``exact = True`` a run trains to the same bits as SB3's ``PPO`` and that
the default stays within float tolerance of it. Other action spaces (Discrete, MultiBinary, squashed or gSDE
Gaussians) and policies other than SB3's actor-critic MLP fall back to SB3's own code for the step they do not
cover.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3 import PPO
from stable_baselines3.common.utils import explained_variance, obs_as_tensor

from mission_gym.ppo.entropy import LeanEntropy
from mission_gym.ppo.maths import ActionHeads, LossInputs, UpdateRecord, ppo_loss

_ROLLOUT_ARRAYS = ("observations", "actions", "values", "log_probs", "advantages", "returns")


class _SigmoidTanh(th.autograd.Function):
    """``tanh(x)`` as ``2 σ(2x) − 1``; its gradient from the output, as ``tanh``'s own."""

    @staticmethod
    def forward(ctx: Any, x: th.Tensor) -> th.Tensor:
        y = th.sigmoid(x * 2.0).mul_(2.0).sub_(1.0)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx: Any, grad: th.Tensor) -> th.Tensor:
        (y,) = ctx.saved_tensors
        return th.ops.aten.tanh_backward(grad, y)


# Below this many elements PyTorch's own tanh is the faster: one call of ~4 µs against the sigmoid form's four (~15
# µs), while per element tanh costs about 4x the sigmoid form; the two meet near 64 x 128 (one AMD EPYC Zen 4 core).
_SIGMOID_TANH_MIN = 8192


class FastTanh(th.nn.Module):
    """A ``Tanh`` layer computed through PyTorch's (much faster on CPUs) sigmoid; no parameters.

    :param min_elements: inputs smaller than this take PyTorch's own ``tanh`` (0: every input the sigmoid form)
    """

    def __init__(self, min_elements: int = 0) -> None:
        super().__init__()
        self.min_elements = min_elements

    def forward(self, x: th.Tensor) -> th.Tensor:
        return _SigmoidTanh.apply(x) if x.numel() >= self.min_elements else th.tanh(x)


class LeanPPO(LeanEntropy, PPO):
    """SB3's ``PPO``, with a leaner update and rollout for SB3's actor-critic policies (see the module doc), and the
    graph-free entropy while ``ent_coef`` is 0 (:class:`~mission_gym.ppo.entropy.LeanEntropy`).

    Takes and saves exactly what ``PPO`` does; a model saved by it loads with ``PPO.load`` and vice versa.

    :cvar exact: compute every step to the bit as SB3 does (no sigmoid ``tanh``, no fused Adam)
    """

    exact = False
    #: compile each minibatch's loss with ``torch.compile`` (the trainer sets it from ``compile_update``)
    compile_update = False
    _compiled: Any = None
    #: a distillation's term (:class:`~mission_gym.ppo.distill.Distillation`): its teachers' log-probabilities of
    #: each rollout step join the update, and the loss adds the KL to them
    distillation: Any = None

    def _setup_model(self) -> None:
        super()._setup_model()
        self._heads = ActionHeads.of(self.policy, self.exact)
        if self._heads is not None and self.use_sde:
            self._heads = None
        if not self.exact:
            # a rollout of a few rows (MuJoCo's 8 envs) takes tanh on its small inputs; a wide one (Mission Gym's 128
            # envs) keeps the sigmoid form on every input, as its runs were measured
            width = getattr(getattr(self.policy, "mlp_extractor", None), "latent_dim_pi", 0)
            small = self.n_envs * width < _SIGMOID_TANH_MIN
            _swap_tanh(self.policy, _SIGMOID_TANH_MIN if small else 0)
            _channels_last(self.policy)

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), "_compiled", "distillation", "_heads"]

    # --- the update -------------------------------------------------------------------------------------------
    def train(self) -> None:
        """One PPO update over the rollout buffer: SB3's ``PPO.train``, minibatch for minibatch."""
        policy = self.policy
        policy.set_training_mode(True)
        for group in policy.optimizer.param_groups:  # a loaded optimizer state brings its own flags
            group["foreach"], group["fused"] = (True, None) if self.exact else (None, True)
        self._update_learning_rate(policy.optimizer)
        clip_range = self.clip_range(self._current_progress_remaining)  # type: ignore[operator]
        clip_range_vf = None
        if self.clip_range_vf is not None:
            clip_range_vf = self.clip_range_vf(self._current_progress_remaining)  # type: ignore[operator]
        data = self._flat_rollout()
        teacher_all = self.distillation.flat_targets(self.device) if self.distillation is not None else None
        kl_coef = self.distillation.coef(self.num_timesteps) if teacher_all is not None else 0.0
        size = data[1].shape[0]
        # policy loss, clip fraction, value loss, entropy loss, [KL to the teacher,] minibatches
        sums = th.zeros(5 + (teacher_all is not None), dtype=th.float64, device=self.device)
        params = [p for p in policy.parameters()]
        continue_training = True
        approx_kl = th.zeros((), dtype=th.float64, device=self.device)
        loss = th.zeros((), device=self.device)
        one = th.ones((), device=self.device)
        loss_fn = self._compiled_loss()
        for epoch in range(self.n_epochs):
            # SB3's RolloutBuffer.get draws the same permutation
            order = th.from_numpy(np.random.permutation(size)).to(self.device)
            shuffled = [_take(t, order) for t in data]
            teacher = teacher_all.index_select(0, order) if teacher_all is not None else None
            kl_sum, kl_n = th.zeros((), dtype=th.float64, device=self.device), 0
            for start in range(0, size, self.batch_size):
                end = start + self.batch_size
                batch = [_rows(t, start, end) for t in shuffled]
                mb_teacher = teacher[start:end] if teacher is not None else None
                loss, stats, approx_kl_div, loss_fn = self._minibatch(loss_fn, batch, (clip_range, clip_range_vf),
                                                                      mb_teacher, kl_coef)  # fmt: skip
                with th.no_grad():
                    sums += th.cat((stats, one.view(1))).double()
                    kl_sum += approx_kl_div
                    kl_n += 1
                if self.target_kl is not None and approx_kl_div.item() > 1.5 * self.target_kl:
                    continue_training = False
                    if self.verbose >= 1:
                        print(f"Early stopping at step {epoch} due to reaching max kl: {approx_kl_div.item():.2f}")
                    break
                policy.optimizer.zero_grad()
                loss.backward()
                th.nn.utils.clip_grad_norm_(params, self.max_grad_norm, foreach=True)
                policy.optimizer.step()
            approx_kl = kl_sum / max(kl_n, 1)
            self._n_updates += 1
            if not continue_training:
                break
        buffer = self.rollout_buffer
        mean = (sums[:-1] / sums[-1]).tolist()
        UpdateRecord(
            policy_loss=mean[0],
            clip_fraction=mean[1],
            value_loss=mean[2],
            entropy_loss=mean[3],
            approx_kl=approx_kl.item(),
            loss=loss.item(),
            explained_variance=float(explained_variance(buffer.values.flatten(), buffer.returns.flatten())),
            n_updates=self._n_updates,
            clip_range=clip_range,
            clip_range_vf=clip_range_vf,
            std=th.exp(policy.log_std).mean().item() if hasattr(policy, "log_std") else None,
            distill_kl=mean[4] if teacher_all is not None else None,
            distill_coef=kl_coef if teacher_all is not None else None,
        ).write(self.logger)

    def _compiled_loss(self) -> Any:
        """The minibatch loss, through ``torch.compile`` when ``compile_update`` asks for it."""
        if not self.compile_update:
            return self._loss
        if self._compiled is None:
            self._compiled = th.compile(self._loss)
        return self._compiled

    def _minibatch(
        self, loss_fn: Any, batch: list[th.Tensor], clips: tuple[float, float | None], teacher: Any, kl_coef: float
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor, Any]:
        """One minibatch's loss (and the loss function for the next: the eager one once compiling failed)."""
        try:
            return (*loss_fn(*batch, *clips, teacher, kl_coef), loss_fn)
        except Exception as exc:
            if loss_fn is self._loss:
                raise
            # torch.compile's CPU backend needs a C++ compiler; without one (or on any failure to compile) the update
            # goes on eager, the same maths to float rounding
            warnings.warn(f"compile_update: torch.compile failed ({type(exc).__name__}); the update runs eager", stacklevel=3)
            self.compile_update, self._compiled = False, None
            eager: Any = self._loss
            return (*eager(*batch, *clips, teacher, kl_coef), eager)

    def _loss(
        self,
        observations: th.Tensor,
        actions: th.Tensor,
        old_values: th.Tensor,
        old_log_prob: th.Tensor,
        advantages: th.Tensor,
        returns: th.Tensor,
        clip_range: float,
        clip_range_vf: float | None,
        teacher_log_probs: th.Tensor | None = None,
        kl_coef: float = 0.0,
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        """One minibatch of ``PPO.train``: :func:`~mission_gym.ppo.maths.ppo_loss` of the policy's evaluation of the
        taken actions (with ``teacher_log_probs``, a distillation's KL term too)."""
        values, log_prob, entropy, student = self._evaluate(observations, actions)
        if teacher_log_probs is not None and student is None:
            raise ValueError("distillation needs categorical action heads (Mission Gym's)")
        inputs = LossInputs(log_prob, values.flatten(), entropy, old_log_prob, old_values, advantages, returns,
                            student if teacher_log_probs is not None else None, teacher_log_probs)  # fmt: skip
        return ppo_loss(inputs, clip_range, clip_range_vf, self.ent_coef, self.vf_coef, self.normalize_advantage, kl_coef)

    def _flat_rollout(self) -> list[Any]:
        """The rollout's arrays flattened to ``(n_steps * n_envs, ...)`` as ``RolloutBuffer.get`` leaves them, as
        tensors sharing their memory (actions as float32, as ``RolloutBuffer._get_samples`` gives them); a Dict
        observation as a dict of them, as ``DictRolloutBuffer`` keeps it."""
        buffer = self.rollout_buffer
        if not buffer.generator_ready:
            for name in _ROLLOUT_ARRAYS:
                value = buffer.__dict__[name]
                if isinstance(value, dict):
                    buffer.__dict__[name] = {key: buffer.swap_and_flatten(v) for key, v in value.items()}
                else:
                    buffer.__dict__[name] = buffer.swap_and_flatten(value)
            buffer.generator_ready = True
        out: list[Any] = []
        for name in _ROLLOUT_ARRAYS:
            array = buffer.__dict__[name]
            if isinstance(array, dict):
                out.append({key: th.as_tensor(v, device=self.device) for key, v in array.items()})
                continue
            if name == "actions":
                array = array.astype(np.float32, copy=False)
            elif name != "observations":
                array = array.reshape(-1)
            out.append(th.as_tensor(array, device=self.device))
        return out

    def _forward(self, obs: th.Tensor) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        """The action net's output, its distribution (:meth:`ActionHeads.distribution`) and the values."""
        assert self._heads is not None
        policy = self.policy
        latent_pi, latent_vf = policy.mlp_extractor(policy.extract_features(obs))
        out = policy.action_net(latent_pi)
        dist = self._heads.distribution(out, getattr(policy, "log_std", None))
        return out, dist, policy.value_net(latent_vf)

    def _evaluate(self, obs: th.Tensor, actions: th.Tensor) -> tuple[th.Tensor, th.Tensor, th.Tensor | None, th.Tensor | None]:
        """``policy.evaluate_actions`` through the one scoring function (SB3's own for a policy it does not cover),
        and the heads' normalised log-probabilities (None for a Gaussian or an uncovered policy)."""
        heads = self._heads
        if heads is None:
            if isinstance(self.action_space, spaces.Discrete):
                actions = actions.long().flatten()
            return (*self.policy.evaluate_actions(obs, actions), None)
        out, dist, values = self._forward(obs)
        _, log_prob = heads.sample_or_score(out, dist, actions)
        entropy = heads.entropy(dist, grad=float(self.ent_coef) != 0.0)
        return values, log_prob, entropy, None if heads.gaussian else dist

    # --- the rollout --------------------------------------------------------------------------------------------
    def collect_rollouts(self, env: Any, callback: Any, rollout_buffer: Any, n_rollout_steps: int) -> bool:
        """SB3's ``OnPolicyAlgorithm.collect_rollouts``, step for step; the policy's forward pass without
        distribution objects, and only the envs whose episode ended looked at."""
        assert self._last_obs is not None, "No previous observation was provided"
        self.policy.set_training_mode(False)
        n_steps = 0
        rollout_buffer.reset()
        if self.use_sde:
            self.policy.reset_noise(env.num_envs)
        callback.on_rollout_start()
        while n_steps < n_rollout_steps:
            if self.use_sde and self.sde_sample_freq > 0 and n_steps % self.sde_sample_freq == 0:
                self.policy.reset_noise(env.num_envs)
            with th.no_grad():
                action_tensor, values, log_probs = self._act(obs_as_tensor(self._last_obs, self.device))
            actions = action_tensor.cpu().numpy()
            clipped_actions = self._clip_actions(actions)
            new_obs, rewards, dones, infos = env.step(clipped_actions)
            self.num_timesteps += env.num_envs
            callback.update_locals(locals())
            if not callback.on_step():
                return False
            self._update_info_buffer(infos, dones)
            n_steps += 1
            if isinstance(self.action_space, spaces.Discrete):
                actions = actions.reshape(-1, 1)
            self._bootstrap_truncated(rewards, dones, infos)
            rollout_buffer.add(self._last_obs, actions, rewards, self._last_episode_starts, values, log_probs)
            self._last_obs = new_obs
            self._last_episode_starts = dones
        with th.no_grad():
            values = self.policy.predict_values(obs_as_tensor(new_obs, self.device))
        rollout_buffer.compute_returns_and_advantage(last_values=values, dones=dones)
        callback.update_locals(locals())
        callback.on_rollout_end()
        return True

    def _clip_actions(self, actions: np.ndarray) -> np.ndarray:
        """The actions the env takes: a ``Box``'s scaled back (squashed) or clipped to its bounds, as SB3 does."""
        if not isinstance(self.action_space, spaces.Box):
            return actions
        if self.policy.squash_output:
            return self.policy.unscale_action(actions)
        return np.clip(actions, self.action_space.low, self.action_space.high)

    def _bootstrap_truncated(self, rewards: np.ndarray, dones: np.ndarray, infos: Any) -> None:
        """Add ``gamma`` times the value of each truncated episode's last observation to its reward, as SB3 does
        (only the envs whose episode ended are looked at)."""
        for idx in np.flatnonzero(dones):
            if infos[idx].get("terminal_observation") is not None and infos[idx].get("TimeLimit.truncated", False):
                terminal_obs = self.policy.obs_to_tensor(infos[idx]["terminal_observation"])[0]
                with th.no_grad():
                    terminal_value = self.policy.predict_values(terminal_obs)[0]
                rewards[idx] += self.gamma * terminal_value

    def _act(self, obs: Any) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        """``policy(obs)``: sampled actions, values and the actions' log-probabilities."""
        if self._heads is None:
            return self.policy(obs)
        out, dist, values = self._forward(obs)
        actions, log_prob = self._heads.sample_or_score(out, dist)
        return actions.reshape((-1, *self.action_space.shape)), values, log_prob  # type: ignore[misc]


def _take(t: Any, order: th.Tensor) -> Any:
    """The rows of a tensor (or of each tensor of a Dict observation) in ``order``."""
    if isinstance(t, dict):
        return {key: v.index_select(0, order) for key, v in t.items()}
    return t.index_select(0, order)


def _rows(t: Any, start: int, end: int) -> Any:
    """Rows ``start:end`` of a tensor (or of each tensor of a Dict observation), as views."""
    if isinstance(t, dict):
        return {key: v[start:end] for key, v in t.items()}
    return t[start:end]


def _channels_last(policy: Any) -> None:
    """The policy's convolutions (a CNN's, an image key's of a Dict) in channels-last memory, their inputs made so:
    oneDNN's CPU kernels take NHWC, and a NatureCNN's update over 256 stacked 84x84 frames took 0.7x the time on one
    AMD EPYC Zen 4 core (docs/experiments.md, "Pixels on a CPU"). The weights' values, and what is saved, are
    unchanged."""
    convs = [m for m in policy.modules() if isinstance(m, th.nn.Conv2d)]
    for conv in convs:
        conv.to(memory_format=th.channels_last)  # type: ignore[call-overload]
        conv.register_forward_pre_hook(_nhwc)


def _nhwc(_module: Any, inputs: tuple[th.Tensor, ...]) -> tuple[th.Tensor, ...]:
    return tuple(x.contiguous(memory_format=th.channels_last) if x.dim() == 4 else x for x in inputs)


def _swap_tanh(policy: Any, min_elements: int) -> None:
    """Every ``nn.Tanh`` of the policy's networks computed by :class:`FastTanh` (the module tree only: what is saved,
    the policy's arguments and weights, is unchanged)."""
    for module in list(policy.modules()):
        for name, child in module.named_children():
            if type(child) is th.nn.Tanh:
                setattr(module, name, FastTanh(min_elements))
