"""States files: won games kept as states for a run's restarts to start from (:mod:`mission_gym.extras.restarts`),
the scenario each was recorded on, and the starts a run finds for itself (``restarts[].find``).

A states file holds, for every won game of a recording, the simulation's state every few steps (everything but the
random stream, :meth:`~mission_gym.sim.core.MissionCore.save_state`) with the steps left to the game's end, and the
scenario it was played on (its name and :meth:`~mission_gym.config.MissionConfig.scenario_fingerprint`): a run on any
other scenario refuses it, as it refuses a file that does not say.

A run finds its own starts the way Go-Explore (Ecoffet et al., Nature 2021) explores before it robustifies: it plays
games in the simulator with a privileged lookahead (:mod:`mission_gym.agents.lookahead`: returning to saved states and
trying the policy's sampled plays from them) over the scripted greedy fleet at its start, or over its own best policy
later, and the backward algorithm of the restarts turns the won games into a policy that wins without the lookahead.
Every recording is seeded by the run, so a run stopped while it records records the same states when it resumes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mission_gym.config import ConfigError, MissionConfig
from mission_gym.rundir.files import atomic_open
from mission_gym.sim import layout as L
from mission_gym.sim.core import STATE_ARRAYS

#: what a restart restores: every array of a game's state but its random stream (the env keeps its own)
RESTORED = tuple(name for name in STATE_ARRAYS if name != "rng")
#: the first seed of recorded games: neither training (small numbers), in-training evaluation (500M) nor held-out
#: evaluation (900M) plays them
RECORD_SEED_BASE = 600_000_000
#: games a policy's own play is measured on to find the situation it loses most (``find.situation: worst``)
RANKING_GAMES = 1000
#: the share of those games a situation needs to be ranked (rarer ones say too little)
RANKED_SHARE = 0.02


def record_model_states(
    model: str | Path,
    out: str | Path,
    games: int = 200,
    every: int = 5,
    trust_pickle: bool = False,
    situation: str | None = None,
    lookahead: Any = None,
    threads: int = 1,
    lost_only: bool = False,
) -> int:
    """:func:`record_states` of a saved model (deterministic actions, its own observation statistics and game;
    ``trust_pickle``: a model saved before the safe agent files), or with ``lookahead`` (a
    :class:`~mission_gym.agents.lookahead.LookaheadBudget`) :func:`record_lookahead_states` over its sampled plays.
    ``situation`` (``MODE+MODE``): only games whose defenders draw those modes; ``lost_only``: only the games of
    those ``games`` that the model's deterministic play loses (where a plan it does not play yet is needed).

    :raises ConfigError: when it wins no game, or (``lost_only``) loses none
    """
    from mission_gym.agents.loading import load_agent

    agent = load_agent(model, trust_pickle=trust_pickle)
    seeds = record_seeds(games, agent.env_kwargs, situation)
    if lost_only:
        seeds = lost_seeds(agent.predict, seeds, agent.env_kwargs, threads)
    if lookahead is not None:
        propose = lambda o: agent.predict(o, deterministic=False)  # noqa: E731
        return record_lookahead_states(propose, out, agent.env_kwargs, seeds, lookahead, threads)
    return record_states(agent.predict, out, agent.env_kwargs, len(seeds), every, seeds=seeds)


def record_seeds(games: int, env_kwargs: dict[str, Any], situation: str | None = None) -> list[int]:
    """The seeds of ``games`` games to record, from :data:`RECORD_SEED_BASE` up (only ``situation``'s, if given)."""
    from mission_gym.evaluation import situation_seeds

    if situation is None:
        return [RECORD_SEED_BASE + k for k in range(games)]
    return situation_seeds(situation, games, env_kwargs, base=RECORD_SEED_BASE)


def lost_seeds(
    predict: Any, seeds: list[int], env_kwargs: dict[str, Any], threads: int = 1, none_ok: bool = False
) -> list[int]:
    """The seeds among ``seeds`` whose game ``predict`` loses.

    :raises ConfigError: when it loses none (unless ``none_ok``)
    """
    from mission_gym.evaluation import evaluate_mission_blocks

    played = evaluate_mission_blocks(predict, len(seeds), 1, seeds, env_kwargs=env_kwargs, threads=threads)[0]
    lost = [seed for seed, won in zip(seeds, played.won) if not won]
    if not lost and not none_ok:
        raise ConfigError(f"record_states --lost-only: the agent won all {len(seeds)} games; play more (--games)")
    return lost


def record_states(
    predict: Any,
    out: str | Path,
    env_kwargs: dict[str, Any],
    games: int = 200,
    every: int = 5,
    seed_base: int = RECORD_SEED_BASE,
    seeds: list[int] | None = None,
    threads: int = 1,
    empty_ok: bool = False,
) -> int:
    """Play ``games`` games of ``predict`` (observations -> actions; on ``seeds``, else from ``seed_base`` up) and
    save, for the games it wins, the state every ``every`` steps with the steps left to the game's end, to ``out``
    (``.npz``); the states saved.

    :raises ConfigError: when it wins no game (unless ``empty_ok``: the file then holds none)
    """
    seeds = seeds or [seed_base + k for k in range(games)]
    return _record_plays(predict, [(out, seeds)], env_kwargs, every, threads, empty_ok)[0]


def _groups(blocks: list[tuple[str | Path, list[int]]]) -> np.ndarray:
    """Each game's group (its block) when the blocks' games are played one after another in one core."""
    return np.repeat(np.arange(len(blocks)), [len(seeds) for _, seeds in blocks])


def _record_plays(
    predict: Any,
    blocks: list[tuple[str | Path, list[int]]],
    env_kwargs: dict[str, Any],
    every: int,
    threads: int,
    empty_ok: bool,
) -> list[int]:
    """:func:`record_states` of several blocks ``(out, seeds)`` played together in one core; with more than one,
    ``predict(obs, groups)`` gets each row's block. The states written to each block's file."""
    from mission_gym.envs import MissionVecEnv

    seeds = [s for _, block in blocks for s in block]
    groups = _groups(blocks)
    env = MissionVecEnv(len(seeds), threads=threads, **env_kwargs)
    env.seed_envs(seeds)
    obs: Any = env.reset()
    taken = _Taken(env.core)
    ended = np.zeros(len(seeds), dtype=bool)
    t = 0
    while not ended.all():
        if t % every == 0:
            taken.visit(t, np.flatnonzero(~ended))
        obs, _, dones, infos = env.step(predict(obs) if len(blocks) == 1 else predict(obs, groups))
        t += 1
        done = np.flatnonzero(dones)  # the env starts another game there at once, which is not recorded
        taken.ends(done, t, [infos[i].get("outcome") == "captured" for i in done])
        ended[done] = True
    return [taken.write(out, empty_ok, np.flatnonzero(groups == g)) for g, (out, _) in enumerate(blocks)]


def record_lookahead_states(
    propose: Any,
    out: str | Path,
    env_kwargs: dict[str, Any],
    seeds: list[int],
    budget: Any,
    threads: int = 1,
    every: int | None = None,
    seed: int = 0,
    empty_ok: bool = False,
) -> int:
    """Play the games ``seeds`` by the lookahead over ``propose``'s sampled plays
    (:class:`~mission_gym.agents.lookahead.Lookahead` with ``budget``, its dice from ``seed``) and save the states of
    the games it wins every ``every`` steps (default: at each of its decisions), as :func:`record_states` does: the
    won games of a plan the policy alone does not play yet.

    :raises ConfigError: when it wins no game (unless ``empty_ok``: the file then holds none)
    """
    return _record_lookahead(propose, [(out, seeds)], env_kwargs, budget, threads, every, seed, empty_ok)[0]


def _record_lookahead(
    propose: Any,
    blocks: list[tuple[str | Path, list[int]]],
    env_kwargs: dict[str, Any],
    budget: Any,
    threads: int,
    every: int | None,
    seed: int,
    empty_ok: bool,
) -> list[int]:
    """:func:`record_lookahead_states` of several blocks ``(out, seeds)`` played together in one core, one lookahead;
    with more than one, ``propose(obs, groups)`` gets each row's block. The states written to each block's file."""
    from mission_gym.agents.lookahead import Lookahead
    from mission_gym.envs import MissionVecEnv

    seeds = [s for _, block in blocks for s in block]
    groups = _groups(blocks) if len(blocks) > 1 else None
    env = MissionVecEnv(len(seeds), threads=threads, **env_kwargs)
    env.seed_envs(seeds)
    env.reset()
    taken = _Taken(env.core)
    Lookahead(propose, budget, threads, seed, groups).play(env.core, taken.visit, every)
    core = env.core  # every game has ended, where it stands: its length is its step counter
    taken.ends(np.arange(core.n_envs), core.ev[:, L.E_STEP].astype(int), core.ev[:, L.E_OUTCOME] == L.O_CAPTURED)
    owner = groups if groups is not None else np.zeros(len(seeds), dtype=int)
    return [taken.write(out, empty_ok, np.flatnonzero(owner == g)) for g, (out, _) in enumerate(blocks)]


class _Taken:
    """States taken along each game of a core, and how each game ended, until written as a states file."""

    def __init__(self, core: Any) -> None:
        self.core = core
        self.states: list[list[tuple[int, dict[str, np.ndarray]]]] = [[] for _ in range(core.n_envs)]
        self.length = np.zeros(core.n_envs, dtype=int)
        self.won = np.zeros(core.n_envs, dtype=bool)

    def visit(self, t: int, games: np.ndarray) -> None:
        """Keep the state of each of ``games`` at step ``t`` (of games that have not ended yet)."""
        for i in games[self.length[games] == 0]:
            self.states[i].append((t, {name: getattr(self.core, name)[i].copy() for name in RESTORED}))

    def ends(self, games: np.ndarray, t: Any, won: Any) -> None:
        """``games`` ended at step ``t`` (one for all, or one each), each won or not (``won``, one each); only a
        game's first end counts."""
        for k, i in enumerate(games):
            if self.length[i] == 0:
                self.length[i], self.won[i] = np.broadcast_to(t, games.shape)[k], won[k]

    def write(self, out: str | Path, empty_ok: bool = False, games: np.ndarray | None = None) -> int:
        """Write the won games' states (of ``games``, default all; numbered from 0 in their order) with their steps to
        the end and the scenario they were played on; the states written (none, with ``empty_ok``, when no game was
        won: the restarts then start nothing from it)."""
        games = np.arange(self.core.n_envs) if games is None else games
        rows = [
            (k, self.length[i] - step, state) for k, i in enumerate(games) if self.won[i] for step, state in self.states[i]
        ]
        if not rows and not empty_ok:
            raise ConfigError(f"restarts: the policy won none of {len(games)} games; it has no states to restart from")
        core = self.core
        arrays: dict[str, Any] = {
            name: np.stack([state[name] for _, _, state in rows]) if rows else getattr(core, name)[:0].copy()
            for name in RESTORED
        }
        arrays.update(game=np.array([g for g, _, _ in rows], dtype=int), to_end=np.array([e for _, e, _ in rows], dtype=int))
        config = self.core.config
        arrays.update(scenario=np.array(config.scenario.name), fingerprint=np.array(config.scenario_fingerprint()))
        with atomic_open(out) as f:  # a killed recording leaves no half-written states file
            np.savez_compressed(f, **arrays)
        return len(rows)


def states_path(name: str | Path) -> Path:
    """A states file named in a configuration: the path as given, else one beside the presets (a user's own)."""
    from mission_gym.plan.presets import presets_dir

    path = Path(name)
    return path if path.is_absolute() or path.exists() else presets_dir() / path


class StartStates:
    """A states file (:func:`record_states`): each state's arrays, its game and its steps to the end.

    :param path: the file
    :param game: the configuration of the game it is to restart; a file recorded on another scenario, or that does
        not say which, is refused
    :raises ConfigError: naming the file and what is wrong
    """

    def __init__(self, path: str | Path, game: MissionConfig | None = None) -> None:
        try:
            with np.load(path) as data:
                self.arrays = {name: data[name] for name in RESTORED}
                self.to_end, games = data["to_end"], data["game"]
                said = "fingerprint" in data.files
                self.scenario = str(data["scenario"]) if said else None
                self.fingerprint = str(data["fingerprint"]) if said else None
        except (OSError, KeyError, ValueError) as exc:
            raise ConfigError(f"restarts.states {str(path)!r} is not a states file (record_states): {exc}") from None
        self.longest = int(self.to_end.max()) if self.to_end.size else 0
        # each game's first state (the most steps to its end): where a game shorter than the start restarts
        order = np.lexsort((-self.to_end, games))
        first = order[np.r_[True, games[order][1:] != games[order][:-1]]] if games.size else order
        self.first = first.astype(np.int64)
        self._near: dict[tuple[int, int], np.ndarray] = {}
        if game is not None:
            check_scenario(path, self.scenario, self.fingerprint, game)

    def near(self, back: int, window: int) -> np.ndarray:
        """The states ``back - window < to_end <= back`` steps before their game's end, and the first state of every
        game shorter than that (so every won game stays a start however far back the start has moved)."""
        key = (back, window)
        if key not in self._near:
            inside = np.flatnonzero((self.to_end <= back) & (self.to_end > back - window))
            short = self.first[self.to_end[self.first] <= back - window]
            self._near[key] = np.union1d(inside, short)
        return self._near[key]


def check_scenario(path: str | Path, scenario: str | None, fingerprint: str | None, game: MissionConfig) -> None:
    """Refuse, in one line naming both, states recorded on another scenario than ``game``'s, or that do not say.

    :raises ConfigError: then
    """
    fix = "record this scenario's (restarts find:, or tools/record_states.py) or set restarts: null"
    here = f"{game.scenario.name!r} ({game.scenario_fingerprint()})"
    if fingerprint is None:
        raise ConfigError(
            f"restarts.states {str(path)!r} does not say which scenario it was recorded on (this run plays {here}): {fix}"
        )
    if fingerprint != game.scenario_fingerprint():
        raise ConfigError(
            f"restarts.states {str(path)!r} was recorded on scenario {scenario!r} ({fingerprint}), another scenario than "
            f"this run's {here}: {fix}"
        )


# --- the starts a run finds for itself ------------------------------------------------------------------------------


@dataclass
class Found:
    """What a recording of a run's own starts did (the log, ``population.json`` and the dashboard)."""

    block: int
    step: int
    how: str
    games: int
    won: int
    states: int
    seconds: float
    cores: int = 1
    situation: str | None = None

    def line(self) -> str:
        where = f" ({self.situation})" if self.situation else ""
        kept = f"{self.states:,} states" if self.won else "no states: its games start afresh"
        return (
            f"starts for restarts[{self.block}] at step {self.step:,}: {self.how}{where}: won {self.won:,} of "
            f"{self.games:,} games, {kept} ({self.seconds:.0f} s)"
        )


class GreedyProposal:
    """The scripted greedy fleet's sampled play (:class:`~mission_gym.baselines.GreedyPolicy`): each command drawn at
    random with probability ``noise``, so the lookahead has plays to choose between.

    :param config: the game
    :param noise: the share of commands drawn at random
    :param seed: the draws' generator
    """

    def __init__(self, config: MissionConfig, noise: float, seed: int) -> None:
        from mission_gym.baselines import GreedyPolicy

        self.greedy = GreedyPolicy(config)
        self.noise = noise
        self.rng = np.random.default_rng(seed)

    def predict(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        """The greedy fleet's commands, some drawn at random unless ``deterministic``."""
        actions = self.greedy(obs)
        if deterministic or not self.noise:
            return actions
        drawn = self.rng.random(actions.shape) < self.noise
        actions[drawn] = self.rng.integers(0, L.N_ACTIONS, size=int(drawn.sum()))
        return actions


def _own_play(predict: Any, env_kwargs: dict[str, Any], threads: int, games: int) -> Any:
    """``predict``'s deterministic play of the first ``games`` record games (an evaluation result)."""
    from mission_gym.evaluation import evaluate_mission_blocks

    seeds = [RECORD_SEED_BASE + k for k in range(games)]
    return evaluate_mission_blocks(predict, len(seeds), 1, seeds, env_kwargs=env_kwargs, threads=threads)[0]


def worst_situation(
    predict: Any, env_kwargs: dict[str, Any], threads: int = 1, games: int = RANKING_GAMES
) -> tuple[str, float] | None:
    """The situation (the defenders' modes, sorted and joined by ``+``) whose games ``predict``'s deterministic play
    wins least, among ``games`` record games (:data:`RANKING_GAMES`; a situation needs :data:`RANKED_SHARE` of them),
    with its win rate; None when the game has one situation only (its modes are not drawn)."""
    rows = _own_play(predict, env_kwargs, threads, games).by_defender_modes
    ranked = [(row["win_rate"], key) for key, row in rows.items() if row["episodes"] >= RANKED_SHARE * games]
    if len(rows) < 2 or not ranked:
        return None
    rate, key = min(ranked)
    return key, rate


@dataclass
class Owner:
    """A policy whose starts a recording finds: it acts on raw observations (``predict(obs, deterministic)``), its
    won games go to ``out``, and ``whose`` names it in the log (e.g. ``m3's policy at 2,752,896 steps``)."""

    policy: Any
    out: str | Path
    whose: str = "the run's policy"


class _Grouped:
    """Several policies as one: each row of a batch acted on by its group's (a block of games of one core)."""

    def __init__(self, policies: list[Any]) -> None:
        self.policies = policies

    def predict(self, obs: np.ndarray, deterministic: bool, groups: np.ndarray) -> np.ndarray:
        out: np.ndarray | None = None
        for g in np.unique(groups):
            rows = np.flatnonzero(groups == g)
            actions = self.policies[g].predict(obs[rows], deterministic)
            if out is None:
                out = np.zeros((obs.shape[0], *actions.shape[1:]), dtype=actions.dtype)
            out[rows] = actions
        assert out is not None
        return out


def find_starts(
    find: Any,
    owners: list[Owner] | str | Path,
    env_kwargs: dict[str, Any],
    seed: int,
    threads: int = 1,
    block: int = 0,
    step: int = 0,
) -> list[Found]:
    """Record the starts ``find`` (a :class:`~mission_gym.settings.schema.FindStarts`) asks for: for each owner, the
    won games of ``games`` record games (of the situation its own play loses most, with ``situation: worst``) played
    by the lookahead over its sampled plays (or by its own play), into its file; every owner's games in one core and
    one lookahead. With ``policy: greedy``, ``owners`` is the one file the greedy fleet's games go to. Seeded by
    ``seed`` alone, so a recording made again writes the same states. A recording that wins no game writes a file of
    none (the block then restarts nothing). What each owner's recording did.
    """
    import torch

    from mission_gym.envs import MissionVecEnv

    t0 = time.perf_counter()
    torch.manual_seed(seed)  # the policies' sampled plays
    if not isinstance(owners, list):
        greedy = GreedyProposal(MissionVecEnv(1, **env_kwargs).core.config, find.noise, seed)
        owners = [Owner(greedy, owners)]
    where: list[str | None] = []  # which games each owner's recording plays, for the log
    blocks = []
    for o in owners:
        own = lambda obs, p=o.policy: p.predict(obs, deterministic=True)  # noqa: E731
        if find.situation == "lost":  # the first games of the ranking games its own play loses
            ranking = record_seeds(max(find.games, RANKING_GAMES), env_kwargs)
            lost = lost_seeds(own, ranking, env_kwargs, threads, none_ok=True)
            where.append(f"{len(lost):,} of {len(ranking):,} games lost by its own play")
            blocks.append((o.out, lost[: find.games]))
            continue
        ranked = worst_situation(own, env_kwargs, threads) if find.situation == "worst" else None
        where.append(f"{ranked[0]}, won {100 * ranked[1]:.0f}% by its own play" if ranked else None)
        blocks.append((o.out, record_seeds(find.games, env_kwargs, ranked[0] if ranked else None)))
    if not any(seeds for _, seeds in blocks):  # it lost none: nothing to record, each block starts afresh
        for out, _ in blocks:
            _Taken(MissionVecEnv(1, **env_kwargs).core).write(out, empty_ok=True)
        seconds = time.perf_counter() - t0
        return [Found(block, step, find.describe(o.whose), 0, 0, 0, seconds, threads, w) for o, w in zip(owners, where)]
    both = _Grouped([o.policy for o in owners])
    if len(owners) == 1:
        one = owners[0].policy
        deterministic: Any = lambda o: one.predict(o, deterministic=True)  # noqa: E731
        sampled: Any = lambda o: one.predict(o, deterministic=False)  # noqa: E731
    else:
        deterministic = lambda o, g: both.predict(o, True, g)  # noqa: E731
        sampled = lambda o, g: both.predict(o, False, g)  # noqa: E731
    if find.lookahead is not None:
        saved = _record_lookahead(sampled, blocks, env_kwargs, find.lookahead, threads, find.every, seed, True)
    else:
        saved = _record_plays(deterministic, blocks, env_kwargs, find.every, threads, True)
    seconds = time.perf_counter() - t0
    found = []
    for o, w, n, (out, seeds) in zip(owners, where, saved, blocks):
        with np.load(out) as data:
            won = len(set(data["game"].tolist()))
        found.append(Found(block, step, find.describe(o.whose), len(seeds), won, n, seconds, threads, w))
    return found
