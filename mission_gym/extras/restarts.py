"""Training games started from states along a winning member's won games (``restarts:`` in a configuration).

Finding the plan that beats the defenders is a search through hundreds of steps with a reward only at the end; the
backward algorithm (Salimans & Chen 2018) shortens it by starting training episodes near the end of a demonstration
and moving the start back as the agent succeeds from there. Here the demonstrations are a winning member's won games:
:func:`record_states` plays them and keeps the simulation's state every few steps (everything but the random stream,
:meth:`~mission_gym.sim.core.MissionCore.save_state`); during training a ``share`` of the games that end start anew
from a state ``back`` steps before the end of one of them, in the env's own random stream (so the defenders' later
choices differ from the recorded game), and ``back`` grows by ``step`` whenever at least ``advance_at`` of those
games in a rollout are won. From env step ``until`` every game starts afresh. Evaluation always plays whole games.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback

from mission_gym.config import ConfigError
from mission_gym.rundir.files import atomic_open
from mission_gym.sim import layout as L
from mission_gym.sim.core import STATE_ARRAYS

#: what a restart restores: every array of a game's state but its random stream (the env keeps its own)
RESTORED = tuple(name for name in STATE_ARRAYS if name != "rng")
#: a rollout's restarted games that must end before the start may move back
MIN_GAMES = 8


def record_model_states(
    model: str | Path,
    out: str | Path,
    games: int = 200,
    every: int = 5,
    trust_pickle: bool = False,
    situation: str | None = None,
    search: Any = None,
    threads: int = 1,
    lost_only: bool = False,
) -> int:
    """:func:`record_states` of a saved model (deterministic actions, its own observation statistics and game;
    ``trust_pickle``: a model saved before the safe agent files), or with ``search`` (a
    :class:`~mission_gym.agents.search.SearchBudget`) :func:`record_search_states` over its sampled plays.
    ``situation`` (``MODE+MODE``): only games whose defenders draw those modes; ``lost_only``: only the games of
    those ``games`` that the model's deterministic play loses (where a plan it does not play yet is needed).

    :raises ConfigError: when it wins no game, or (``lost_only``) loses none
    """
    from mission_gym.agents.loading import load_agent

    agent = load_agent(model, trust_pickle=trust_pickle)
    seeds = record_seeds(games, agent.env_kwargs, situation)
    if lost_only:
        seeds = lost_seeds(agent.predict, seeds, agent.env_kwargs, threads)
    if search is not None:
        propose = lambda o: agent.predict(o, deterministic=False)  # noqa: E731
        return record_search_states(propose, out, agent.env_kwargs, seeds, search, threads)
    return record_states(agent.predict, out, agent.env_kwargs, len(seeds), every, seeds=seeds)


#: the first seed of recorded games: neither training (small numbers), in-training evaluation (500M) nor held-out
#: evaluation (900M) plays them
RECORD_SEED_BASE = 600_000_000


def record_seeds(games: int, env_kwargs: dict[str, Any], situation: str | None = None) -> list[int]:
    """The seeds of ``games`` games to record, from :data:`RECORD_SEED_BASE` up (only ``situation``'s, if given)."""
    from mission_gym.evaluation import situation_seeds

    if situation is None:
        return [RECORD_SEED_BASE + k for k in range(games)]
    return situation_seeds(situation, games, env_kwargs, base=RECORD_SEED_BASE)


def lost_seeds(predict: Any, seeds: list[int], env_kwargs: dict[str, Any], threads: int = 1) -> list[int]:
    """The seeds among ``seeds`` whose game ``predict`` loses.

    :raises ConfigError: when it loses none
    """
    from mission_gym.evaluation import evaluate_mission_blocks

    played = evaluate_mission_blocks(predict, len(seeds), 1, seeds, env_kwargs=env_kwargs, threads=threads)[0]
    lost = [seed for seed, won in zip(seeds, played.won) if not won]
    if not lost:
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
) -> int:
    """Play ``games`` games of ``predict`` (observations -> actions; on ``seeds``, else from ``seed_base`` up) and
    save, for the games it wins, the state every ``every`` steps with the steps left to the game's end, to ``out``
    (``.npz``); the states saved.

    :raises ConfigError: when it wins no game
    """
    from mission_gym.envs import MissionVecEnv

    seeds = seeds or [seed_base + k for k in range(games)]
    env = MissionVecEnv(len(seeds), **env_kwargs)
    env.seed_envs(seeds)
    obs: Any = env.reset()
    taken = _Taken(env.core)
    ended = np.zeros(len(seeds), dtype=bool)
    t = 0
    while not ended.all():
        if t % every == 0:
            taken.visit(t, np.flatnonzero(~ended))
        obs, _, dones, infos = env.step(predict(obs))
        t += 1
        done = np.flatnonzero(dones)  # the env starts another game there at once, which is not recorded
        taken.ends(done, t, [infos[i].get("outcome") == "captured" for i in done])
        ended[done] = True
    return taken.write(out)


