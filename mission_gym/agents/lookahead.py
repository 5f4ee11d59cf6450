"""The lookahead: a privileged search over a policy's own plays on copies of the simulation, which finds what the
policy's action distribution can win (``evaluate --policy lookahead``) and won games for a run's restarts to start from
(:mod:`mission_gym.extras.found`). Named apart from the hyperparameter search (``mission-search``), which tunes runs.

Every ``every`` steps of each game, ``candidates`` action prefixes of ``every`` steps are drawn by playing the policy
(sampled actions) on copies of the game as it stands; each prefix is then played on ``copies`` further copies, each
with a fresh random stream (so no plan can exploit the real game's own dice), and continued ``horizon`` steps by the
sampled policy; the prefix whose copies win most (ties: the higher mean return, then the prefix itself) is played in
the real game. Copy ``r`` of a game uses the same random stream for every candidate, so a candidate's score depends on
its prefix alone, not on where it stands in the list. The lookahead reads and copies the simulator's whole state
(:meth:`~mission_gym.sim.core.MissionCore.save_state`), which no agent sees: it is a ceiling to measure a policy
against, not a policy to ship. Every game of a decision is searched at once in one batched core on every core.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from mission_gym.settings.starts import LookaheadBudget
from mission_gym.sim import layout as L
from mission_gym.sim.core import STATE_ARRAYS, MissionCore

#: a policy's sampled actions ``(n, attackers)`` for raw observations ``(n, obs_dim)``
Propose = Callable[[np.ndarray], np.ndarray]
#: indices of games in a core
Games = Sequence[int] | np.ndarray
__all__ = ["Games", "Lookahead", "LookaheadBudget", "Propose", "lookahead_results"]


def _states(core: MissionCore, games: Games) -> dict[str, np.ndarray]:
    return {name: getattr(core, name)[list(games)].copy() for name in STATE_ARRAYS}


def _copies(core: MissionCore, states: dict[str, np.ndarray], repeat: int, streams: np.ndarray, threads: int) -> MissionCore:
    """A core of ``repeat`` copies of each saved game (game after game), each copy on its own random stream."""
    out = MissionCore(core.config, n_envs=len(streams), threads=threads)
    for name in STATE_ARRAYS:
        getattr(out, name)[:] = np.repeat(states[name], repeat, axis=0)
    out.rng[:] = streams
    return out


def _play(core: MissionCore, steps: int, act: Callable[[int, np.ndarray], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Step the games of ``core`` ``steps`` times or until all have ended, ``act(step, rows)`` giving the actions of
    the games still running (``rows``; an ended game stands still); each game's summed reward and whether it was won."""
    returns = np.zeros(core.n_envs)
    actions = np.zeros((core.n_envs, core.n_attackers), dtype=np.int64)
    for k in range(steps):
        rows = np.flatnonzero(core.ev[:, L.E_OUTCOME] == L.O_NONE)
        if rows.size == 0:
            break
        actions[rows] = act(k, rows)
        _, rewards, _, _ = core.step(actions)
        returns += rewards  # an ended game's reward is 0
    return returns, core.ev[:, L.E_OUTCOME] == L.O_CAPTURED


