"""The batched learner's loop: SB3's ``learn`` for every member of a batch, with one batched rollout and one batched
update per iteration (the stacked policies: :mod:`~mission_gym.ppo.batched.stack`; the update:
:mod:`~mission_gym.ppo.batched.update`).

Each member is an ordinary :class:`~mission_gym.ppo.lean.LeanPPO` model with its own session's callbacks; the loop
calls them as SB3's ``learn`` and ``collect_rollouts`` do (``on_rollout_start``, ``on_step`` with the step's
``locals``, ``on_rollout_end``, the logger's dump after each rollout), so checkpoints, evaluations, curricula and
stopping work member by member. The rollout is stored for all members at once, on the learner's device; Mission
Gym members' envs are stepped together (:class:`~mission_gym.vec.grouped.MemberEnvs`), other envs member by
member.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces

from mission_gym.ppo.batched.rollout import Act, Storage, action_shape
from mission_gym.ppo.batched.stack import StackedPolicies, batch_key
from mission_gym.ppo.batched.update import BatchedAdam, BatchedUpdate
from mission_gym.ppo.maths import UpdateRecord
from mission_gym.vec.grouped import MemberEnvs, covered


@dataclass
class Member:
    """A member of the batch: its model, its session's callback and the step count it trains to.

    :param model: the member's :class:`~mission_gym.ppo.lean.LeanPPO` (``_setup_learn`` called)
    :param callback: its callbacks (SB3's ``CallbackList``), ``on_training_start`` already called
    :param total: the env step it trains to
    :param torch_gen: its action draws' generator (:func:`~mission_gym.training.build.member_streams`)
    :param numpy_gen: its minibatch orders' generator
    """

    model: Any
    callback: Any
    total: int
    torch_gen: th.Generator
    numpy_gen: np.random.RandomState
    iteration: int = 0
    #: ``running``, ``finished`` (reached ``total``), ``stopped`` (a callback said so) or ``failed`` (see ``error``)
    status: str = "running"
    error: BaseException | None = None


class BatchEvaluator:
    """The in-training evaluations of a batch's members played at once: the first member whose evaluation falls due
    at a rollout's start has every due member's games (Mission Gym, the same settings) played together by
    :meth:`BatchedLearner.evaluate`; the others take theirs from here. Set :attr:`learner` once it is built."""

    def __init__(self) -> None:
        self.learner: BatchedLearner | None = None
        self.callbacks: list[Any] = []
        self.ready: dict[int, Any] = {}

    def register(self, callback: Any) -> None:
        """A member's evaluation callback (:class:`~mission_gym.training.callbacks.StepEvalCallback`)."""
        self.callbacks.append(callback)

    def __call__(self, callback: Any) -> Any:
        """The evaluation result of ``callback``'s model, or None where the batch cannot play it."""
        from mission_gym import ENV_ID
        from mission_gym.evaluation import EVAL_SEED_BASE, held_out_seeds

        learner = self.learner
        if learner is None or callback.env_id != ENV_ID:
            return None
        key = id(callback.model)
        if key in self.ready:
            return self.ready.pop(key)
        models = [m.model for m in learner.active]
        if callback.model not in models:
            return None
        game = (callback.env_id, callback.n_episodes, callback.env_kwargs)
        due = [c for c in self.callbacks if c.model in models and c.due and (c.env_id, c.n_episodes, c.env_kwargs) == game]
        rows = [models.index(c.model) for c in due]
        seeds = held_out_seeds(callback.n_episodes, EVAL_SEED_BASE)
        results = learner.evaluate(rows, callback.n_episodes, seeds, callback.env_kwargs)
        for c, result in zip(due, results):
            self.ready[id(c.model)] = result
        return self.ready.pop(key, None)


class BatchedLearner:
    """Train members together (see the module doc).

    :param members: the members, all with one :func:`~mission_gym.ppo.batched.stack.batch_key`
    :param threads: CPU threads for stepping the envs together
    :param streams: draw each member's actions from its own generator (its lone run's draws; on the CPU); else one
        draw for all (on CUDA always: inside the captured rollout graph)
    :param on_iteration: called after each iteration (a progress display)
    """

    def __init__(
        self, members: Sequence[Member], threads: int = 1, streams: bool = True, on_iteration: Callable[[], None] | None = None
    ) -> None:
        if len({batch_key(m.model) for m in members}) != 1:
            raise ValueError("members of one batch must share their spaces, rollout, minibatch, epochs and network")
        self.members = list(members)
        self.device = self.members[0].model.device
        self.threads = threads
        self.streams = streams and self.device.type != "cuda"
        self.on_iteration = on_iteration
        self.active: list[Member] = []
        self._stack(self.members)

    def _stack(self, members: list[Member], keep_rollout: bool = False) -> None:
        """Stack the weights, Adam state, rollout storage and envs of ``members`` (again when the set changes;
        ``keep_rollout``: their rows of the rollout just collected are kept for the update)."""
        rows = [self.active.index(m) for m in members] if keep_rollout else None
        old = getattr(self, "storage", None)
        self.active = members
        models = [m.model for m in members]
        first = models[0]
        self.stack = StackedPolicies([m.policy for m in models], self.device)
        group = first.policy.optimizer.param_groups[0]
        self.adam = BatchedAdam(self.stack.params, tuple(group["betas"]), group["eps"])
        self.adam.load([m.policy.optimizer for m in models])
        self.update: BatchedUpdate | None = None
        obs_dim = int(np.prod(first.observation_space.shape))
        self.storage = Storage(
            len(models), first.n_steps, first.n_envs, obs_dim, action_shape(first.action_space), self.device
        )
        if rows is not None and old is not None:
            self.storage.take(old, rows)
        self.act = Act(self.stack, self.storage)
        envs = [m.env for m in models]
        self.envs = MemberEnvs(envs, self.threads) if covered(envs) else None

    # --- SB3's learn loop, for every member ----------------------------------------------------------------------
    def learn(self) -> list[Member]:
        """Train every member to its ``total`` (or until a callback stops it or its own code fails); each member's
        ``status`` and ``error`` say how it ended. ``on_training_end`` is called for each."""
        while self._restack_running():
            self.collect_rollouts()
            if self._log_iteration():
                self.train()
                if self.on_iteration is not None:
                    self.on_iteration()
        for m in self.members:
            _guard(m, m.callback.on_training_end)
        return self.members

    def _restack_running(self) -> bool:
        """Mark the members that reached their target finished and stack the others; whether any remain."""
        for m in self.active:
            if m.status == "running" and m.model.num_timesteps >= m.total:
                m.status = "finished"
        running = [m for m in self.active if m.status == "running"]
        if running and running != self.active:
            self._stack(running)
        return bool(running)

    def _log_iteration(self) -> bool:
        """After a rollout, as SB3's ``learn``: each member still running counts the iteration, updates its progress
        and dumps its logs; a member that stopped in the rollout takes no update. Whether any member trains."""
        trained = [m for m in self.active if m.status == "running"]
        for m in trained:
            model = m.model
            m.iteration += 1
            model._update_current_progress_remaining(model.num_timesteps, m.total)
            _guard(m, model.dump_logs, m.iteration)
        if trained and trained != self.active:
            self._stack(trained, keep_rollout=True)
        return bool(trained)

    # --- the rollout -------------------------------------------------------------------------------------------
    def collect_rollouts(self) -> None:
        """One rollout of every active member: ``LeanPPO.collect_rollouts`` step for step, the policy's forward
        pass batched over the members."""
        models = [m.model for m in self.active]
        for m in self.active:
            m.model.policy.set_training_mode(False)
            _guard(m, m.callback.on_rollout_start)
        if self.envs is not None:
            self.envs.start_rollout([model._last_obs for model in models])
        self._dones: list[Any] = [model._last_episode_starts for model in models]
        # the truncated games' last observations (step, member, env, observation), their values taken at the
        # rollout's end in one pass: the policy does not change within a rollout, so they are the values SB3 takes at
        # each step, without a device round trip per step
        self._truncated: list[tuple[int, int, int, np.ndarray]] = []
        for n in range(models[0].n_steps):
            if not self._rollout_step(n):
                break
        self._end_rollout()

    def _rollout_step(self, n: int) -> bool:
        """Step ``n`` of every live member's rollout; False once no member is live."""
        members = self.active
        live = [i for i, m in enumerate(members) if m.status == "running"]
        if not live:
            return False
        obs = self.envs.obs if self.envs is not None else np.stack([m.model._last_obs for m in members])
        gens = [m.torch_gen for m in members] if self.streams else None
        actions = self.act(obs, gens, n)
        results = self._step_envs(members, actions, live)
        for i in live:
            if i in results:
                self._member_step(i, n, actions[i], results[i])
        return True

    def _member_step(self, i: int, n: int, actions: np.ndarray, result: tuple[Any, ...]) -> None:
        """A member's share of a step: its step count, its callbacks (a stop leaves the batch), its episode
        infos, truncated games to bootstrap, and what the rollout stores."""
        m = self.active[i]
        model = m.model
        new_obs, rewards, done, infos = result
        model.num_timesteps += model.n_envs
        m.callback.update_locals(_step_locals(m, n, actions, new_obs, rewards, done, infos, self.storage, i))
        if not _guard(m, m.callback.on_step):
            if m.status == "running":
                m.status = "stopped"
            if self.envs is not None:
                self.envs.leave(i)
            return
        ended_ids = np.flatnonzero(done)
        model._update_info_buffer([infos[k] for k in ended_ids], done[ended_ids])
        for k in ended_ids:  # bootstrap the value of a truncated episode, as SB3 does
            info = infos[k]
            if info.get("terminal_observation") is not None and info.get("TimeLimit.truncated", False):
                self._truncated.append((n, i, int(k), info["terminal_observation"]))
        self.storage.rewards[n, i] = rewards
        self.storage.starts[n, i] = model._last_episode_starts
        model._last_obs = new_obs
        model._last_episode_starts = done
        self._dones[i] = done

    def _end_rollout(self) -> None:
        """Write the envs' statistics back; for the members still running, the returns and advantages (the last
        observations' values in one pass) and ``on_rollout_end``."""
        if self.envs is not None:
            self.envs.end_rollout()
        members, models = self.active, [m.model for m in self.active]
        running = [i for i, m in enumerate(members) if m.status == "running"]
        if not running:
            return
        if self._truncated:
            self._bootstrap(self._truncated)
        with th.no_grad():
            obs = th.as_tensor(np.stack([model._last_obs for model in models]), device=self.device)
            last_values = self.stack.values(obs).cpu().numpy()
        self.storage.compute_returns(last_values, np.stack(self._dones), models)
        for i in running:
            m = members[i]
            m.callback.update_locals({"new_obs": models[i]._last_obs, "dones": self._dones[i]})
            _guard(m, m.callback.on_rollout_end)

    def _step_envs(
        self, members: list[Member], actions: np.ndarray, live: list[int]
    ) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, Sequence[dict[str, Any]]]]:
        """Each live member's ``(obs, rewards, dones, infos)`` after its actions (a member whose env failed is
        marked ``failed`` and left out)."""
        if self.envs is not None:
            obs, rewards, dones, infos = self.envs.step(actions)
            return {i: (obs[i], rewards[i], dones[i], infos[i]) for i in live}
        for i in live:
            model = members[i].model
            act = actions[i]
            if isinstance(model.action_space, spaces.Box):
                act = np.clip(act, model.action_space.low, model.action_space.high)
            elif isinstance(model.action_space, spaces.Discrete):
                act = act.reshape(-1)
            model.env.step_async(act)
        out = {}
        for i in live:
            result = _guard(members[i], members[i].model.env.step_wait)
            if result is not None:
                out[i] = result
        return out

    def _bootstrap(self, ends: list[tuple[int, int, int, np.ndarray]]) -> None:
        """Add ``gamma`` times the value of each truncated episode's last observation to its stored reward (the
        values of every member's truncated episodes of the rollout in one batched pass)."""
        per: dict[int, list[tuple[int, int, np.ndarray]]] = {}
        for n, i, k, terminal in ends:
            per.setdefault(i, []).append((n, k, terminal))
        width = max(len(v) for v in per.values())
        obs = np.zeros((self.stack.size, width, *np.shape(ends[0][3])), dtype=np.float32)
        for i, rows in per.items():
            for j, (_, _, terminal) in enumerate(rows):
                obs[i, j] = terminal
        with th.no_grad():
            values = self.stack.values(th.as_tensor(obs, device=self.device)).cpu().numpy()
        for i, rows in per.items():
            gamma = self.active[i].model.gamma
            for j, (n, k, _) in enumerate(rows):
                self.storage.rewards[n, i, k] += gamma * values[i, j]

    # --- evaluation ----------------------------------------------------------------------------------------------
    def evaluate(self, rows: Sequence[int], n_episodes: int, seeds: list[int], env_kwargs: dict[str, Any]) -> list[Any]:
        """Mission Gym games of the active members ``rows``, all at once: each plays ``n_episodes`` games on
        ``seeds`` deterministically, its observations normalised by its own statistics, as its lone evaluation
        would (:func:`~mission_gym.evaluation.evaluate_mission` results, in ``rows`` order)."""
        from mission_gym.evaluation import evaluate_mission_blocks

        models = [self.active[i].model for i in rows]
        norms = [model.get_vec_normalize_env() for model in models]
        m, heads = self.stack.size, (self.stack.heads.heads, self.stack.heads.actions)
        index = th.tensor(list(rows), device=self.device)

        def predict(obs: np.ndarray) -> np.ndarray:
            per = obs.reshape(len(rows), -1, obs.shape[-1])
            seen = np.stack([n.normalize_obs(o) if n is not None else o for n, o in zip(norms, per)])
            full = th.zeros(m, per.shape[1], per.shape[2], device=self.device)
            full[index] = th.as_tensor(seen, dtype=th.float32, device=self.device)
            with th.no_grad():
                out, _ = self.stack.forward(full)
                actions = out[index].view(len(rows), per.shape[1], *heads).argmax(dim=-1)
            return actions.reshape(-1, heads[0]).cpu().numpy()

        return evaluate_mission_blocks(predict, n_episodes, len(rows), seeds, env_kwargs=env_kwargs, threads=self.threads)

    # --- the update ----------------------------------------------------------------------------------------------
    def train(self) -> None:
        """One PPO update of every active member (:class:`~mission_gym.ppo.batched.update.BatchedUpdate`), then each
        member's weights and Adam state copied back and its ``train/*`` values logged."""
        members = self.active
        models = [m.model for m in members]
        first = models[0]
        for model in models:
            model.policy.set_training_mode(True)
            model._update_learning_rate(model.policy.optimizer)
        hyper = _hyper(models)
        data = self.storage.flat()
        teachers = self._distill_targets(models, hyper)
        if teachers is not None:
            data.append(teachers)
        key = (len(models), any(v != 0.0 for v in hyper["ent"]), any(m.target_kl is not None for m in models),
               teachers is not None)  # fmt: skip
        if len({model.n_epochs for model in models}) != 1:  # together.py batches only members of one epochs schedule
            raise ValueError(f"batched members must share n_epochs, got {[model.n_epochs for model in models]}")
        # a phase may change n_epochs: the update's buffers and graph are built for one count
        if self.update is None or self.update.key != key or self.update.n_epochs != first.n_epochs:
            self.update = BatchedUpdate(self.stack, self.adam, first, key)
        size = self.update.size
        # every epoch's order drawn now (the graph takes them at once); a member whose target KL ends its update
        # early is put back to the state after the orders it used, as its lone run draws no more
        orders = np.zeros((first.n_epochs, len(members), size), dtype=np.int64)
        after: list[list[Any]] = [[] for _ in members]
        for i, m in enumerate(members):
            for e in range(first.n_epochs):
                orders[e, i] = m.numpy_gen.permutation(size)
                after[i].append(m.numpy_gen.get_state() if key[2] else None)
        sums, kl, epochs, loss = self.update(data, orders, hyper)
        for i, (m, n) in enumerate(zip(members, epochs)):
            m.model._n_updates += n
            if n < first.n_epochs:
                m.numpy_gen.set_state(after[i][n - 1])
        self.stack.push()
        self.adam.store([model.policy.optimizer for model in models])
        explained = self.storage.explained_variance()
        for i, model in enumerate(models):
            distilled = _has_targets(model)
            UpdateRecord(
                policy_loss=sums[i][0],
                clip_fraction=sums[i][1],
                value_loss=sums[i][2],
                entropy_loss=sums[i][3],
                approx_kl=kl[i],
                loss=loss[i],
                explained_variance=explained[i],
                n_updates=model._n_updates,
                clip_range=hyper["clip"][i],
                clip_range_vf=hyper["clip_vf"][i] if first.clip_range_vf is not None else None,
                std=th.exp(model.policy.log_std).mean().item() if hasattr(model.policy, "log_std") else None,
                distill_kl=sums[i][4] if distilled else None,
                distill_coef=hyper["kl"][i] if distilled else None,
            ).write(model.logger)

    def _distill_targets(self, models: list[Any], hyper: dict[str, list[float]]) -> th.Tensor | None:
        """The teachers' log-probabilities of every member's rollout ``(M, size, heads, actions)`` when some member is a
        distillation's student with targets this rollout (zeros for the others, whose KL coefficient is 0), and each
        member's coefficient in ``hyper["kl"]``; None when none is."""
        terms = [getattr(m, "distillation", None) for m in models]
        flats = [t.flat() if t is not None else None for t in terms]
        hyper["kl"] = [
            t.coef(m.num_timesteps) if t is not None and f is not None else 0.0 for t, m, f in zip(terms, models, flats)
        ]
        shape = next((f.shape for f in flats if f is not None), None)
        if shape is None:
            return None
        stacked = np.stack([f if f is not None else np.zeros(shape, dtype=np.float32) for f in flats])
        return th.as_tensor(stacked, device=self.device)