def record_search_states(
    propose: Any, out: str | Path, env_kwargs: dict[str, Any], seeds: list[int], budget: Any, threads: int = 1
) -> int:
    """Play the games ``seeds`` by the privileged search over ``propose``'s sampled plays
    (:class:`~mission_gym.agents.search.Search` with ``budget``) and save the states of the games it wins at each of
    its decisions, as :func:`record_states` does: the won games of a plan the policy alone does not play yet.

    :raises ConfigError: when it wins no game
    """
    from mission_gym.agents.search import Search
    from mission_gym.envs import MissionVecEnv

    env = MissionVecEnv(len(seeds), threads=threads, **env_kwargs)
    env.seed_envs(seeds)
    env.reset()
    taken = _Taken(env.core)
    Search(propose, budget, threads).play(env.core, taken.visit)
    core = env.core  # every game has ended, where it stands: its length is its step counter
    taken.ends(np.arange(core.n_envs), core.ev[:, L.E_STEP].astype(int), core.ev[:, L.E_OUTCOME] == L.O_CAPTURED)
    return taken.write(out)


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

    def write(self, out: str | Path) -> int:
        """Write the won games' states with their steps to the end; the states written."""
        rows = [(i, self.length[i] - step, state) for i in np.flatnonzero(self.won) for step, state in self.states[i]]
        if not rows:
            raise ConfigError(f"restarts: the policy won none of {self.core.n_envs} games; it has no states to restart from")
        arrays: dict[str, Any] = {name: np.stack([state[name] for _, _, state in rows]) for name in RESTORED}
        arrays.update(game=np.array([g for g, _, _ in rows]), to_end=np.array([e for _, e, _ in rows]))
        with atomic_open(out) as f:  # a killed recording leaves no half-written states file
            np.savez_compressed(f, **arrays)
        return len(rows)


def states_path(name: str | Path) -> Path:
    """A states file named in a configuration: the path as given, else one shipped beside the presets."""
    from mission_gym.settings.presets import presets_dir

    path = Path(name)
    return path if path.is_absolute() or path.exists() else presets_dir() / path


class StartStates:
    """A states file (:func:`record_states`): each state's arrays, its game and its steps to the end."""

    def __init__(self, path: str | Path) -> None:
        try:
            with np.load(path) as data:
                self.arrays = {name: data[name] for name in RESTORED}
                self.to_end = data["to_end"]
        except (OSError, KeyError, ValueError) as exc:
            raise ConfigError(f"restarts.states {str(path)!r} is not a states file (record_states): {exc}") from None
        self.longest = int(self.to_end.max())

    def near(self, back: int, window: int) -> np.ndarray:
        """The states ``back - window < to_end <= back`` steps before their game's end (the earliest, once ``back``
        passes every recorded game's start)."""
        back = min(back, self.longest)
        return np.flatnonzero((self.to_end <= back) & (self.to_end > back - window))


class Restarter:
    """The training env's reset hook: start a share of the games an auto-reset starts from recorded states.

    :param n_envs: the env's games
    :param states: the recorded states
    :param share: the share of games restarted
    :param back: the first start, in steps before a won game's end
    :param step: how far the start moves back at each advance
    """

    def __init__(self, n_envs: int, states: StartStates, share: float, back: int, step: int, seed: int) -> None:
        self.states, self.share, self.back, self.step = states, share, back, step
        self.rng = np.random.default_rng(seed)
        self.restarted = np.zeros(n_envs, dtype=bool)
        self.ended_restarted = np.zeros(0, dtype=bool)  # for each env just reset: was its ended game a restart

    def __call__(self, done_ids: np.ndarray, games: Any) -> None:
        """Restart some of the games ``done_ids`` just started anew; ``games`` holds the env's state arrays (its
        ``MissionCore``, or its slice of a batch's core)."""
        self.ended_restarted = self.restarted[done_ids].copy()
        pick = done_ids[self.rng.random(done_ids.size) < self.share]
        self.restarted[done_ids] = False
        near = self.states.near(self.back, self.step)
        if not pick.size or not near.size:
            return
        chosen = self.rng.choice(near, size=pick.size)
        for name, array in self.states.arrays.items():
            getattr(games, name)[pick] = array[chosen]
        self.restarted[pick] = True


