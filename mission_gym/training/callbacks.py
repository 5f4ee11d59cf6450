"""SB3 callbacks of the trainer: episode metrics, timing, step-based checkpoints and evaluations, entropy phases
and stopping on a signal (load sampling is :mod:`mission_gym.training.monitor`'s callback).

Checkpoints and evaluations happen at the start of a rollout (after the previous update), so a saved model
has been trained on every step its file name counts, and their frequencies are in env steps, not calls.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback

from mission_gym import ENV_ID
from mission_gym.agents.files import NormStats, agent_files
from mission_gym.agents.spec import AgentSpec
from mission_gym.rundir.directory import RunDir, vecnormalize_path
from mission_gym.rundir.evaluations import EVALUATIONS, EvalRecord, append_record, best_score
from mission_gym.rundir.files import atomic_save_all
from mission_gym.training.portable import portable
from mission_gym.vec.factory import find_vec_normalize


def save_model(model: Any, path: Path, spec: AgentSpec) -> None:
    """Save a model and, next to it, the VecNormalize statistics of its env and the same agent without pickles (its
    weights as safetensors and its agent file: :mod:`mission_gym.agents.files`): all are written in full before any
    replaces its file (the zip last, so a model file always has the others), so a kill or a full disk leaves the
    previous set. The model file holds SB3's objects only, so it loads without Mission Gym
    (:mod:`mission_gym.training.portable`).

    :param spec: the agent's env and policy description (of the run's configuration)
    """
    vecnorm = find_vec_normalize(model.get_env())
    stats = NormStats.of(vecnorm) if vecnorm is not None else None
    files: list[tuple[Path, Callable[[Any], None]]] = [
        *agent_files(path, model.policy, stats, spec, model.num_timesteps),
        (path, model.save),
    ]
    if vecnorm is not None:
        files.insert(0, (vecnormalize_path(path), lambda f: _pickle(vecnorm, f)))
    with portable(model):
        atomic_save_all(files)


def _pickle(obj: Any, f: Any) -> None:
    import pickle

    pickle.dump(obj, f)


def save_checkpoint(model: Any, run: RunDir, keep: int, spec: AgentSpec) -> Path:
    """Save ``checkpoints/ckpt_<steps>_steps.zip`` (+ the files beside it) and keep the newest ``keep``."""
    path = run.checkpoint_path(model.num_timesteps)
    save_model(model, path, spec)
    run.prune_checkpoints(keep)
    return path


@dataclass
class Timings:
    """Wall-clock seconds spent in each phase, shared by the callbacks and the trainer."""

    rollout_s: float = 0.0
    train_s: float = 0.0
    eval_s: float = 0.0
    save_s: float = 0.0
    last_rollout_end: float | None = None
    _side: float = 0.0  # evaluation/saving time inside the current rollout window

    def side(self, seconds: float, kind: str) -> None:
        """Count time spent evaluating (``eval``) or saving (``save``)."""
        setattr(self, f"{kind}_s", getattr(self, f"{kind}_s") + seconds)
        self._side += seconds

    def close_update(self, now: float) -> float:
        """End the update that followed the last rollout; return its seconds (0 if none)."""
        if self.last_rollout_end is None:
            return 0.0
        seconds = now - self.last_rollout_end
        self.train_s += seconds
        self.last_rollout_end = None
        return seconds


class TimingCallback(BaseCallback):
    """Logs ``time/rollout_s`` (env stepping and inference) and ``time/train_s`` (the PPO update) per iteration.

    Must come first in the callback list so that evaluations and checkpoints are not counted as either.
    """

    def __init__(self, timings: Timings) -> None:
        super().__init__()
        self.timings = timings
        self._start = 0.0
        self._last_train_s: float | None = None

    def _on_rollout_start(self) -> None:
        now = time.perf_counter()
        train_s = self.timings.close_update(now)
        if train_s:
            self._last_train_s = train_s
        self._start = now
        self.timings._side = 0.0

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        now = time.perf_counter()
        rollout_s = now - self._start - self.timings._side
        self.timings.rollout_s += rollout_s
        self.timings.last_rollout_end = now
        self.logger.record("time/rollout_s", rollout_s)
        # the update that ran before this rollout, a row late as SB3 logs train/* (progress.csv moves both back)
        if self._last_train_s is not None:
            self.logger.record("time/train_s", self._last_train_s)


class RolloutThreadsCallback(BaseCallback):
    """One torch thread while collecting rollouts (and evaluating), ``learner_threads`` for the update.

    Inference runs on a handful of observations at a time: splitting such small ops across threads gains
    nothing and, when the cores are shared, threads spin-waiting on each other made each forward pass ~10x
    slower (3 ms instead of 0.3 ms per 64x64 layer, measured on the 2-core project machine).

    :param learner_threads: torch threads for the PPO update
    """

    def __init__(self, learner_threads: int) -> None:
        super().__init__()
        self.learner_threads = learner_threads

    def _on_rollout_start(self) -> None:
        import torch

        torch.set_num_threads(1)

    def _on_rollout_end(self) -> None:
        import torch

        torch.set_num_threads(self.learner_threads)

    def _on_step(self) -> bool:
        return True


class EpisodeMetricsCallback(BaseCallback):
    """Averages Mission Gym's ``episode_metrics`` over every episode that ended in the rollout:
    ``mission/win_rate``, ``mission/outcome_<reason>``, ``mission/<metric>`` and ``reward/<term>``.

    Envs whose infos carry no ``episode_metrics`` log nothing here.
    """

    def __init__(self, outcomes: tuple[str, ...] = ("captured", "all_disabled", "timeout", "stalled")) -> None:
        super().__init__()
        self.outcomes = outcomes
        self._reset()

    def _reset(self) -> None:
        self._sums: dict[str, float] = defaultdict(float)
        self._counts: dict[str, int] = defaultdict(int)
        self._outcomes: dict[str, int] = defaultdict(int)
        self._episodes = 0

    def _on_rollout_start(self) -> None:
        self._reset()

    def _on_step(self) -> bool:
        dones = self.locals["dones"]
        if not dones.any():
            return True
        infos = self.locals["infos"]
        for i in np.flatnonzero(dones):
            metrics = infos[i].get("episode_metrics")
            if metrics is None:
                continue
            self._episodes += 1
            self._outcomes[str(metrics.get("outcome", infos[i].get("outcome")))] += 1
            for key, value in metrics.items():
                if isinstance(value, bool | int | float | np.number) and not isinstance(value, str):
                    self._sums[f"mission/{key}"] += float(value)
                    self._counts[f"mission/{key}"] += 1
            for term, value in (metrics.get("reward_terms") or {}).items():
                self._sums[f"reward/{term}"] += float(value)
                self._counts[f"reward/{term}"] += 1
        return True

    def _on_rollout_end(self) -> None:
        if not self._episodes:
            return
        for key, total in self._sums.items():
            name = "mission/win_rate" if key == "mission/win" else key
            self.logger.record(name, total / self._counts[key])
        for outcome in sorted(set(self.outcomes) | set(self._outcomes)):
            self.logger.record(f"mission/outcome_{outcome}", self._outcomes[outcome] / self._episodes)
        self.logger.record("mission/episodes", self._episodes)


class StepCheckpointCallback(BaseCallback):
    """Saves a checkpoint every ``save_freq`` env steps (at the first rollout start past each multiple).

    :param run: the run directory
    :param save_freq: env steps between checkpoints (0: never)
    :param keep: checkpoints to keep
    :param timings: where the saving time is counted
    :param spec: the agent's description, saved with each checkpoint
    """

    def __init__(self, run: RunDir, save_freq: int, keep: int, timings: Timings, spec: AgentSpec) -> None:
        super().__init__()
        self.run, self.save_freq, self.keep, self.timings, self.spec = run, save_freq, keep, timings, spec
        self.next_save = math.inf

    def _init_callback(self) -> None:
        if self.save_freq > 0:
            self.next_save = (self.model.num_timesteps // self.save_freq + 1) * self.save_freq

    def _on_rollout_start(self) -> None:
        if self.model.num_timesteps >= self.next_save:
            t0 = time.perf_counter()
            save_checkpoint(self.model, self.run, self.keep, self.spec)
            self.next_save = (self.model.num_timesteps // self.save_freq + 1) * self.save_freq
            self.timings.side(time.perf_counter() - t0, "save")

    def _on_step(self) -> bool:
        return True


def eval_record(
    predict: Callable[[np.ndarray], np.ndarray],
    env_id: str,
    env_kwargs: dict[str, Any],
    n_episodes: int,
    timesteps: int,
    spec: AgentSpec | None = None,
) -> EvalRecord:
    """Play ``n_episodes`` games of ``predict`` (observations as the env gives them -> actions) on the fixed
    in-training evaluation seeds; what ``evaluations.csv`` records of it.

    :param spec: the agent's description, whose wrappers and frame stack the env is played with (None: none)"""
    from mission_gym.evaluation import EVAL_SEED_BASE, evaluate_gym, evaluate_mission, held_out_seeds

    seeds = held_out_seeds(n_episodes, EVAL_SEED_BASE)
    t0 = time.perf_counter()
    if env_id == ENV_ID:
        res = evaluate_mission(predict, n_episodes, seeds, env_kwargs=env_kwargs)
    else:
        res = evaluate_gym(
            predict, env_id, n_episodes, seeds, env_kwargs=env_kwargs, make_env=eval_env_maker(spec, env_id, env_kwargs)
        )
    return record_of(res, timesteps, time.perf_counter() - t0)


