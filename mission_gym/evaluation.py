"""Evaluation on fixed held-out seeds: win rate with a Wilson interval, outcome counts, returns and
mean episode metrics, for a trained agent or a scripted baseline, on Mission Gym or any Gymnasium id.

Seed lists never overlap: training seeds its envs from ``--seed`` upward (small numbers), in-training
evaluation uses :data:`EVAL_SEED_BASE` upward and held-out evaluation :data:`HELD_OUT_SEED_BASE` upward.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

EVAL_SEED_BASE = 500_000_000  # in-training evaluation (EvalCallback) episodes
HELD_OUT_SEED_BASE = 900_000_000  # `evaluate`: never seen in training or in-training evaluation
MAX_BATCH = 256  # Mission Gym episodes run side by side in one MissionVecEnv

PredictFn = Callable[[np.ndarray], np.ndarray]


def held_out_seeds(n: int, base: int = HELD_OUT_SEED_BASE) -> list[int]:
    """The first ``n`` seeds of a fixed list."""
    return [base + k for k in range(n)]


def situation_problem(text: str, env_kwargs: dict[str, Any] | None = None) -> str | None:
    """Why ``text`` is not a situation of this game (one line naming the bad value and what is valid), or None:
    one defender mode per defender joined by ``+`` (``guard_objective+patrol``, in any order)."""
    from mission_gym.envs import MissionVecEnv
    from mission_gym.sim.layout import MODES

    n = MissionVecEnv(1, **(env_kwargs or {})).n_defenders
    modes = text.split("+")
    bad = [m for m in modes if m not in MODES]
    if bad:
        return f"--defenders: {bad[0]!r} is not a defender mode; valid: {', '.join(MODES)} (one per defender, joined by +)"
    if len(modes) != n:
        return f"--defenders {text!r} names {len(modes)} defenders; this game has {n} (e.g. {'+'.join(MODES[:1] * n)})"
    return None


def situation_seeds(
    situation: str, n: int, env_kwargs: dict[str, Any] | None = None, base: int = HELD_OUT_SEED_BASE, batch: int = 1024
) -> list[int]:
    """The first ``n`` seeds from ``base`` upward whose game draws ``situation`` (its defenders' modes, sorted and
    joined by ``+``): the held-out games of one situation, the same games a whole evaluation plays among others."""
    from mission_gym.envs import MissionVecEnv

    want = "+".join(sorted(situation.split("+")))
    out: list[int] = []
    start = base
    while len(out) < n:
        venv = MissionVecEnv(batch, **(env_kwargs or {}))
        venv.seed_envs(list(range(start, start + batch)))
        venv.reset()
        out += [start + i for i in range(batch) if "+".join(sorted(venv.core.defender_modes(i))) == want]
        start += batch
    return out[:n]


def wilson_interval(successes: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (95% by default)."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass
class EvalResult:
    """What ``evaluate`` reports."""

    env_id: str
    policy: str
    episodes: int
    seeds: list[int]
    mean_return: float
    std_return: float
    mean_length: float
    win_rate: float | None = None
    win_ci95: tuple[float, float] | None = None
    outcomes: dict[str, int] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    reward_terms: dict[str, float] = field(default_factory=dict)
    returns: list[float] = field(default_factory=list)
    by_defender_modes: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: each episode's win (1) or not (0), in the seeds' order (Mission Gym)
    won: list[int] = field(default_factory=list)
    #: each episode's defenders' modes, sorted and joined by "+" (Mission Gym)
    situations: list[str] = field(default_factory=list)
    #: the scenario's name (Mission Gym; ``evaluate --env-kwargs`` may play another than a run's)
    scenario: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _mean_metrics(all_metrics: list[dict[str, Any]]) -> tuple[dict[str, float], dict[str, float]]:
    """Average every scalar numeric metric over the episodes that report it, and the reward-term sums."""
    sums: dict[str, list[float]] = {}
    terms: dict[str, list[float]] = {}
    for m in all_metrics:
        for key, value in m.items():
            if isinstance(value, bool | int | float) and not isinstance(value, str):
                sums.setdefault(key, []).append(float(value))
        for key, value in m.get("reward_terms", {}).items():
            terms.setdefault(key, []).append(float(value))
    return {k: float(np.mean(v)) for k, v in sums.items()}, {k: float(np.mean(v)) for k, v in terms.items()}


def evaluate_mission(
    predict: PredictFn,
    n_episodes: int,
    seeds: list[int] | None = None,
    policy_name: str = "model",
    env_kwargs: dict[str, Any] | None = None,
) -> EvalResult:
    """Play ``n_episodes`` Mission Gym episodes (episode k on seed ``seeds[k]``), many side by side.

    :param predict: maps an observation batch ``(n, obs_dim)`` to actions ``(n, n_attackers)``
    :param n_episodes: number of episodes
    :param seeds: one seed per episode (default: the held-out list)
    :param env_kwargs: ``MissionVecEnv`` keyword arguments (config_dir, scenario, section overrides)
    """
    return evaluate_mission_blocks(predict, n_episodes, 1, seeds, policy_name, env_kwargs)[0]


def evaluate_mission_blocks(
    predict: PredictFn,
    n_episodes: int,
    blocks: int,
    seeds: list[int] | None = None,
    policy_name: str = "model",
    env_kwargs: dict[str, Any] | None = None,
    threads: int = 1,
) -> list[EvalResult]:
    """:func:`evaluate_mission` for ``blocks`` policies at once (a batch's members): each plays the same episodes in
    its own block of games, all stepped together (on ``threads`` CPU threads); ``predict`` maps the blocks'
    observations, block after block, to their actions. One result per block, each what :func:`evaluate_mission`
    gives that policy alone."""
    from mission_gym.envs import MissionVecEnv

    seeds = seeds if seeds is not None else held_out_seeds(n_episodes)
    returns: list[list[float]] = [[] for _ in range(blocks)]
    metrics: list[list[dict[str, Any]]] = [[] for _ in range(blocks)]
    modes: list[str] = []  # each episode's defender modes, e.g. "guard_objective+patrol"
    for start in range(0, n_episodes, MAX_BATCH):
        wave = seeds[start : start + MAX_BATCH]
        n = len(wave)
        venv = MissionVecEnv(n * blocks, threads=threads, **(env_kwargs or {}))
        venv.seed_envs(list(wave) * blocks)
        obs = venv.reset()
        modes += ["+".join(sorted(venv.core.defender_modes(i))) for i in range(n)]
        done = np.zeros(n * blocks, dtype=bool)
        ep_return = np.zeros(n * blocks)
        results: list[dict[str, Any] | None] = [None] * (n * blocks)
        while not done.all():
            obs, rewards, dones, infos = venv.step(predict(obs))
            ep_return += np.where(done, 0.0, rewards)
            for i in np.flatnonzero(dones & ~done):
                results[i] = infos[i]["episode_metrics"]
                done[i] = True
        for i, m in enumerate(results):
            assert m is not None
            metrics[i // n].append(m)
            returns[i // n].append(float(ep_return[i]))
    return [summarize(policy_name, seeds[:n_episodes], r, m, modes) for r, m in zip(returns, metrics)]


def summarize(
    policy_name: str, seeds: list[int], returns: list[float], metrics: list[dict[str, Any]], modes: list[str]
) -> EvalResult:
    """The result of Mission Gym episodes played on ``seeds``: each one's return, episode metrics and defenders'
    modes (sorted, joined by "+")."""
    from mission_gym.envs import ENV_ID

    n = len(metrics)
    wins = sum(int(m["win"]) for m in metrics)
    mean_metrics, mean_terms = _mean_metrics(metrics)
    return EvalResult(
        env_id=ENV_ID,
        policy=policy_name,
        episodes=n,
        seeds=list(seeds),
        mean_return=float(np.mean(returns)),
        std_return=float(np.std(returns)),
        mean_length=float(np.mean([int(m["steps"]) for m in metrics])),
        win_rate=wins / n,
        win_ci95=wilson_interval(wins, n),
        outcomes=dict(Counter(str(m["outcome"]) for m in metrics)),
        metrics=mean_metrics,
        reward_terms=mean_terms,
        returns=list(returns),
        by_defender_modes=_by_modes(modes, metrics),
        won=[int(m["win"]) for m in metrics],
        situations=list(modes),
    )


@dataclass
class BestOf:
    """What a policy's own action distribution wins: per situation (and ``all``), the deterministic play's win rate,
    one sampled play's (the mean over the ``plays``) and the share of starts that some sampled play won."""

    plays: int
    rows: dict[str, dict[str, float]]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def best_of(deterministic: EvalResult, sampled: list[EvalResult]) -> BestOf:
    """:class:`BestOf` of the same games played deterministically and ``len(sampled)`` times with sampled actions."""
    won = np.array([r.won for r in sampled])  # (plays, games)
    keys = ["all", *deterministic.by_defender_modes]
    rows = {}
    for key in keys:
        games = [i for i, s in enumerate(deterministic.situations) if key == "all" or s == key]
        rows[key] = {
            "games": len(games),
            "deterministic": float(np.mean([deterministic.won[i] for i in games])),
            "sampled": float(won[:, games].mean()),
            "some_play": float(won[:, games].any(axis=0).mean()),
        }
    return BestOf(len(sampled), rows)


def by_guards(by_modes: dict[str, dict[str, Any]]) -> dict[int, tuple[int, int]]:
    """Wins and games by how many defenders guard the objective (what decides between a decoy and a rush): the
    rows of ``by_defender_modes`` summed by their count of ``guard_objective``."""
    out: dict[int, tuple[int, int]] = {}
    for key, row in by_modes.items():
        n = key.split("+").count("guard_objective")
        wins, games = out.get(n, (0, 0))
        out[n] = (wins + int(row["wins"]), games + int(row["episodes"]))
    return dict(sorted(out.items()))


def _by_modes(modes: list[str], metrics: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Episodes, wins, win rate and outcome counts per combination of the defenders' modes (most episodes first)."""
    out: dict[str, dict[str, Any]] = {}
    for key, m in zip(modes, metrics):
        row = out.setdefault(key, {"episodes": 0, "wins": 0, "outcomes": Counter()})
        row["episodes"] += 1
        row["wins"] += int(m["win"])
        row["outcomes"][str(m["outcome"])] += 1
    for row in out.values():
        row["win_rate"] = row["wins"] / row["episodes"]
        row["outcomes"] = dict(row["outcomes"])
    return dict(sorted(out.items(), key=lambda kv: (-kv[1]["episodes"], kv[0])))


def evaluate_gym(
    predict: PredictFn,
    env_id: str,
    n_episodes: int,
    seeds: list[int] | None = None,
    policy_name: str = "model",
    env_kwargs: dict[str, Any] | None = None,
    make_env: Callable[[], Any] | None = None,
) -> EvalResult:
    """Play ``n_episodes`` of any Gymnasium id one after another (episode k on seed ``seeds[k]``), each episode's
    return and length as SB3's ``Monitor`` under the env's wrappers records them (a wrapper that clips rewards or
    ends an episode at a lost life does not change the task's own score), as rl-baselines3-zoo evaluates.

    :param predict: maps an observation batch of one (a Dict observation: a dict of such batches) to actions
    :param make_env: builds a one-env SB3 ``VecEnv`` as training sees the task (its wrappers and frame stack:
        :func:`mission_gym.vec.factory.make_eval_env`); default ``gym.make(env_id, **env_kwargs)`` under a ``Monitor``
    """
    seeds = seeds if seeds is not None else held_out_seeds(n_episodes)
    if make_env is None:
        make_env = _plain_env(env_id, env_kwargs or {})
    venv = make_env()
    returns: list[float] = []
    lengths: list[int] = []
    try:
        for seed in seeds[:n_episodes]:
            venv.seed(seed)
            obs = venv.reset()
            while True:
                obs, _, _, infos = venv.step(predict(obs))
                episode = infos[0].get("episode")
                if episode is not None:
                    returns.append(float(episode["r"]))
                    lengths.append(int(episode["l"]))
                    break
    finally:
        venv.close()
    return EvalResult(
        env_id=env_id,
        policy=policy_name,
        episodes=n_episodes,
        seeds=list(seeds[:n_episodes]),
        mean_return=float(np.mean(returns)),
        std_return=float(np.std(returns)),
        mean_length=float(np.mean(lengths)),
        returns=returns,
    )


def _plain_env(env_id: str, env_kwargs: dict[str, Any]) -> Callable[[], Any]:
    """A maker of one ``gym.make`` env under SB3's ``Monitor`` in a ``DummyVecEnv``."""

    def make() -> Any:
        import gymnasium as gym
        from stable_baselines3.common.monitor import Monitor
        from stable_baselines3.common.vec_env import DummyVecEnv

        return DummyVecEnv([lambda: Monitor(gym.make(env_id, **env_kwargs))])

    return make
