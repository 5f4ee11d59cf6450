"""Training games started from states along won games (``restarts:`` in a configuration).

Finding the plan that beats the defenders is a search through hundreds of steps with a reward only at the end; the
backward algorithm (Salimans & Chen 2018) shortens it by starting training episodes near the end of a demonstration
and moving the start back as the agent succeeds from there. The demonstrations are won games kept as states every few
steps (:mod:`mission_gym.extras.starts`: a states file a user names, or the won games a run finds itself with the
lookahead); during training a ``share`` of the games that end start anew from a state ``back`` steps before the end
of one of them, in the env's own random stream (so the defenders' later choices differ from the recorded game), and
``back`` grows by ``step`` whenever at least ``advance_at`` of those games in a rollout are won. From env step
``until`` every game starts afresh. Evaluation always plays whole games.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback

from mission_gym.config import ConfigError
from mission_gym.extras.starts import Owner, StartStates, find_starts, states_path

#: a rollout's restarted games that must end before the start may move back
MIN_GAMES = 8


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
    end) and ``restarts/win_rate`` (of the rollout's restarted games). A block that finds its own states and whose file
    is not there yet is recorded at the end of the first rollout of its span, by the run's own policy (not in a
    session paused at the span's start; a population records its members' before they start, so they find the file).

    :param env: the training env (its ``reset_hook``)
    :param blocks: each ``restarts`` block with its index in the configuration and its states (None: not loaded yet)
    :param seed: the run's seed; a block's restarts draw from ``seed`` + the step they begin at
    :param step: the session's first env step
    :param config: the run's configuration (the game a recording plays)
    """

    def __init__(self, env: Any, blocks: list[tuple[int, Any, StartStates | None]], seed: int, step: int, config: Any) -> None:
        super().__init__()
        self.env, self.blocks, self.seed, self.config = env, blocks, seed, config
        self.active: int | None = None
        self.pending = False
        self.restarter: Restarter | None = None
        self.advance_at = 1.0
        self.wins = self.games = 0
        self._switch(step)

    def _switch(self, t: int) -> None:
        """Restart from the block whose span holds step ``t``, a fresh :class:`Restarter` when it changes (none yet
        for a block whose states are still to be found: :meth:`_on_rollout_end` records them)."""
        active = next((k for k, (_, spec, _) in enumerate(self.blocks) if spec.start <= t < spec.until), None)
        if active == self.active:
            return
        self.active, self.restarter, self.pending = active, None, False
        if active is not None:
            index, spec, states = self.blocks[active]
            if states is None and spec.states and Path(spec.states).is_file():
                states = StartStates(spec.states, self.env.core.config)
                self.blocks[active] = (index, spec, states)
            if states is None:
                self.pending = True
            else:
                self._restart(states, t)
        self.env.reset_hook = self.restarter

    def _restart(self, states: StartStates, t: int) -> None:
        """Restart from the active block's ``states``, drawing from ``seed + t``."""
        assert self.active is not None
        spec = self.blocks[self.active][1]
        self.restarter = Restarter(self.env.num_envs, states, spec.share, spec.back, spec.step, seed=self.seed + t)
        self.advance_at = spec.advance_at
        self.env.reset_hook = self.restarter

    def _record(self, active: int, t: int) -> Any:
        """Record block ``active``'s own states with the run's policy as it stands (into a temporary directory for a
        run without one, e.g. a benchmark's); the block with its file."""
        from mission_gym.hardware import available_cores

        index, spec, _ = self.blocks[active]
        if not spec.states:
            spec = spec.model_copy(update={"states": str(Path(tempfile.mkdtemp(prefix="starts-")) / f"restarts{index}.npz")})
        Path(spec.states).parent.mkdir(parents=True, exist_ok=True)
        owners: Any = spec.states if spec.find.policy == "greedy" else [Owner(RunPolicy(self.model), spec.states)]
        (found,) = find_starts(spec.find, owners, self.config.env_kwargs, found_seed(self.config.seed, index),
                               available_cores(), index, t)  # fmt: skip
        print(f"restarts: {found.line()}", flush=True)
        return spec

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
        if self.pending and self.active is not None:  # the block's first rollout was trained on: find its states
            spec = self._record(self.active, self.model.num_timesteps)
            states = StartStates(spec.states, self.env.core.config)
            self.blocks[self.active] = (self.blocks[self.active][0], spec, states)
            self.pending = False
            self._restart(states, self.model.num_timesteps)
            return
        restarter = self.restarter
        if restarter is None:
            return
        rate = self.wins / self.games if self.games else 0.0
        if self.games >= MIN_GAMES and rate >= self.advance_at:  # no further back than the longest game's start
            restarter.back = min(restarter.back + restarter.step, restarter.states.longest)
        self.logger.record("restarts/back", restarter.back)
        if self.games:
            self.logger.record("restarts/win_rate", rate)


class RunPolicy:
    """A training run's policy as it stands, acting on raw observations (normalised by the run's statistics)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.stats = model.get_vec_normalize_env()

    def predict(self, obs: np.ndarray, deterministic: bool = True) -> np.ndarray:
        seen = self.stats.normalize_obs(obs) if self.stats is not None else obs
        return self.model.predict(seen, deterministic=deterministic)[0]


def found_seed(seed: int, block: int) -> int:
    """The seed of the recording of a run's own starts for its ``restarts[block]`` (the same on a resume)."""
    return 1000 * seed + block


def restarts_part(config: Any, venv: Any, step: int) -> RestartsCallback | None:
    """The run part ``restarts``: the training env's reset hook, and the callback that moves the start back and
    changes blocks at their steps; None without ``restarts`` or once the run is past every block's ``until``.

    :raises ConfigError: for a training env without Mission Gym's batched core, a file that is no states file or was
        recorded on another scenario
    """
    blocks = [(k, b) for k, b in enumerate(config.restarts or []) if step < b.until]
    if not blocks:
        return None
    env = getattr(venv, "unwrapped", venv)
    core = getattr(env, "core", None)
    if core is None or not hasattr(env, "reset_hook"):
        raise ConfigError(
            f"restarts needs Mission Gym's batched training env (vec_env native), got {config.vec_env!r}: use "
            "--vec-env native or set restarts: null"
        )
    loaded: list[tuple[int, Any, StartStates | None]] = []
    for k, block in blocks:
        if block.find is None:
            loaded.append((k, block, StartStates(states_path(block.states), core.config)))
        elif block.states and Path(block.states).is_file():
            loaded.append((k, block, StartStates(block.states, core.config)))
        else:  # found when its span begins
            loaded.append((k, block, None))
    return RestartsCallback(env, loaded, config.seed, step, config)