class Lookahead:
    """The lookahead over ``propose``'s plays (see the module doc).

    :param propose: the policy's sampled actions
    :param budget: how hard it looks
    :param threads: CPU threads the copies step on
    :param seed: the lookahead's own random streams (the copies' dice)
    :param groups: each game's group in the core it plays (several policies at once, one per group): ``propose`` is
        then called with each row's group too, ``propose(obs, groups)``
    """

    def __init__(
        self, propose: Any, budget: LookaheadBudget, threads: int = 1, seed: int = 0, groups: np.ndarray | None = None
    ) -> None:
        self.propose, self.budget, self.threads, self.groups = propose, budget, threads, groups
        self.rng = np.random.default_rng(seed)

    def _ask(self, obs: np.ndarray, rows: np.ndarray, per_game: int, games: Games) -> np.ndarray:
        """The sampled actions for copies ``rows`` (``per_game`` copies of each of ``games``, game after game)."""
        if self.groups is None:
            return self.propose(obs)
        return self.propose(obs, self.groups[np.asarray(games)[rows // per_game]])

    def _streams(self, n: int) -> np.ndarray:
        return self.rng.integers(0, 2**63, size=n, dtype=np.uint64)

    def prefixes(self, core: MissionCore, games: Games) -> np.ndarray:
        """``candidates`` prefixes for each of ``games``, drawn by the sampled policy on copies:
        ``(games, candidates, every, attackers)``."""
        b = self.budget
        copies = _copies(core, _states(core, games), b.candidates, self._streams(len(games) * b.candidates), self.threads)
        drawn = np.zeros((b.every, copies.n_envs, core.n_attackers), dtype=np.int64)

        def act(k: int, rows: np.ndarray) -> np.ndarray:
            drawn[k, rows] = self._ask(copies.obs[rows], rows, b.candidates, games)
            return drawn[k, rows]

        _play(copies, b.every, act)
        return drawn.reshape(b.every, len(games), b.candidates, -1).transpose(1, 2, 0, 3)

    def scores(self, core: MissionCore, games: Games, prefixes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Wins out of ``copies`` and mean return of each game's candidate ``prefixes`` ``(games, candidates, every,
        attackers)``: each played on copies of its game, copy ``r`` on the same random stream for every candidate,
        then the sampled policy for ``horizon`` steps."""
        b = self.budget
        n_games, n_cand = prefixes.shape[:2]
        per_copy = self._streams(n_games * b.copies).reshape(n_games, 1, b.copies)  # the same for every candidate
        streams = np.broadcast_to(per_copy, (n_games, n_cand, b.copies)).reshape(-1)
        copies = _copies(core, _states(core, games), n_cand * b.copies, streams, self.threads)
        # the prefix of env (game, candidate, copy) at each step
        scripted = np.repeat(prefixes.reshape(n_games * n_cand, b.every, -1), b.copies, axis=0)

        def act(k: int, rows: np.ndarray) -> np.ndarray:
            return scripted[rows, k] if k < b.every else self._ask(copies.obs[rows], rows, n_cand * b.copies, games)

        returns, won = _play(copies, b.every + b.horizon, act)
        shape = (n_games, n_cand, b.copies)
        return won.reshape(shape).sum(axis=2), returns.reshape(shape).mean(axis=2)

    def choose(self, prefixes: np.ndarray, wins: np.ndarray, returns: np.ndarray) -> np.ndarray:
        """Each game's best prefix ``(games, every, attackers)``: most wins, then the higher mean return, then the
        prefix itself (its bytes), so the choice does not depend on the candidates' order."""
        out = np.empty((prefixes.shape[0], *prefixes.shape[2:]), dtype=prefixes.dtype)
        for g in range(prefixes.shape[0]):
            keys = [(int(wins[g, c]), float(returns[g, c]), prefixes[g, c].tobytes()) for c in range(prefixes.shape[1])]
            out[g] = prefixes[g, max(range(len(keys)), key=keys.__getitem__)]
        return out

    def decide(self, core: MissionCore, games: Games) -> np.ndarray:
        """The next ``every`` actions of each of ``games``."""
        prefixes = self.prefixes(core, games)
        wins, returns = self.scores(core, games, prefixes)
        return self.choose(prefixes, wins, returns)

    def play(
        self, core: MissionCore, visit: Callable[[int, np.ndarray], None] | None = None, visit_every: int | None = None
    ) -> None:
        """Play every game of ``core`` to its end, each decision from the lookahead; ``visit(step, games)`` is called
        with the games still running every ``visit_every`` steps (default: before each decision), to record their
        states."""
        every = self.budget.every
        visit_every = visit_every or every
        step = 0
        while True:
            games = np.flatnonzero(core.ev[:, L.E_OUTCOME] == L.O_NONE)
            if games.size == 0:
                return
            plan = np.zeros((core.n_envs, every, core.n_attackers), dtype=np.int64)
            plan[games] = self.decide(core, games)
            for k in range(0, every, visit_every):  # the plan in pieces, a visit before each
                running = np.flatnonzero(core.ev[:, L.E_OUTCOME] == L.O_NONE)
                if running.size == 0:
                    return
                if visit is not None:
                    visit(step + k, running)

                def scripted(j: int, rows: np.ndarray, plan: np.ndarray = plan, k: int = k) -> np.ndarray:
                    return plan[rows, k + j]

                _play(core, min(visit_every, every - k), scripted)
            step += every


def lookahead_results(
    propose: Propose,
    seeds: list[int],
    env_kwargs: dict[str, Any] | None,
    budget: LookaheadBudget,
    threads: int = 1,
    seed: int = 0,
    wave: int = 256,
) -> list[dict[str, Any]]:
    """Each held-out game (episode ``k`` on ``seeds[k]``, the games ``evaluate`` plays) played by the lookahead: its
    episode metrics and its defenders' modes."""
    from mission_gym.envs import MissionVecEnv

    lookahead = Lookahead(propose, budget, threads, seed)
    out: list[dict[str, Any]] = []
    for start in range(0, len(seeds), wave):
        chunk = seeds[start : start + wave]
        venv = MissionVecEnv(len(chunk), threads=threads, **(env_kwargs or {}))
        venv.seed_envs(list(chunk))
        venv.reset()
        core = venv.core
        modes = [core.defender_modes(i) for i in range(len(chunk))]
        lookahead.play(core)
        out += [{**core.episode_metrics(i), "defender_modes": modes[i]} for i in range(len(chunk))]
    return out
