"""The array layout of the batched simulation and the packing of a :class:`MissionConfig` into
the flat arrays the numba kernels read.

State lives in a few float64 arrays with named columns (below), so kernels take a handful of
arguments and the Python side can still read fields by name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mission_gym.config import REWARD_TERMS, MissionConfig
from mission_gym.sim.geometry import pack_rects

# --- per-unit dynamic state: u[e, unit, col] -------------------------------------------------------
U_X, U_Y, U_HEAD, U_SPEED, U_INTEG, U_TAG_CD, U_SCAN_CD, U_SCAN_T = 0, 1, 2, 3, 4, 5, 6, 7
U_TGT_HEAD, U_TGT_SPEED, U_ALIVE, U_ALT, U_FIRED, U_TARGET, U_COLLIDED, U_DIST, U_DETECTED = 8, 9, 10, 11, 12, 13, 14, 15, 16
U_TAG_REQ = 17
N_U = 18

# --- per-env dynamic state: ev[e, col] -------------------------------------------------------------
E_TIME, E_STEP, E_CAPTURE, E_OBJ_X, E_OBJ_Y, E_BEST_D, E_PREV_D = 0, 1, 2, 3, 4, 5, 6
E_MARK_T, E_MARK_CAP, E_MARK_D, E_RINGS, E_ZONE_ENTERED, E_OUTCOME = 7, 8, 9, 10, 11, 12
# episode metrics accumulated in ev
E_TIME_IN_ZONE, E_TIME_TO_CAPTURE, E_COLLISIONS, E_INTEG_LOST, E_ATT_DISABLED, E_DEF_DISABLED = 13, 14, 15, 16, 17, 18
E_DETECTED_STEPS, E_FIRST_DETECTION, E_TAG_ATT_A, E_TAG_HIT_A, E_TAG_ATT_D, E_TAG_HIT_D = 19, 20, 21, 22, 23, 24
E_MIN_DEF_DIST_SUM, E_MIN_DEF_DIST_N, E_IN_ZONE = 25, 26, 27
N_E = 28

# outcome codes (E_OUTCOME; -1 while running)
OUTCOMES: tuple[str, ...] = ("captured", "all_disabled", "timeout", "stalled")
O_NONE, O_CAPTURED, O_ALL_DISABLED, O_TIMEOUT, O_STALLED = -1, 0, 1, 2, 3

# --- defender AI state: dm[e, d, col] ------------------------------------------------------------------
D_MODE, D_DELAY, D_WP = 0, 1, 2
N_D = 3
MODE_PATROL, MODE_GUARD, MODE_INTERCEPT = 0, 1, 2
MODES: tuple[str, ...] = ("patrol", "guard_objective", "intercept")

# --- the attackers' knowledge of each defender: kd[e, d, col] -------------------------------------------
K_X, K_Y, K_HEAD, K_INTEG, K_SEEN_T, K_EVER, K_VIS, K_SPEED, K_TAG_CD = 0, 1, 2, 3, 4, 5, 6, 7, 8
N_K = 9
# --- the defenders' knowledge of each attacker: ka[e, a, col] -------------------------------------------
A_X, A_Y, A_SEEN_T, A_EVER, A_VIS, A_SINCE = 0, 1, 2, 3, 4, 5
N_A = 6

# --- static unit parameters: up[unit, col] ------------------------------------------------------------
P_TEAM, P_AIR, P_MAX_SPEED, P_ACCEL, P_TURN, P_RADIUS, P_INTEG0, P_TAG_DMG = 0, 1, 2, 3, 4, 5, 6, 7
P_X0, P_Y0, P_HEAD0, P_ALT0, P_BANDS = 8, 9, 10, 11, 12
N_P = 13

# --- sensors: sp[unit, slot, col]; kind -1 marks an empty slot ------------------------------------------
S_KIND, S_RANGE, S_HALF_FOV, S_SIG_R, S_SIG_B, S_LOS = 0, 1, 2, 3, 4, 5
N_S = 6
SENSOR_KINDS: tuple[str, ...] = ("lidar", "radar", "camera")
KIND_RADAR = 1

# --- scalar configuration: cfg[col] -----------------------------------------------------------------
(
    C_DT, C_REPEAT, C_MAX_STEPS, C_W, C_H, C_OBJ_X, C_OBJ_Y, C_OBJ_R, C_CAPTURE_TIME, C_CONTESTED,
    C_CMD_SPEED, C_MOB_FRAC, C_SENS_FRAC,
    C_TAG_ON, C_TAG_RANGE, C_TAG_OPT, C_TAG_MIN, C_TAG_HALF, C_TAG_CD, C_TAG_LOS,
    C_SCAN_ON, C_SCAN_DUR, C_SCAN_MULT, C_SCAN_CD,
    C_P_PATROL, C_P_GUARD, C_DELAY_LO, C_DELAY_HI, C_RANDOM_MOVE, C_ENGAGE, C_AIM_NOISE, C_MEMORY,
    C_GUARD_R, C_V_PATROL, C_V_CHASE, C_V_INTERCEPT, C_WP_TOL,
    C_OBJ_JIT, C_ATT_JIT, C_DEF_JIT, C_WP_JIT, C_MODES_ON, C_DELAY_ON,
    C_STALL_S, C_STALL_CAP, C_STALL_DIST,
    C_LIDAR_RAYS, C_LIDAR_RANGE, C_LAST_SEEN_H, C_SPREAD_DIST, C_DEF_MOTION,
) = range(51)  # fmt: skip
N_C = 51

# reward term indices, in REWARD_TERMS order
(
    R_CAPTURE, R_WIN, R_ZONE, R_DIST, R_RING, R_SPREAD, R_TAG_HIT, R_DEF_DISABLED, R_TIME, R_COLLISION,
    R_INTEG_LOSS, R_UNIT_DISABLED, R_DETECTED, R_OUTCOME,
) = range(14)  # fmt: skip
N_R = len(REWARD_TERMS)

N_ACTIONS = 11
ACTION_NAMES: tuple[str, ...] = ("STOP", "N", "NE", "E", "SE", "S", "SW", "W", "NW", "TAG", "SCAN")
A_STOP, A_TAG, A_SCAN = 0, 9, 10

PER_ATTACKER_BASE = 13  # observation features per attacker before its lidar rays
PER_DEFENDER = 7
PER_MOTION = 2  # per defender slot with observation.defender_motion
GLOBAL_FEATURES = 2


def obs_size(n_attackers: int, n_defenders: int, lidar_rays: int, defender_motion: bool = False) -> int:
    """Length of the flat observation vector."""
    motion = n_defenders * PER_MOTION if defender_motion else 0
    return n_attackers * (PER_ATTACKER_BASE + lidar_rays) + n_defenders * PER_DEFENDER + GLOBAL_FEATURES + motion


@dataclass(frozen=True)
class Static:
    """Everything the kernels need from the config, packed into arrays (built once per env)."""

    n_attackers: int
    n_defenders: int
    unit_names: tuple[str, ...]
    up: np.ndarray  # (U, N_P)
    sp: np.ndarray  # (U, S, N_S)
    circles: np.ndarray  # (C, 3)
    rects: np.ndarray  # (R, 6)
    waypoints: np.ndarray  # (D, W, 2)
    n_waypoints: np.ndarray  # (D,) int64
    cfg: np.ndarray  # (N_C,)
    weights: np.ndarray  # (N_R,)
    penalties: np.ndarray  # (4,) per outcome code
    rings: np.ndarray  # (K,) descending
    obs_dim: int

    @property
    def n_units(self) -> int:
        return self.n_attackers + self.n_defenders


def build_static(config: MissionConfig) -> Static:
    """Pack a validated config into the kernels' arrays."""
    world, sc, units, eng, rew = config.world, config.scenario, config.units, config.engagement, config.reward
    spawns = list(sc.attackers) + list(sc.defenders)
    n_a, n_d = len(sc.attackers), len(sc.defenders)
    n_u = n_a + n_d

    up = np.zeros((n_u, N_P))
    n_slots = max([len(units.types[s.type].sensors) for s in spawns] + [1])
    sp = np.zeros((n_u, n_slots, N_S))
    sp[:, :, S_KIND] = -1
    for i, spawn in enumerate(spawns):
        t = units.types[spawn.type]
        air = t.category == "air"
        alt = spawn.altitude if spawn.altitude is not None else (1 if air and t.altitude_bands > 1 else 0)
        up[i] = 0.0
        up[i, P_TEAM] = 0.0 if t.team == "attacker" else 1.0
        up[i, P_AIR] = 1.0 if air else 0.0
        up[i, P_MAX_SPEED] = t.max_speed
        up[i, P_ACCEL] = t.accel
        up[i, P_TURN] = math.radians(t.turn_rate)
        up[i, P_RADIUS] = t.radius
        up[i, P_INTEG0] = t.integrity
        up[i, P_TAG_DMG] = t.tag_damage
        up[i, P_X0], up[i, P_Y0] = spawn.x, spawn.y
        up[i, P_HEAD0] = math.radians(spawn.heading)
        up[i, P_ALT0] = alt
        up[i, P_BANDS] = t.altitude_bands
        for k, name in enumerate(t.sensors):
            s = config.sensors.root[name]
            sp[i, k] = (
                SENSOR_KINDS.index(s.kind),
                s.range,
                math.radians(min(s.fov, 360.0)) / 2.0,
                s.range_sigma,
                math.radians(s.bearing_sigma),
                1.0 if s.requires_los else 0.0,
            )

    circles = np.array([(c.x, c.y, c.radius) for c in world.obstacles.circles], dtype=np.float64).reshape(-1, 3)
    rects = pack_rects([(r.x, r.y, r.width, r.height, r.angle) for r in world.obstacles.rects])

    n_wp = np.array([len(d.waypoints) for d in sc.defenders], dtype=np.int64)
    waypoints = np.zeros((n_d, max(int(n_wp.max(initial=0)), 1), 2))
    for d, spawn in enumerate(sc.defenders):
        for k, (wx, wy) in enumerate(spawn.waypoints):
            waypoints[d, k] = (wx, wy)

    ph, rnd, beh = world.physics, sc.randomization, eng.defenders
    cfg = np.zeros(N_C)
    cfg[C_DT] = ph.dt
    cfg[C_REPEAT] = ph.action_repeat
    cfg[C_MAX_STEPS] = math.ceil(ph.episode_seconds / (ph.dt * ph.action_repeat) - 1e-9)
    cfg[C_W], cfg[C_H] = world.arena.width, world.arena.height
    cfg[C_OBJ_X], cfg[C_OBJ_Y], cfg[C_OBJ_R] = sc.objective.x, sc.objective.y, sc.objective.radius
    cfg[C_CAPTURE_TIME] = eng.capture.time_to_capture
    cfg[C_CONTESTED] = float(eng.capture.contested)
    cfg[C_CMD_SPEED] = units.command_speed_fraction
    cfg[C_MOB_FRAC] = units.degradation.mobility_fraction
    cfg[C_SENS_FRAC] = units.degradation.sensor_fraction
    tag = eng.tag
    cfg[C_TAG_ON], cfg[C_TAG_RANGE], cfg[C_TAG_OPT], cfg[C_TAG_MIN] = (
        float(tag.enabled),
        tag.range,
        tag.optimal_range,
        tag.min_damage,
    )
    cfg[C_TAG_HALF], cfg[C_TAG_CD], cfg[C_TAG_LOS] = math.radians(tag.half_angle), tag.cooldown, float(tag.requires_los)
    scan = eng.scan
    cfg[C_SCAN_ON], cfg[C_SCAN_DUR], cfg[C_SCAN_MULT], cfg[C_SCAN_CD] = (
        float(scan.enabled),
        scan.duration,
        scan.range_multiplier,
        scan.cooldown,
    )
    cfg[C_P_PATROL], cfg[C_P_GUARD] = beh.mode_probs.patrol, beh.mode_probs.guard_objective
    cfg[C_DELAY_LO], cfg[C_DELAY_HI] = beh.reaction_delay
    cfg[C_RANDOM_MOVE], cfg[C_ENGAGE], cfg[C_AIM_NOISE] = beh.random_move_prob, beh.engage_range, math.radians(beh.aim_noise)
    cfg[C_MEMORY], cfg[C_GUARD_R], cfg[C_WP_TOL] = beh.memory_seconds, beh.guard_radius, beh.waypoint_tolerance
    cfg[C_V_PATROL], cfg[C_V_CHASE], cfg[C_V_INTERCEPT] = beh.patrol_speed, beh.chase_speed, beh.intercept_speed
    cfg[C_OBJ_JIT], cfg[C_ATT_JIT], cfg[C_DEF_JIT] = rnd.objective_jitter, rnd.attacker_spawn_jitter, rnd.defender_spawn_jitter
    cfg[C_WP_JIT], cfg[C_MODES_ON], cfg[C_DELAY_ON] = rnd.waypoint_jitter, float(rnd.defender_modes), float(rnd.reaction_delay)
    cfg[C_STALL_S], cfg[C_STALL_CAP], cfg[C_STALL_DIST] = sc.stall.seconds, sc.stall.capture_gain, sc.stall.distance_gain
    obs_cfg = world.observation
    cfg[C_LIDAR_RAYS], cfg[C_LIDAR_RANGE], cfg[C_LAST_SEEN_H] = (
        obs_cfg.lidar_rays,
        obs_cfg.lidar_range,
        obs_cfg.last_seen_horizon,
    )
    cfg[C_SPREAD_DIST] = rew.spread_distance
    cfg[C_DEF_MOTION] = float(obs_cfg.defender_motion)

    weights = np.array([getattr(rew, term) if term != "outcome_penalty" else 1.0 for term in REWARD_TERMS], dtype=np.float64)
    penalties = np.array(
        [0.0, rew.outcome_penalty.all_disabled, rew.outcome_penalty.timeout, rew.outcome_penalty.stalled], dtype=np.float64
    )
    rings = np.array(sorted(rew.ring_radii, reverse=True), dtype=np.float64)

    return Static(
        n_attackers=n_a,
        n_defenders=n_d,
        unit_names=tuple(s.type for s in spawns),
        up=up,
        sp=sp,
        circles=circles,
        rects=rects,
        waypoints=waypoints,
        n_waypoints=n_wp,
        cfg=cfg,
        weights=weights,
        penalties=penalties,
        rings=rings,
        obs_dim=obs_size(n_a, n_d, obs_cfg.lidar_rays, obs_cfg.defender_motion),
    )
