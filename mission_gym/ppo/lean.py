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

import math
import warnings
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3 import PPO
from stable_baselines3.common.distributions import DiagGaussianDistribution, MultiCategoricalDistribution
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.utils import explained_variance, obs_as_tensor
from torch.nn import functional as F

from mission_gym.ppo.entropy import LeanEntropy, entropy_no_grad

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
    #: teachers of a distillation (:class:`~mission_gym.ppo.distill.Teachers`) and the KL coefficient by env step
    teachers: Any = None
    distill_coef: Any = None
    _teacher_logp: Any = None

    def _setup_model(self) -> None:
        super()._setup_model()
        self._heads = _equal_heads(self.policy)
        self._gaussian = _plain_gaussian(self.policy)
        if not self.exact:
            # a rollout of a few rows (MuJoCo's 8 envs) takes tanh on its small inputs; a wide one (Mission Gym's 128
            # envs) keeps the sigmoid form on every input, as its runs were measured
            width = getattr(getattr(self.policy, "mlp_extractor", None), "latent_dim_pi", 0)
            small = self.n_envs * width < _SIGMOID_TANH_MIN
            _swap_tanh(self.policy, _SIGMOID_TANH_MIN if small else 0)

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), "_compiled", "teachers", "distill_coef", "_teacher_logp"]

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
        kl_coef = float(self.distill_coef(self.num_timesteps)) if self._teacher_logp is not None else 0.0
        teacher_all = data.pop() if self._teacher_logp is not None else None
        distill_sum = th.zeros((), dtype=th.float64, device=self.device)
        size = data[0].shape[0]
        batch_size = self.batch_size
        # policy loss, clip fraction, value loss, entropy loss, minibatches
        sums = th.zeros(5, dtype=th.float64, device=self.device)
        params = [p for p in policy.parameters()]
        continue_training = True
        approx_kl = th.zeros((), dtype=th.float64, device=self.device)
        loss = th.zeros((), device=self.device)
        one = th.ones((), device=self.device)
        loss_fn = self._loss
        if self.compile_update:
            if self._compiled is None:
                self._compiled = th.compile(self._loss)
            loss_fn = self._compiled
        for epoch in range(self.n_epochs):
            # SB3's RolloutBuffer.get draws the same permutation
            order = th.from_numpy(np.random.permutation(size)).to(self.device)
            observations, actions, old_values, old_log_prob, advantages_all, returns = (t.index_select(0, order) for t in data)
            teacher = teacher_all.index_select(0, order) if teacher_all is not None else None
            kl_sum, kl_n = th.zeros((), dtype=th.float64, device=self.device), 0
            for start in range(0, size, batch_size):
                end = start + batch_size
                batch: tuple[Any, ...] = (
                    observations[start:end],
                    actions[start:end],
                    old_values[start:end],
                    old_log_prob[start:end],
                    advantages_all[start:end],
                    returns[start:end],
                    clip_range,
                    clip_range_vf,
                )
                if teacher is not None:
                    batch = (*batch, teacher[start:end], kl_coef)
                try:
                    loss, stats, approx_kl_div = loss_fn(*batch)
                except Exception as exc:
                    if loss_fn is self._loss:
                        raise
                    # torch.compile's CPU backend needs a C++ compiler; without one (or on any failure to
                    # compile) the update goes on eager, the same maths to float rounding
                    warnings.warn(
                        f"compile_update: torch.compile failed ({type(exc).__name__}); the update runs eager",
                        stacklevel=2,
                    )
                    self.compile_update, self._compiled, loss_fn = False, None, self._loss
                    loss, stats, approx_kl_div = loss_fn(*batch)
                with th.no_grad():
                    if teacher is not None:
                        distill_sum += stats[4].double()
                        stats = stats[:4]
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
        explained_var = explained_variance(buffer.values.flatten(), buffer.returns.flatten())
        mean = (sums[:4] / sums[4]).tolist()
        self.logger.record("train/entropy_loss", mean[3])
        self.logger.record("train/policy_gradient_loss", mean[0])
        self.logger.record("train/value_loss", mean[2])
        self.logger.record("train/approx_kl", approx_kl.item())
        self.logger.record("train/clip_fraction", mean[1])
        self.logger.record("train/loss", loss.item())
        self.logger.record("train/explained_variance", explained_var)
        if teacher_all is not None:
            self.logger.record("train/distill_kl", (distill_sum / sums[4]).item())
            self.logger.record("train/distill_coef", kl_coef)
        if hasattr(policy, "log_std"):
            self.logger.record("train/std", th.exp(policy.log_std).mean().item())
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/clip_range", clip_range)
        if clip_range_vf is not None:
            self.logger.record("train/clip_range_vf", clip_range_vf)

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
        """One minibatch of ``PPO.train``: the loss, its logged terms (policy loss, clip fraction, value loss,
        entropy loss, and with a teacher the mean KL to it) and the approximate KL divergence, in SB3's order of
        operations; with ``teacher_log_probs`` the loss adds ``kl_coef`` times the KL to them
        (:mod:`mission_gym.ppo.distill`)."""
        if isinstance(self.action_space, spaces.Discrete):
            actions = actions.long().flatten()
        student: list[th.Tensor] | None = [] if teacher_log_probs is not None else None
        values, log_prob, entropy = self._evaluate(observations, actions, student)
        values = values.flatten()
        if self.normalize_advantage and len(advantages) > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        ratio = th.exp(log_prob - old_log_prob)
        policy_loss_1 = advantages * ratio
        policy_loss_2 = advantages * th.clamp(ratio, 1 - clip_range, 1 + clip_range)
        policy_loss = -th.min(policy_loss_1, policy_loss_2).mean()
        if clip_range_vf is None:
            values_pred = values
        else:
            values_pred = old_values + th.clamp(values - old_values, -clip_range_vf, clip_range_vf)
        value_loss = F.mse_loss(returns, values_pred)
        entropy_loss = -th.mean(-log_prob) if entropy is None else -th.mean(entropy)
        loss = policy_loss + self.ent_coef * entropy_loss + self.vf_coef * value_loss
        distill = None
        if student:
            from mission_gym.ppo.distill import kl_to_teacher

            assert teacher_log_probs is not None
            distill = kl_to_teacher(student[0], teacher_log_probs).mean()
            if kl_coef:
                loss = loss + kl_coef * distill
        with th.no_grad():
            clip_fraction = th.mean((th.abs(ratio - 1) > clip_range).float())
            terms = (policy_loss, clip_fraction, value_loss, entropy_loss)
            stats = th.stack(terms if distill is None else (*terms, distill.detach()))
            log_ratio = log_prob - old_log_prob
            approx_kl_div = th.mean((th.exp(log_ratio) - 1) - log_ratio)
        return loss, stats, approx_kl_div

    def _flat_rollout(self) -> list[th.Tensor]:
        """The rollout's arrays flattened to ``(n_steps * n_envs, ...)`` as ``RolloutBuffer.get`` leaves them, as
        tensors sharing their memory (actions as float32, as ``RolloutBuffer._get_samples`` gives them)."""
        buffer = self.rollout_buffer
        if not buffer.generator_ready:
            for name in _ROLLOUT_ARRAYS:
                buffer.__dict__[name] = buffer.swap_and_flatten(buffer.__dict__[name])
            buffer.generator_ready = True
        out = []
        for name in _ROLLOUT_ARRAYS:
            array = buffer.__dict__[name]
            if name == "actions":
                array = array.astype(np.float32, copy=False)
            elif name != "observations":
                array = array.reshape(-1)
            out.append(th.as_tensor(array, device=self.device))
        if self._teacher_logp is not None:
            teacher = self._teacher_logp
            out.append(th.as_tensor(buffer.swap_and_flatten(teacher), device=self.device))
        return out

    def _evaluate(
        self, obs: th.Tensor, actions: th.Tensor, log_probs_out: list[th.Tensor] | None = None
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor | None]:
        """``policy.evaluate_actions``, with equal categorical heads as one tensor and a Gaussian's log-probability
        and entropy without a ``Normal`` object (``log_probs_out``: gets the heads' normalised log-probabilities,
        ``(batch, heads, actions)``, for a distillation)."""
        if log_probs_out is not None and self._heads is None:
            raise ValueError("distillation needs equal categorical action heads (Mission Gym's)")
        if self._gaussian:
            return self._evaluate_gaussian(obs, actions)
        if self._heads is None:
            return self.policy.evaluate_actions(obs, actions)
        policy = self.policy
        latent_pi, latent_vf = policy.mlp_extractor(policy.extract_features(obs))
        logits = policy.action_net(latent_pi)
        values = policy.value_net(latent_vf)
        n_heads, n_actions = self._heads
        logits = logits.view(-1, n_heads, n_actions)
        logits = logits - logits.logsumexp(dim=-1, keepdim=True)  # what Categorical(logits=...) keeps
        if log_probs_out is not None:
            log_probs_out.append(logits)
        log_prob = logits.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1).sum(dim=1)
        if float(self.ent_coef) == 0.0:  # only logged: no graph (see mission_gym.ppo.entropy)
            entropy = entropy_no_grad(logits).sum(dim=1)
        else:
            clamped = th.clamp(logits, min=th.finfo(logits.dtype).min)
            entropy = -(clamped * self._probs(logits)).sum(-1).sum(dim=1)
        return values, log_prob, entropy

    def _gaussian_params(self, obs: th.Tensor) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        """The Gaussian policy's mean and standard deviation (as ``DiagGaussianDistribution`` makes them) and the
        critic's latent."""
        policy = self.policy
        latent_pi, latent_vf = policy.mlp_extractor(policy.extract_features(obs))
        mean = policy.action_net(latent_pi)
        return mean, th.ones_like(mean) * policy.log_std.exp(), latent_vf

    def _evaluate_gaussian(self, obs: th.Tensor, actions: th.Tensor) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        """``evaluate_actions`` of a diagonal Gaussian policy: ``Normal.log_prob`` and ``Normal.entropy``'s
        operations in ``evaluate_actions``' order, without the distribution object and its argument checks (the
        entropy without a graph while ``ent_coef`` is 0, where its gradient is exact zeros)."""
        mean, scale, latent_vf = self._gaussian_params(obs)
        log_prob = _gaussian_log_prob(actions, mean, scale)
        values = self.policy.value_net(latent_vf)
        with th.set_grad_enabled(float(self.ent_coef) != 0.0):
            entropy = _gaussian_entropy(scale)
        return values, log_prob, entropy

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
        teachers = self.teachers if self.teachers is not None and self.distill_coef(self.num_timesteps) > 0 else None
        self._teacher_logp = None
        if teachers is not None:
            self._teacher_logp = np.zeros((n_rollout_steps, env.num_envs, *teachers.heads), dtype=np.float32)
            vecnorm = self.get_vec_normalize_env()
            core = env.unwrapped.core
        while n_steps < n_rollout_steps:
            if self.use_sde and self.sde_sample_freq > 0 and n_steps % self.sde_sample_freq == 0:
                self.policy.reset_noise(env.num_envs)
            if teachers is not None:  # each game's teacher's view of the observation the student acts on
                raw = vecnorm.get_original_obs() if vecnorm is not None else self._last_obs
                self._teacher_logp[n_steps] = teachers.log_probs(raw, teachers.of_games(core))
            with th.no_grad():
                obs_tensor = obs_as_tensor(self._last_obs, self.device)
                action_tensor, values, log_probs = self._act(obs_tensor)
            actions = action_tensor.cpu().numpy()
            clipped_actions = actions
            if isinstance(self.action_space, spaces.Box):
                if self.policy.squash_output:
                    clipped_actions = self.policy.unscale_action(clipped_actions)
                else:
                    clipped_actions = np.clip(actions, self.action_space.low, self.action_space.high)
            new_obs, rewards, dones, infos = env.step(clipped_actions)
            self.num_timesteps += env.num_envs
            callback.update_locals(locals())
            if not callback.on_step():
                return False
            self._update_info_buffer(infos, dones)
            n_steps += 1
            if isinstance(self.action_space, spaces.Discrete):
                actions = actions.reshape(-1, 1)
            for idx in np.flatnonzero(dones):  # bootstrap the value of a truncated episode, as SB3 does
                if infos[idx].get("terminal_observation") is not None and infos[idx].get("TimeLimit.truncated", False):
                    terminal_obs = self.policy.obs_to_tensor(infos[idx]["terminal_observation"])[0]
                    with th.no_grad():
                        terminal_value = self.policy.predict_values(terminal_obs)[0]
                    rewards[idx] += self.gamma * terminal_value
            rollout_buffer.add(self._last_obs, actions, rewards, self._last_episode_starts, values, log_probs)
            self._last_obs = new_obs
            self._last_episode_starts = dones
        with th.no_grad():
            values = self.policy.predict_values(obs_as_tensor(new_obs, self.device))
        rollout_buffer.compute_returns_and_advantage(last_values=values, dones=dones)
        callback.update_locals(locals())
        callback.on_rollout_end()
        return True

    def _act(self, obs: Any) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        """``policy(obs)``: sampled actions, values and the actions' log-probabilities."""
        if self._gaussian and not self.use_sde:
            mean, scale, latent_vf = self._gaussian_params(obs)
            values = self.policy.value_net(latent_vf)
            actions = mean + th.empty_like(mean).normal_() * scale  # Normal.rsample's draw
            log_prob = _gaussian_log_prob(actions, mean, scale)
            return actions.reshape((-1, *self.action_space.shape)), values, log_prob  # type: ignore[misc]
        if self._heads is None or self.use_sde:
            return self.policy(obs)
        policy = self.policy
        latent_pi, latent_vf = policy.mlp_extractor(policy.extract_features(obs))
        values = policy.value_net(latent_vf)
        n_heads, n_actions = self._heads
        logits = policy.action_net(latent_pi).view(-1, n_heads, n_actions)
        logits = logits - logits.logsumexp(dim=-1, keepdim=True)
        probs = self._probs(logits)
        # one multinomial per head, in head order, as Categorical.sample draws them: the heads' rows one after the
        # other in a single call draw the same numbers (on the CPU; tests/test_lean.py)
        rows = probs.transpose(0, 1).reshape(n_heads * probs.shape[0], n_actions)
        actions = th.multinomial(rows, 1, True).view(n_heads, -1).T
        log_prob = logits.gather(-1, actions.unsqueeze(-1)).squeeze(-1).sum(dim=1)
        return actions.reshape((-1, *self.action_space.shape)), values, log_prob  # type: ignore[misc]

    def _probs(self, log_probs: th.Tensor) -> th.Tensor:
        """The probabilities of normalised log-probabilities: ``softmax`` as ``Categorical`` takes it, or (not
        ``exact``) their ``exp``, the same values within float rounding: PyTorch's CPU softmax over a short last
        dimension took 1.1 ms for a 1,024 × 4 × 9 minibatch against 0.05 ms for ``exp``."""
        return F.softmax(log_probs, dim=-1) if self.exact else log_probs.exp()