class RestartsCallback(BaseCallback):
    """Restarts from the block of ``restarts`` whose span holds the run's step (none outside every span): moves its
    start back when the rollout's restarted games are won often enough. Logs ``restarts/back`` (steps before the
    end) and ``restarts/win_rate`` (of the rollout's restarted games).

    :param env: the training env (its ``reset_hook``)
    :param blocks: each ``restarts`` block with its states
    :param seed: the run's seed; a block's restarts draw from ``seed`` + the step they begin at
    :param step: the session's first env step
    """

    def __init__(self, env: Any, blocks: list[tuple[Any, StartStates]], seed: int, step: int) -> None:
        super().__init__()
        self.env, self.blocks, self.seed = env, blocks, seed
        self.active: int | None = None
        self.restarter: Restarter | None = None
        self.advance_at = 1.0
        self.wins = self.games = 0
        self._switch(step)

    def _switch(self, t: int) -> None:
        """Restart from the block whose span holds step ``t``, a fresh :class:`Restarter` when it changes."""
        active = next((k for k, (spec, _) in enumerate(self.blocks) if spec.start <= t < spec.until), None)
        if active == self.active:
            return
        self.active, self.restarter = active, None
        if active is not None:
            spec, states = self.blocks[active]
            self.restarter = Restarter(self.env.num_envs, states, spec.share, spec.back, spec.step, seed=self.seed + t)
            self.advance_at = spec.advance_at
        self.env.reset_hook = self.restarter

    def _on_rollout_start(self) -> None:
        self._switch(self.model.num_timesteps)
        self.wins = self.games = 0

    def _on_step(self) -> bool:
        dones = self.locals["dones"]
        if self.restarter is None or not dones.any():
            return True
        infos = self.locals["infos"]
        for i, was in zip(np.flatnonzero(dones), self.restarter.ended_restarted):
            if was:
                self.games += 1
                self.wins += infos[i].get("outcome") == "captured"
        return True

    def _on_rollout_end(self) -> None:
        restarter = self.restarter
        if restarter is None:
            return
        rate = self.wins / self.games if self.games else 0.0
        if self.games >= MIN_GAMES and rate >= self.advance_at:  # no further back than the longest game's start
            restarter.back = min(restarter.back + restarter.step, restarter.states.longest)
        self.logger.record("restarts/back", restarter.back)
        if self.games:
            self.logger.record("restarts/win_rate", rate)


def restarts_part(config: Any, venv: Any, step: int) -> RestartsCallback | None:
    """The run part ``restarts``: the training env's reset hook, and the callback that moves the start back and
    changes blocks at their steps; None without ``restarts`` or once the run is past every block's ``until``.

    :raises ConfigError: for a training env without Mission Gym's batched core, or a file that is no states file
    """
    blocks = [b for b in config.restarts or [] if step < b.until]
    if not blocks:
        return None
    env = getattr(venv, "unwrapped", venv)
    core = getattr(env, "core", None)
    if core is None or not hasattr(env, "reset_hook"):
        raise ConfigError(
            f"restarts needs Mission Gym's batched training env (vec_env native), got {config.vec_env!r}: use "
            "--vec-env native or set restarts: null"
        )
    shapes = {name: getattr(core, name).shape[1:] for name in RESTORED}
    loaded = []
    for block in blocks:
        states = StartStates(states_path(block.states))
        if any(states.arrays[name].shape[1:] != shapes[name] for name in RESTORED):
            raise ConfigError(
                f"restarts.states {block.states!r} holds games of another scenario than this run's: record this "
                "scenario's (tools/record_states.py) or set restarts: null"
            )
        loaded.append((block, states))
    return RestartsCallback(env, loaded, config.seed, step)