def _has_targets(model: Any) -> bool:
    term = getattr(model, "distillation", None)
    return term is not None and term.targets is not None


def _hyper(models: list[Any]) -> dict[str, list[float]]:
    """Each member's update settings now (its schedules at its progress)."""
    progress = [model._current_progress_remaining for model in models]
    return {
        "lr": [model.policy.optimizer.param_groups[0]["lr"] for model in models],
        "clip": [float(model.clip_range(p)) for model, p in zip(models, progress)],
        "clip_vf": [
            float(model.clip_range_vf(p)) if model.clip_range_vf is not None else 0.0 for model, p in zip(models, progress)
        ],
        "ent": [float(model.ent_coef) for model in models],
        "vf": [float(model.vf_coef) for model in models],
        "max_norm": [float(model.max_grad_norm) for model in models],
        "kl_limit": [1.5 * model.target_kl if model.target_kl is not None else float("inf") for model in models],
    }


def _guard(member: Member, fn: Callable[..., Any], *args: Any) -> Any:
    """Call a member's own code (its callbacks, logger or env); what it raises ends that member alone."""
    if member.status == "failed":
        return None
    try:
        return fn(*args)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:
        member.status, member.error = "failed", exc
        return None


def _step_locals(
    m: Member, n: int, actions: Any, new_obs: Any, rewards: Any, dones: Any, infos: Any, storage: Any, i: int
) -> dict[str, Any]:
    """What a member's callbacks find in ``self.locals`` at a step: ``collect_rollouts``' names."""
    model = m.model
    return {
        "self": model,
        "env": model.env,
        "callback": m.callback,
        "n_rollout_steps": model.n_steps,
        "n_steps": n,
        "actions": actions,
        "clipped_actions": actions,
        "values": storage.values[n, i],
        "log_probs": storage.log_probs[n, i],
        "new_obs": new_obs,
        "rewards": rewards,
        "dones": dones,
        "infos": infos,
    }
