"""``MissionCore``: the one implementation of the game, batched over ``n_envs`` environments.

The Gymnasium env and the SB3 vector env are views of this class; all stepping happens in the
compiled kernels of :mod:`mission_gym.sim.step`.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from mission_gym.config import REWARD_TERMS, MissionConfig
from mission_gym.sim import layout as L
from mission_gym.sim.step import reset_batch, step_batch, step_batch_parallel

#: the arrays that hold a game's whole state, its random stream included (:meth:`MissionCore.save_state`)
STATE_ARRAYS = ("u", "ev", "dm", "wps", "kd", "ka", "rt", "rsum", "rng", "obs")


def situation_codes(modes: np.ndarray) -> np.ndarray:
    """Each game's situation as one integer: its defenders' modes ``(games, defenders)`` (indices into
    :data:`~mission_gym.sim.layout.MODES`) sorted, as the defenders' order does not matter, and read as digits in
    base ``len(MODES)``."""
    ordered = np.sort(np.asarray(modes).astype(np.int64), axis=1)
    return (ordered * (len(L.MODES) ** np.arange(ordered.shape[1]))).sum(axis=1)


class MissionCore:
    """All state of ``n_envs`` games in arrays shaped ``(n_envs, n_units, ...)``.

    :param config: a validated configuration
    :param n_envs: number of environments stepped together
    :param threads: CPU threads a step uses (numba's pool, at most ``NUMBA_NUM_THREADS``); the envs are split among
        them and every env's result is the same to the bit whatever the count
    """

    def __init__(self, config: MissionConfig, n_envs: int = 1, threads: int = 1) -> None:
        if n_envs < 1:
            raise ValueError(f"n_envs must be >= 1, got {n_envs}")
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self.threads = min(threads, n_envs, numba.config.NUMBA_NUM_THREADS)
        self.config = config
        self.static = s = L.build_static(config)
        self.n_envs = n_envs
        self.n_attackers = s.n_attackers
        self.n_defenders = s.n_defenders
        n_u = s.n_units
        self.u = np.zeros((n_envs, n_u, L.N_U))
        self.ev = np.zeros((n_envs, L.N_E))
        self.ev[:, L.E_OUTCOME] = L.O_NONE
        self.dm = np.zeros((n_envs, s.n_defenders, L.N_D))
        self.wps = np.zeros((n_envs,) + s.waypoints.shape)
        self.kd = np.zeros((n_envs, s.n_defenders, L.N_K))
        self.ka = np.zeros((n_envs, s.n_attackers, L.N_A))
        self.rt = np.zeros((n_envs, L.N_R))
        self.rsum = np.zeros((n_envs, L.N_R))
        self.rng = np.zeros(n_envs, dtype=np.uint64)
        self.obs = np.zeros((n_envs, s.obs_dim), dtype=np.float32)
        self.rewards = np.zeros(n_envs)
        self.terminated = np.zeros(n_envs, dtype=np.bool_)
        self.truncated = np.zeros(n_envs, dtype=np.bool_)
        if self.threads > 1:
            # launch numba's thread pool now, not at the first step: its OpenMP launch sets the process's OpenMP
            # thread count, which torch reads as its own, so a learner that sets torch's threads after building
            # its env keeps them (else `bench --mode train` ran its update on every core: a third slower on 2)
            numba.set_num_threads(self.threads)

    def set_config(self, config: MissionConfig) -> None:
        """Play on with ``config`` (e.g. a curriculum's next capture time): running episodes continue under it.

        :raises ValueError: if ``config`` changes what the arrays are shaped by (unit counts and types, waypoint
            counts, the observation), which only a new core can do
        """
        static = L.build_static(config)
        old = self.static
        shaped = ("n_attackers", "n_defenders", "unit_names", "obs_dim")
        changed = [f for f in shaped if getattr(static, f) != getattr(old, f)]
        changed += [
            f
            for f in ("up", "sp", "circles", "rects", "waypoints", "cfg", "rings")
            if getattr(static, f).shape != getattr(old, f).shape
        ]
        if changed or not np.array_equal(static.n_waypoints, old.n_waypoints):
            raise ValueError(
                f"a running core cannot change {', '.join(changed) or 'n_waypoints'}; build a new env for that config"
            )
        self.config, self.static = config, static

    # --- stepping ------------------------------------------------------------------------------------
    def seed(self, env_ids: np.ndarray | list[int], states: np.ndarray | list[int]) -> None:
        """Set the random stream of each listed env (states are 64-bit integers)."""
        self.rng[np.asarray(env_ids, dtype=np.int64)] = np.asarray(states, dtype=np.uint64)

    def reset(self, env_ids: np.ndarray | list[int] | None = None) -> np.ndarray:
        """Start new episodes in ``env_ids`` (all envs when None); returns the whole observation batch."""
        ids = np.arange(self.n_envs, dtype=np.int64) if env_ids is None else np.asarray(env_ids, dtype=np.int64)
        s = self.static
        reset_batch(
            ids, s.n_attackers, self.u, self.ev, self.dm, self.wps, s.waypoints, s.n_waypoints, self.kd, self.ka,
            self.rt, self.rsum, self.rng, s.up, s.sp, s.circles, s.rects, s.cfg, s.rings, self.obs,
        )  # fmt: skip
        return self.obs

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Step every running env with ``actions`` of shape ``(n_envs, n_attackers)``.

        :return: observations, rewards (float64), terminated, truncated — views that the next call overwrites
        """
        actions = np.asarray(actions)
        if actions.shape != (self.n_envs, self.n_attackers):
            actions = actions.reshape(self.n_envs, self.n_attackers)
        # C order whatever the caller built (a transposed or stacked array would compile the kernels a second time)
        actions = np.ascontiguousarray(actions, dtype=np.int64)
        s = self.static
        arrays = (
            actions, self.u, self.ev, self.dm, self.wps, s.n_waypoints, self.kd, self.ka, self.rt, self.rsum, self.rng,
            s.up, s.sp, s.circles, s.rects, s.cfg, s.weights, s.penalties, s.rings,
            self.obs, self.rewards, self.terminated, self.truncated,
        )  # fmt: skip
        if self.threads > 1:
            numba.set_num_threads(self.threads)
            step_batch_parallel(*arrays, self.threads)
        else:
            step_batch(*arrays)
        return self.obs, self.rewards, self.terminated, self.truncated

    def save_state(self, i: int) -> dict[str, np.ndarray]:
        """Env ``i``'s game as it stands, its random stream included: :meth:`restore_state` puts it in any env of a
        core with the same config, where the same actions then replay the same game to the bit."""
        return {name: getattr(self, name)[i].copy() for name in STATE_ARRAYS}

    def restore_state(self, i: int, state: dict[str, np.ndarray]) -> None:
        """Make env ``i``'s game the one ``state`` saved (:meth:`save_state`)."""
        for name in STATE_ARRAYS:
            getattr(self, name)[i] = state[name]

    # --- reading the state --------------------------------------------------------------------------
    def outcome(self, i: int) -> str | None:
        """The outcome of env ``i``'s episode, or None while it runs."""
        code = int(self.ev[i, L.E_OUTCOME])
        return None if code == L.O_NONE else L.OUTCOMES[code]

    def reward_terms(self, i: int) -> dict[str, float]:
        """This step's value of every reward term of env ``i``."""
        return {name: float(v) for name, v in zip(REWARD_TERMS, self.rt[i])}

    def episode_metrics(self, i: int) -> dict[str, Any]:
        """The metrics of env ``i``'s episode so far (complete on its last step)."""
        ev, u, n_a = self.ev[i], self.u[i], self.n_attackers
        steps = int(ev[L.E_STEP])
        outcome = self.outcome(i)
        per_unit = [float(x) for x in u[:n_a, L.U_DIST]]
        m: dict[str, Any] = {
            "win": int(outcome == "captured"),
            "outcome": outcome,
            "steps": steps,
            "sim_time": float(ev[L.E_TIME]),
            "capture_progress": float(ev[L.E_CAPTURE]),
            "time_in_zone": float(ev[L.E_TIME_IN_ZONE]),
            "attackers_alive": int(u[:n_a, L.U_ALIVE].sum()),
            "attackers_disabled": int(ev[L.E_ATT_DISABLED]),
            "defenders_disabled": int(ev[L.E_DEF_DISABLED]),
            "collisions": int(ev[L.E_COLLISIONS]),
            "integrity_lost": float(ev[L.E_INTEG_LOST]),
            "distance_travelled": float(sum(per_unit)),
            "distance_per_unit": per_unit,
            "detected_time_fraction": float(ev[L.E_DETECTED_STEPS] / steps) if steps else 0.0,
            "tag_attempts_attacker": int(ev[L.E_TAG_ATT_A]),
            "tag_hits_attacker": int(ev[L.E_TAG_HIT_A]),
            "tag_attempts_defender": int(ev[L.E_TAG_ATT_D]),
            "tag_hits_defender": int(ev[L.E_TAG_HIT_D]),
        }
        # present only when they happened, so averages over episodes stay meaningful
        if ev[L.E_TIME_TO_CAPTURE] >= 0:
            m["time_to_capture"] = float(ev[L.E_TIME_TO_CAPTURE])
        if ev[L.E_FIRST_DETECTION] >= 0:
            m["first_detection_time"] = float(ev[L.E_FIRST_DETECTION])
        if ev[L.E_MIN_DEF_DIST_N] > 0:
            m["mean_min_defender_distance"] = float(ev[L.E_MIN_DEF_DIST_SUM] / ev[L.E_MIN_DEF_DIST_N])
        m["reward_terms"] = {name: float(v) for name, v in zip(REWARD_TERMS, self.rsum[i])}
        return m

    def defender_modes(self, i: int) -> list[str]:
        """This episode's mode of each defender of env ``i``."""
        return [L.MODES[int(m)] for m in self.dm[i, :, L.D_MODE]]

    def situation_codes(self) -> np.ndarray:
        """Each env's situation this episode as one integer (:func:`situation_codes`)."""
        return situation_codes(self.dm[:, :, L.D_MODE])

    def snapshot(self, i: int) -> dict[str, Any]:
        """A plain description of env ``i`` for rendering (see :mod:`mission_gym.envs.rendering`)."""
        cfg = self.config
        s = self.static
        units = []
        for j, name in enumerate(s.unit_names):
            row = self.u[i, j]
            units.append(
                {
                    "name": name,
                    "team": "attacker" if s.up[j, L.P_TEAM] == 0 else "defender",
                    "category": "air" if s.up[j, L.P_AIR] else "ground",
                    "x": float(row[L.U_X]),
                    "y": float(row[L.U_Y]),
                    "heading": float(row[L.U_HEAD]),
                    "radius": float(s.up[j, L.P_RADIUS]),
                    "integrity_frac": float(row[L.U_INTEG] / s.up[j, L.P_INTEG0]),
                    "alive": bool(row[L.U_ALIVE]),
                    "altitude": int(row[L.U_ALT]),
                    "tagged": bool(row[L.U_FIRED]),
                    "tag_target": int(row[L.U_TARGET]),
                    "detected": bool(row[L.U_DETECTED]),
                }
            )
        world = cfg.world
        return {
            "arena": (world.arena.width, world.arena.height),
            "circles": [(c.x, c.y, c.radius) for c in world.obstacles.circles],
            "rects": [(r.x, r.y, r.width, r.height, r.angle) for r in world.obstacles.rects],
            "objective": (float(self.ev[i, L.E_OBJ_X]), float(self.ev[i, L.E_OBJ_Y]), cfg.scenario.objective.radius),
            "capture_progress": float(self.ev[i, L.E_CAPTURE]),
            "capture_time": cfg.engagement.capture.time_to_capture,
            "time": float(self.ev[i, L.E_TIME]),
            "time_limit": world.physics.episode_seconds,
            "outcome": self.outcome(i),
            "tag_range": cfg.engagement.tag.range,
            "tag_half_angle": cfg.engagement.tag.half_angle,
            "units": units,
        }

    @property
    def step_seconds(self) -> float:
        """Sim seconds per env step."""
        ph = self.config.world.physics
        return ph.dt * ph.action_repeat

    @property
    def max_steps(self) -> int:
        """Env steps of a full episode."""
        return int(self.static.cfg[L.C_MAX_STEPS])

    def __repr__(self) -> str:
        return f"MissionCore(n_envs={self.n_envs}, attackers={self.n_attackers}, defenders={self.n_defenders})"