def eval_env_maker(spec: AgentSpec | None, env_id: str, env_kwargs: dict[str, Any]) -> Callable[[], Any]:
    """What builds the one env an agent of ``spec`` is evaluated on: the task as its training env sees it."""
    from mission_gym.vec.factory import make_eval_env

    wrappers, stack = (spec.env_wrapper, spec.frame_stack) if spec is not None else ((), None)
    return lambda: make_eval_env(env_id, env_kwargs, wrappers, stack)


def record_of(res: Any, timesteps: int, eval_s: float) -> EvalRecord:
    """What ``evaluations.csv`` records of an evaluation (:class:`~mission_gym.evaluation.EvalResult`), with its
    win rate by the defenders' modes where the env has them."""
    ci = res.win_ci95 or (None, None)
    return EvalRecord(
        timesteps=int(timesteps),
        mean_return=res.mean_return,
        std_return=res.std_return,
        mean_ep_length=res.mean_length,
        n_episodes=res.episodes,
        win_rate=res.win_rate,
        win_ci_low=ci[0],
        win_ci_high=ci[1],
        eval_s=eval_s,
        outcomes=dict(res.outcomes),
        by_situation={k: [int(v["wins"]), int(v["episodes"])] for k, v in res.by_defender_modes.items()},
    )


