"""Distillation towards teachers chosen per game: one agent learns the plans that different members found.

A student trains with PPO's loss plus ``coef × KL(teacher ‖ student)`` on its own games (kickstarting, Schmitt et
al. 2018; proximal policy distillation, Spigler 2025), where each game's teacher is chosen from what the
simulation knows and the student does not see: the defenders' modes (the *situation*, e.g. ``guard_objective+patrol``).
The coefficient falls linearly to 0 by a given env step, after which the student trains by PPO alone. Each teacher
is a saved model with its own observation statistics; the student's rollout stores, for every step, the chosen
teacher's action log-probabilities of the observation the student acted on, so the update needs no teacher forward
pass. The KL is zero where student and teacher agree and its gradient moves the student towards the teacher
(``tests/test_distill.py``).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch as th

from mission_gym.agents.files import normalized
from mission_gym.sim import layout as L

#: the defenders' modes, in the simulation's order (a situation names them sorted, joined by "+")
MODES = L.MODES


def situation(modes: Sequence[str]) -> str:
    """A game's situation: its defenders' modes, sorted and joined (``evaluate``'s ``by_defender_modes`` keys)."""
    return "+".join(sorted(modes))


def all_situations(n_defenders: int) -> list[str]:
    """Every situation of ``n_defenders`` defenders."""
    return sorted({situation(c) for c in itertools.combinations_with_replacement(MODES, n_defenders)})


def kl_to_teacher(student_log_probs: th.Tensor, teacher_log_probs: th.Tensor) -> th.Tensor:
    """``KL(teacher ‖ student)`` of categorical heads, summed over the heads: ``(batch, heads, actions)`` normalised
    log-probabilities in, ``(batch,)`` out; its gradient flows to the student only."""
    teacher = teacher_log_probs.detach()
    return (teacher.exp() * (teacher - student_log_probs)).sum(dim=-1).sum(dim=-1)


def linear_coef(coef: float, start: int, until: int) -> Any:
    """The KL coefficient at an env step: ``coef`` at ``start``, falling linearly to 0 at ``until``."""

    def at(step: int) -> float:
        if step >= until:
            return 0.0
        return coef * min(1.0, (until - step) / max(until - start, 1))

    return at


@dataclass
class Teacher:
    """A frozen policy and the observation statistics it was trained with (None: raw observations).

    :param policy: SB3 actor-critic policy over categorical heads, in eval mode
    :param obs_mean: VecNormalize's observation mean
    :param obs_var: its variance
    :param epsilon: its epsilon
    :param clip_obs: its clip
    :param name: where it came from
    """

    policy: Any
    obs_mean: np.ndarray | None
    obs_var: np.ndarray | None
    epsilon: float = 1e-8
    clip_obs: float = 10.0
    name: str = ""

    def normalize(self, raw: np.ndarray) -> np.ndarray:
        """Observations as this teacher saw them in training."""
        if self.obs_mean is None or self.obs_var is None:
            return raw.astype(np.float32)
        return normalized(raw, self.obs_mean, self.obs_var, self.epsilon, self.clip_obs)

    def log_probs(self, raw: np.ndarray, heads: tuple[int, int]) -> th.Tensor:
        """Normalised log-probabilities ``(n, heads, actions)`` of raw observations ``(n, features)``."""
        policy = self.policy
        obs = th.as_tensor(self.normalize(raw), device=policy.device)
        with th.no_grad():
            latent_pi = policy.mlp_extractor.forward_actor(policy.extract_features(obs, policy.pi_features_extractor))
            logits = policy.action_net(latent_pi).view(-1, *heads)
            return logits - logits.logsumexp(dim=-1, keepdim=True)


def load_teacher(path: str | Path, device: str | th.device = "cpu") -> Teacher:
    """A saved model (a run directory's ``best_model.zip``, a checkpoint) and its observation statistics as a teacher:
    from its safe files where it has them, else from its zip and statistics pickle (a run's own files, which a
    distillation reads to train, as a resume does)."""
    from mission_gym.agents.loading import load_agent

    agent = load_agent(path, device=str(device), trust_pickle=True)
    policy = agent.policy
    for p in policy.parameters():
        p.requires_grad_(False)
    stats = agent.stats
    if stats is None:
        return Teacher(policy, None, None, name=str(path))
    mean, var = (stats.obs_mean, stats.obs_var) if stats.norm_obs else (None, None)
    return Teacher(policy, mean, var, stats.epsilon, stats.clip_obs, name=str(path))


class Teachers:
    """The teachers of a student and which one teaches each situation.

    :param teachers: the teachers
    :param assignment: situation -> index of its teacher; situations left out take ``fallback``
    :param fallback: the teacher of any other situation
    :param n_defenders: defenders per game
    :param heads: the action space's ``(heads, actions per head)``
    """

    def __init__(
        self, teachers: list[Teacher], assignment: dict[str, int], fallback: int, n_defenders: int, heads: tuple[int, int]
    ) -> None:
        self.teachers, self.heads = teachers, heads
        self.assignment = dict(assignment)
        # a game's modes as a base-3 code (sorted, so the defenders' order does not matter) -> its teacher
        n_modes = len(MODES)
        self.table = np.full(n_modes**n_defenders, fallback, dtype=np.int64)
        for codes in itertools.product(range(n_modes), repeat=n_defenders):
            key = situation([MODES[c] for c in codes])
            self.table[self._code(np.array([codes]))[0]] = self.assignment.get(key, fallback)

    @staticmethod
    def _code(modes: np.ndarray) -> np.ndarray:
        ordered = np.sort(modes.astype(np.int64), axis=1)
        return (ordered * (len(MODES) ** np.arange(ordered.shape[1]))).sum(axis=1)

    def of_games(self, core: Any) -> np.ndarray:
        """Each game's teacher (index) in a ``MissionCore`` (from the modes its defenders drew this episode)."""
        return self.table[self._code(core.dm[:, :, L.D_MODE])]

    def log_probs(self, raw: np.ndarray, chosen: np.ndarray) -> np.ndarray:
        """Each row's teacher's log-probabilities ``(n, heads, actions)`` (NumPy float32) of raw observations."""
        out = np.empty((raw.shape[0], *self.heads), dtype=np.float32)
        for k, teacher in enumerate(self.teachers):
            rows = np.flatnonzero(chosen == k)
            if rows.size:
                out[rows] = teacher.log_probs(raw[rows], self.heads).cpu().numpy()
        return out


#: games each teacher plays to measure its situations when no teacher lists them (a test sets fewer)
ASSIGN_GAMES = int(os.environ.get("MISSION_GYM_ASSIGN_GAMES", "400"))


def assign_by_games(teachers: list[Teacher], heads: tuple[int, int], env_kwargs: dict[str, Any]) -> dict[str, int]:
    """Each situation's teacher: the one that wins most of its games among ``ASSIGN_GAMES`` in-training evaluation
    games per teacher (its own observation statistics, deterministic actions)."""
    from mission_gym.evaluation import EVAL_SEED_BASE, evaluate_mission, held_out_seeds

    seeds = held_out_seeds(ASSIGN_GAMES, EVAL_SEED_BASE)
    rates: dict[str, list[str]] = {}
    best: dict[str, tuple[float, int]] = {}
    for k, teacher in enumerate(teachers):

        def predict(obs: np.ndarray, teacher: Teacher = teacher) -> np.ndarray:
            return teacher.log_probs(obs, heads).argmax(dim=-1).cpu().numpy()

        result = evaluate_mission(predict, ASSIGN_GAMES, seeds, env_kwargs=env_kwargs)
        for key, row in result.by_defender_modes.items():
            rates.setdefault(key, []).append(f"{row['wins']}/{row['episodes']}")
            if key not in best or row["win_rate"] > best[key][0]:
                best[key] = (row["win_rate"], k)
    for key in sorted(best):  # what the choice rests on, in the run's log
        print(f"distill: {key} games go to teacher {best[key][1]} (games won by teacher 0, 1, ...: {', '.join(rates[key])})")
    return {key: k for key, (_, k) in best.items()}


def attach(model: Any, spec: Any, env_kwargs: dict[str, Any]) -> Any:
    """Make ``model`` a student of ``spec`` (a :class:`~mission_gym.settings.schema.Distill`): its teachers loaded,
    each situation's teacher (measured by :func:`assign_by_games` when no teacher lists situations) and the KL
    coefficient's schedule; the spec with every teacher's situations filled in, for the run's configuration.

    :raises ConfigError: for a teacher that does not load or whose spaces are not the student's
    """
    from mission_gym.config.yaml_io import ConfigError

    dims = getattr(model.action_space, "nvec", None)
    if dims is None or len(set(int(d) for d in dims)) != 1:
        raise ConfigError("distill needs Mission Gym's action heads (a MultiDiscrete of equal heads)")
    heads = (len(dims), int(dims[0]))
    teachers = []
    for i, t in enumerate(spec.teachers):
        try:
            teacher = load_teacher(t.model, model.device)
        except Exception as exc:
            raise ConfigError(f"distill.teachers[{i}].model {t.model!r} does not load: {exc}") from None
        if teacher.policy.observation_space != model.observation_space or teacher.policy.action_space != model.action_space:
            raise ConfigError(
                f"distill.teachers[{i}].model {t.model!r} has other observation or action spaces than the student"
            )
        teachers.append(teacher)
    if len(teachers) > 1 and not any(t.situations for t in spec.teachers):
        assignment = assign_by_games(teachers, heads, env_kwargs)
        listed = [sorted(key for key, k in assignment.items() if k == i) for i in range(len(teachers))]
        spec = spec.model_copy(
            update={"teachers": [t.model_copy(update={"situations": s}) for t, s in zip(spec.teachers, listed)]}
        )
    assignment = {key: i for i, t in enumerate(spec.teachers) for key in t.situations}
    fallback = next((i for i, t in enumerate(spec.teachers) if not t.situations), 0)
    core = model.env.unwrapped.core
    model.teachers = Teachers(teachers, assignment, fallback, core.n_defenders, heads)
    model.distill_coef = linear_coef(spec.kl_coef, spec.start, spec.until)
    return spec
