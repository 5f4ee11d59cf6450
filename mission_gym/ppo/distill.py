"""Distillation towards teachers chosen per game: one agent learns the plans that different members found.

A student trains with PPO's loss plus ``coef × KL(teacher ‖ student)`` on its own games (kickstarting, Schmitt et
al. 2018; proximal policy distillation, Spigler 2025), where each game's teacher is chosen by what the env reports
and the student does not see: the game's situation, its defenders' modes (``guard_objective+patrol``;
``MissionVecEnv.situations``). The coefficient falls linearly to 0 by a given env step, after which the student
trains by PPO alone.

It is a loss term that both learners take (:class:`Distillation`, the model's ``distillation``): during each rollout
its callback (:class:`DistillTargets`) stores, for every step, the chosen teacher's action log-probabilities of the
raw observation the student acts on (each teacher normalises it by its own statistics), so the update needs no
teacher forward pass; :func:`~mission_gym.ppo.maths.ppo_loss` adds the KL to them. Teachers are agents loaded from
their files through :mod:`mission_gym.agents`. The KL is zero where student and teacher agree and its gradient moves
the student towards the teacher (``tests/test_distill.py``).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.callbacks import BaseCallback

from mission_gym.agents.loading import Agent, load_agent
from mission_gym.ppo.maths import ActionHeads
from mission_gym.sim import layout as L
from mission_gym.sim.core import situation_codes

#: the defenders' modes, in the simulation's order (a situation names them sorted, joined by "+")
MODES = L.MODES


def situation(modes: Sequence[str]) -> str:
    """A game's situation: its defenders' modes, sorted and joined (``evaluate``'s ``by_defender_modes`` keys)."""
    return "+".join(sorted(modes))


def all_situations(n_defenders: int) -> list[str]:
    """Every situation of ``n_defenders`` defenders."""
    return sorted({situation(c) for c in itertools.combinations_with_replacement(MODES, n_defenders)})


def linear_coef(coef: float, start: int, until: int) -> Callable[[int], float]:
    """The KL coefficient at an env step: ``coef`` at ``start``, falling linearly to 0 at ``until``."""

    def at(step: int) -> float:
        if step >= until:
            return 0.0
        return coef * min(1.0, (until - step) / max(until - start, 1))

    return at


def teacher_log_probs(teacher: Agent, raw: np.ndarray, heads: ActionHeads) -> th.Tensor:
    """A teacher's normalised action log-probabilities ``(n, heads, actions)`` of raw observations ``(n, features)``,
    each normalised by the teacher's own statistics."""
    policy = teacher.policy
    obs = th.as_tensor(teacher.normalize(raw), device=policy.device)
    with th.no_grad():
        latent_pi = policy.mlp_extractor.forward_actor(policy.extract_features(obs, policy.pi_features_extractor))
        return heads.distribution(policy.action_net(latent_pi))


class Teachers:
    """The teachers of a student and which one teaches each situation.

    :param teachers: the teachers (agents with their observation statistics)
    :param assignment: situation -> index of its teacher; situations left out take ``fallback``
    :param fallback: the teacher of any other situation
    :param n_defenders: defenders per game
    :param heads: the action heads
    """

    def __init__(
        self, teachers: list[Agent], assignment: dict[str, int], fallback: int, n_defenders: int, heads: ActionHeads
    ) -> None:
        self.teachers, self.heads = teachers, heads
        self.assignment = dict(assignment)
        # a situation's code (MissionVecEnv.situations) -> its teacher
        n_modes = len(MODES)
        self.table = np.full(n_modes**n_defenders, fallback, dtype=np.int64)
        for codes in itertools.product(range(n_modes), repeat=n_defenders):
            key = situation([MODES[c] for c in codes])
            self.table[situation_codes(np.array([codes]))[0]] = self.assignment.get(key, fallback)

    def of_situations(self, codes: np.ndarray) -> np.ndarray:
        """Each game's teacher (index) from its situation's code."""
        return self.table[codes]

    def log_probs(self, raw: np.ndarray, chosen: np.ndarray) -> np.ndarray:
        """Each row's teacher's log-probabilities ``(n, heads, actions)`` (NumPy float32) of raw observations."""
        out = np.empty((raw.shape[0], self.heads.heads, self.heads.actions), dtype=np.float32)
        for k, teacher in enumerate(self.teachers):
            rows = np.flatnonzero(chosen == k)
            if rows.size:
                out[rows] = teacher_log_probs(teacher, raw[rows], self.heads).cpu().numpy()
        return out


class Distillation:
    """The distillation term of a student: its teachers, the KL coefficient by env step, and the teachers'
    log-probabilities of the rollout being collected (:class:`DistillTargets` fills them).

    :param teachers: the teachers and their situations
    :param coef: the KL coefficient at an env step
    """

    def __init__(self, teachers: Teachers, coef: Callable[[int], float]) -> None:
        self.teachers, self.coef = teachers, coef
        #: the rollout's targets ``(n_steps, n_envs, heads, actions)``, or None when the coefficient was 0 at its start
        self.targets: np.ndarray | None = None

    def start_rollout(self, n_steps: int, n_envs: int, step: int) -> bool:
        """A rollout starts at env step ``step``: whether it collects targets (the coefficient is not 0 yet)."""
        heads = self.teachers.heads
        active = self.coef(step) > 0
        self.targets = np.zeros((n_steps, n_envs, heads.heads, heads.actions), dtype=np.float32) if active else None
        return active

    def record(self, n: int, raw: np.ndarray, situations: np.ndarray) -> None:
        """The targets of rollout step ``n``: each game's teacher's view of the raw observation acted on."""
        assert self.targets is not None
        self.targets[n] = self.teachers.log_probs(raw, self.teachers.of_situations(situations))

    def flat(self) -> np.ndarray | None:
        """The rollout's targets ``(n_envs * n_steps, heads, actions)`` in ``RolloutBuffer``'s flattened
        (env-major) order, or None."""
        if self.targets is None:
            return None
        t = self.targets
        return t.swapaxes(0, 1).reshape(t.shape[0] * t.shape[1], *t.shape[2:])

    def flat_targets(self, device: Any) -> th.Tensor | None:
        """:meth:`flat` as a tensor on ``device``."""
        flat = self.flat()
        return None if flat is None else th.as_tensor(flat, device=device)


class DistillTargets(BaseCallback):
    """Fills a student's :class:`Distillation` targets as its rollout runs: at the rollout's start for the first
    observation, after each step for the next one (the raw observation its ``VecNormalize`` keeps, each game's
    situation as the env reports it). Either learner calls it as SB3's ``collect_rollouts`` does."""

    def __init__(self, distillation: Distillation) -> None:
        super().__init__()
        self.distillation = distillation
        self.active = False

    def _raw(self, fallback: Any) -> np.ndarray:
        vecnorm = self.model.get_vec_normalize_env()
        return np.asarray(vecnorm.get_original_obs() if vecnorm is not None else fallback)

    def _record(self, n: int, fallback: Any) -> None:
        env: Any = self.training_env.unwrapped  # Mission Gym's MissionVecEnv (distillation() checks the heads)
        self.distillation.record(n, self._raw(fallback), env.situations())

    def _on_rollout_start(self) -> None:
        model: Any = self.model
        self.active = self.distillation.start_rollout(model.n_steps, model.n_envs, model.num_timesteps)
        if self.active:
            self._record(0, model._last_obs)

    def _on_step(self) -> bool:
        n = int(self.locals["n_steps"]) + 1  # the step whose observation the env just returned
        if self.active and n < self.locals["n_rollout_steps"]:
            self._record(n, self.locals["new_obs"])
        return True


#: games each teacher plays to measure its situations when no teacher lists them (a test sets fewer)
ASSIGN_GAMES = int(os.environ.get("MISSION_GYM_ASSIGN_GAMES", "400"))


def assign_by_games(teachers: list[Agent], heads: ActionHeads, env_kwargs: dict[str, Any]) -> dict[str, int]:
    """Each situation's teacher: the one that wins most of its games among ``ASSIGN_GAMES`` in-training evaluation
    games per teacher (its own observation statistics, deterministic actions)."""
    from mission_gym.evaluation import EVAL_SEED_BASE, evaluate_mission, held_out_seeds

    seeds = held_out_seeds(ASSIGN_GAMES, EVAL_SEED_BASE)
    rates: dict[str, list[str]] = {}
    best: dict[str, tuple[float, int]] = {}
    for k, teacher in enumerate(teachers):

        def predict(obs: np.ndarray, teacher: Agent = teacher) -> np.ndarray:
            return teacher_log_probs(teacher, obs, heads).argmax(dim=-1).cpu().numpy()

        result = evaluate_mission(predict, ASSIGN_GAMES, seeds, env_kwargs=env_kwargs)
        for key, row in result.by_defender_modes.items():
            rates.setdefault(key, []).append(f"{row['wins']}/{row['episodes']}")
            if key not in best or row["win_rate"] > best[key][0]:
                best[key] = (row["win_rate"], k)
    for key in sorted(best):  # what the choice rests on, in the run's log
        print(f"distill: {key} games go to teacher {best[key][1]} (games won by teacher 0, 1, ...: {', '.join(rates[key])})")
    return {key: k for key, (_, k) in best.items()}


def _load_teacher(path: str | Path, i: int, model: Any) -> Agent:
    """A teacher: a saved model (a run's ``best_model.zip``, a checkpoint) with its observation statistics, from its
    safe files where it has them, else from its zip and statistics pickle (a run's own files, which a distillation
    reads to train, as a resume does); frozen.

    :raises ConfigError: when it does not load or its spaces are not the student's
    """
    from mission_gym.config.yaml_io import ConfigError

    try:
        teacher = load_agent(path, device=str(model.device), trust_pickle=True)
    except Exception as exc:
        raise ConfigError(f"distill.teachers[{i}].model {str(path)!r} does not load: {exc}") from None
    if teacher.observation_space != model.observation_space or teacher.action_space != model.action_space:
        raise ConfigError(f"distill.teachers[{i}].model {str(path)!r} has other observation or action spaces than the student")
    for p in teacher.policy.parameters():
        p.requires_grad_(False)
    return teacher


def distillation(model: Any, spec: Any, env_kwargs: dict[str, Any]) -> tuple[Any, Distillation]:
    """The distillation of ``spec`` (a :class:`~mission_gym.settings.schema.Distill`) for ``model``'s student: its
    teachers loaded, each situation's teacher (measured by :func:`assign_by_games` when no teacher lists
    situations) and the KL coefficient's schedule; and the spec with every teacher's situations filled in, for the
    run's configuration.

    :raises ConfigError: for a teacher that does not load or whose spaces are not the student's, or a student
        without Mission Gym's action heads
    """
    from mission_gym.config.yaml_io import ConfigError

    heads = ActionHeads.of(model.policy)
    dims = getattr(model.action_space, "nvec", None)
    if heads is None or heads.gaussian or dims is None:
        raise ConfigError("distill needs Mission Gym's action heads (a MultiDiscrete of equal heads)")
    teachers = [_load_teacher(t.model, i, model) for i, t in enumerate(spec.teachers)]
    if len(teachers) > 1 and not any(t.situations for t in spec.teachers):
        assignment = assign_by_games(teachers, heads, env_kwargs)
        listed = [sorted(key for key, k in assignment.items() if k == i) for i in range(len(teachers))]
        spec = spec.model_copy(
            update={"teachers": [t.model_copy(update={"situations": s}) for t, s in zip(spec.teachers, listed)]}
        )
    assignment = {key: i for i, t in enumerate(spec.teachers) for key in t.situations}
    fallback = next((i for i, t in enumerate(spec.teachers) if not t.situations), 0)
    table = Teachers(teachers, assignment, fallback, model.env.unwrapped.n_defenders, heads)
    return spec, Distillation(table, linear_coef(spec.kl_coef, spec.start, spec.until))