class StepEvalCallback(BaseCallback):
    """Evaluates on fixed seeds every ``eval_freq`` env steps; appends to ``evaluations.csv``, logs ``eval/*``
    and keeps ``best_model.zip`` (best win rate, then mean return; the later of equal scores).

    Not SB3's ``EvalCallback``: that one counts calls rather than steps, draws episode seeds from its env and has
    no win rate; the episode loop here is :mod:`mission_gym.evaluation`'s, the same as the ``evaluate`` command.
    Its tags include SB3's (``eval/mean_reward``, ``eval/mean_ep_length``, ``eval/success_rate``), so tools that
    read SB3 runs find them. Observations are normalised with the training env's current VecNormalize statistics.

    :param run: the run directory
    :param spec: the agent's description: the env evaluated (``env``, ``env_kwargs``: the real game, whatever a
        curriculum trains on), saved with the best model
    :param n_episodes: games per evaluation
    :param eval_freq: env steps between evaluations (0: only the final one)
    :param timings: where the evaluation time is counted
    :param callback_after_eval: called after each evaluation, as SB3's ``EvalCallback`` does (its ``parent`` is this
        callback: :attr:`last` and :meth:`predict` are there)
    :param evaluator: plays a due evaluation for this callback where it can (a batched learner plays its members'
        at once: :class:`~mission_gym.ppo.batched.learner.BatchEvaluator`); it returns None where it cannot
    :param stop_return: end training at the first evaluation whose mean return reaches this (:attr:`reached`)
    """

    def __init__(
        self,
        run: RunDir,
        spec: AgentSpec,
        n_episodes: int,
        eval_freq: int,
        timings: Timings,
        callback_after_eval: BaseCallback | None = None,
        evaluator: Any = None,
        stop_return: float | None = None,
    ) -> None:
        super().__init__()
        self.evaluator = evaluator
        self.stop_return = stop_return
        #: an evaluation reached ``stop_return``: training ends at the next step, the evaluated model its last
        self.reached: EvalRecord | None = None
        self.run, self.spec, self.n_episodes = run, spec, n_episodes
        self.env_id, self.env_kwargs = spec.env, spec.env_kwargs
        self.eval_freq, self.timings = eval_freq, timings
        self.callback_after_eval = callback_after_eval
        if callback_after_eval is not None:
            callback_after_eval.parent = self
        self.next_eval = math.inf
        self.best: tuple[float, float] | None = None
        self.last: EvalRecord | None = None
        self.csv_path = run / EVALUATIONS

    def _init_callback(self) -> None:
        if self.eval_freq > 0:
            self.next_eval = (self.model.num_timesteps // self.eval_freq + 1) * self.eval_freq
        self.best = best_score(self.csv_path)  # a resumed run keeps its best
        if self.evaluator is not None:
            self.evaluator.register(self)
        if self.callback_after_eval is not None:
            self.callback_after_eval.init_callback(self.model)

    def predict(self, obs: np.ndarray) -> np.ndarray:
        """The model's deterministic actions for a batch of raw observations."""
        vecnorm = find_vec_normalize(self.model.get_env())
        seen = vecnorm.normalize_obs(obs) if vecnorm is not None else obs
        return self.model.predict(seen, deterministic=True)[0]

    @property
    def due(self) -> bool:
        """Whether an evaluation falls due at this rollout's start."""
        return self.model.num_timesteps >= self.next_eval

    def evaluate_now(self, batched: bool = False) -> EvalRecord:
        """Evaluate the current model, record it and update the best model (``batched``: through the evaluator)."""
        t0 = time.perf_counter()
        result = self.evaluator(self) if batched and self.evaluator is not None else None
        if result is not None:
            rec = record_of(result, self.model.num_timesteps, time.perf_counter() - t0)
        else:
            rec = eval_record(self.predict, self.env_id, self.env_kwargs, self.n_episodes, self.model.num_timesteps, self.spec)
        append_record(self.csv_path, rec)
        if rec.win_rate is not None:
            self.logger.record("eval/win_rate", rec.win_rate)
            self.logger.record("eval/success_rate", rec.win_rate)
            for outcome, count in rec.outcomes.items():
                self.logger.record(f"eval/outcome_{outcome}", count / rec.n_episodes)
        self.logger.record("eval/mean_return", rec.mean_return)
        self.logger.record("eval/mean_reward", rec.mean_return)
        self.logger.record("eval/mean_ep_length", rec.mean_ep_length)
        # a later model that scores as well as the best has trained longer and takes its place: a task whose return
        # has a ceiling (CartPole-v1's 500) reaches it early and keeps it (docs/experiments.md, "Recipes for the
        # zoo's tasks"); a win rate and a mean return of many games are never equal by chance
        if self.best is None or rec.score() >= self.best:
            self.best = rec.score()
            save_model(self.model, self.run / "best_model.zip", self.spec)
        self.last = rec
        if self.callback_after_eval is not None:
            self.callback_after_eval.on_step()
        self.timings.side(time.perf_counter() - t0, "eval")
        return rec

    def _on_rollout_start(self) -> None:
        if self.due:
            rec = self.evaluate_now(batched=True)
            self.next_eval = (self.model.num_timesteps // self.eval_freq + 1) * self.eval_freq
            if self.stop_return is not None and rec.mean_return >= self.stop_return:
                self.reached = rec

    def _on_step(self) -> bool:
        # SB3 ends learn() when a step's callback says so: the first step of this rollout, before any update
        return self.reached is None


class StopTraining(Exception):
    """Raised by a callback (e.g. a search's ``callback_after_eval`` pruning a trial) to end the session early and
    cleanly: the trainer saves a checkpoint, writes no final model and records status ``stopped`` with the message."""


class StopFlagCallback(BaseCallback):
    """Stops training at the next env step once ``flag()`` is true (set by a signal handler)."""

    def __init__(self, flag: Callable[[], bool]) -> None:
        super().__init__()
        self.flag = flag

    def _on_step(self) -> bool:
        return not self.flag()


class StopAtStepCallback(BaseCallback):
    """Pauses training at the first rollout that starts at or after ``stop_at`` env steps (``--stop-at``): every
    step counted before it has been trained on; the run continues with ``--resume``."""

    def __init__(self, stop_at: int) -> None:
        super().__init__()
        self.stop_at = stop_at
        self.reached = False

    def _on_rollout_start(self) -> None:
        self.reached = self.model.num_timesteps >= self.stop_at

    def _on_step(self) -> bool:
        return not self.reached


def run_progress(model: Any) -> float:
    """How far through its run a learning model is (0 at the first step, 1 at the target), across ``--resume``."""
    total = getattr(model, "_total_timesteps", 0) or 1
    return model.num_timesteps / total


class PhaseCallback(BaseCallback):
    """Set the PPO settings that are constant within a phase (``phases:`` of the config: ``ent_coef``,
    ``n_epochs``) for the phase the run is in before each update, and log the value each update used as
    ``train/<name>`` (in the row of its ``train/learning_rate``).

    :param schedules: the model attribute -> its value by ``progress_remaining``, e.g. from
        :func:`~mission_gym.ppo.schedules.entropy_schedule` and :func:`~mission_gym.ppo.schedules.epochs_schedule`
    """

    def __init__(self, schedules: Mapping[str, Callable[[float], float]]) -> None:
        super().__init__()
        self.schedules = schedules
        self.updates = 0

    def _apply(self) -> None:
        for name, schedule in self.schedules.items():  # the phases' own values: ent_coef a float, n_epochs an int
            setattr(self.model, name, schedule(1.0 - run_progress(self.model)))

    def _record(self) -> None:
        # SB3 dumps a rollout's row before its update, so an update's train/* values land in the next row
        if self.updates:
            for name in self.schedules:
                self.logger.record(f"train/{name}", getattr(self.model, name))

    def _on_training_start(self) -> None:
        self._apply()

    def _on_rollout_start(self) -> None:
        self._record()

    def _on_rollout_end(self) -> None:
        self._apply()
        self.updates += 1

    def _on_training_end(self) -> None:
        self._record()

    def _on_step(self) -> bool:
        return True