_LOG_SQRT_2PI = math.log(math.sqrt(2 * math.pi))


def _gaussian_log_prob(actions: th.Tensor, mean: th.Tensor, scale: th.Tensor) -> th.Tensor:
    """``Normal(mean, scale).log_prob(actions)`` summed over the action's dimensions, as SB3 sums it."""
    log_prob = -((actions - mean) ** 2) / (2 * scale**2) - scale.log() - _LOG_SQRT_2PI
    return log_prob.sum(dim=1) if log_prob.dim() > 1 else log_prob.sum()


def _gaussian_entropy(scale: th.Tensor) -> th.Tensor:
    """``Normal(mean, scale).entropy()`` summed over the action's dimensions."""
    entropy = 0.5 + 0.5 * math.log(2 * math.pi) + th.log(scale)
    return entropy.sum(dim=1) if entropy.dim() > 1 else entropy.sum()


def _sb3_actor_critic(policy: Any) -> bool:
    """Whether the policy is SB3's actor-critic with its own ``forward`` and ``evaluate_actions`` and one features
    extractor: what the lean paths replace step for step."""
    cls = type(policy)
    return (
        isinstance(policy, ActorCriticPolicy)
        and cls.forward is ActorCriticPolicy.forward
        and cls.evaluate_actions is ActorCriticPolicy.evaluate_actions
        and policy.share_features_extractor
    )


def _plain_gaussian(policy: Any) -> bool:
    """Whether the policy is SB3's actor-critic over a plain diagonal Gaussian (no squashing, no gSDE), which the
    lean Gaussian paths cover."""
    return _sb3_actor_critic(policy) and type(policy.action_dist) is DiagGaussianDistribution


def _swap_tanh(policy: Any, min_elements: int) -> None:
    """Every ``nn.Tanh`` of the policy's networks computed by :class:`FastTanh` (the module tree only: what is saved,
    the policy's arguments and weights, is unchanged)."""
    for module in list(policy.modules()):
        for name, child in module.named_children():
            if type(child) is th.nn.Tanh:
                setattr(module, name, FastTanh(min_elements))


def _equal_heads(policy: Any) -> tuple[int, int] | None:
    """``(heads, actions per head)`` when the policy is SB3's actor-critic over categorical heads of one size, which
    the lean paths cover; None otherwise."""
    if not _sb3_actor_critic(policy):
        return None
    dist = policy.action_dist
    if not isinstance(dist, MultiCategoricalDistribution) or len(set(dist.action_dims)) != 1:
        return None
    return len(dist.action_dims), int(dist.action_dims[0])
