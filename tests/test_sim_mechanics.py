"""Each rule of the game (docs/environment.md) pinned on a hand-built situation.

Situations are built with config overrides (a scenario of one or two units, an obstacle list of our
own, no randomisation, calm defenders) and, where needed, by writing state into the core's arrays
after ``reset()``; then the core is stepped and its state, reward terms and outcome are read back.
"""

from __future__ import annotations

import functools
import math
import operator
from typing import Any

import numpy as np
import pytest

from mission_gym.baselines import make_policy
from mission_gym.config import REWARD_TERMS, load_config
from mission_gym.config.loader import deep_merge
from mission_gym.envs import MissionEnv, MissionVecEnv
from mission_gym.sim import MissionCore
from mission_gym.sim import layout as L
from mission_gym.sim.engagement import find_tag_target, tag_damage
from mission_gym.sim.geometry import overlaps_obstacle, pack_rects, segment_blocked
from mission_gym.sim.sensing import NOT_SEEN, SEEN_EXACT, SEEN_RADAR, team_detects, unit_sees

STOP, N, NE, E, SE, S, SW, W, NW, TAG, SCAN = range(11)
DT, REPEAT = 0.05, 5
STEP_S = DT * REPEAT

NO_RANDOM = {
    "objective_jitter": 0.0,
    "attacker_spawn_jitter": 0.0,
    "defender_spawn_jitter": 0.0,
    "waypoint_jitter": 0.0,
    "defender_modes": False,  # every defender patrols
    "reaction_delay": False,
}
CALM = {"defenders": {"random_move_prob": 0.0, "aim_noise": 0.0}}
NO_TAG = {"tag": {"enabled": False}}


def unit(type_: str, x: float, y: float, heading: float = 0.0, **extra: Any) -> dict[str, Any]:
    return {"type": type_, "x": x, "y": y, "heading": heading, **extra}


def make_core(
    attackers: list[dict[str, Any]],
    defenders: list[dict[str, Any]] = (),
    circles: list[tuple[float, float, float]] = (),
    rects: list[tuple[float, float, float, float, float]] = (),
    objective: tuple[float, float, float] = (100.0, 100.0, 15.0),
    n_envs: int = 1,
    **overrides: dict[str, Any],
) -> MissionCore:
    """A reset core on a hand-built scenario: no randomisation, calm defenders, our obstacles only."""
    ox, oy, r = objective
    base = {
        "world": {
            "obstacles": {
                "circles": [{"x": x, "y": y, "radius": rr} for x, y, rr in circles],
                "rects": [{"x": x, "y": y, "width": w, "height": h, "angle": a} for x, y, w, h, a in rects],
            }
        },
        "scenario": {
            "objective": {"x": ox, "y": oy, "radius": r},
            "attackers": list(attackers),
            "defenders": list(defenders),
            "randomization": NO_RANDOM,
        },
        "engagement": CALM,
    }
    core = MissionCore(load_config(overrides=deep_merge(base, overrides)), n_envs=n_envs)
    core.seed(np.arange(n_envs), np.arange(n_envs) + 1)
    core.reset()
    return core


def step(core: MissionCore, *actions: int) -> float:
    """Step env 0 with one action per attacker; returns its reward."""
    _, rewards, _, _ = core.step(np.array([actions], dtype=np.int64))
    return float(rewards[0])


def term(core: MissionCore, name: str) -> float:
    return core.reward_terms(0)[name]


def left_fold_sum(values: Any) -> float:
    """Sum in order from 0.0, the way the kernel adds the terms (``sum()`` may compensate on Python >= 3.12)."""
    return functools.reduce(operator.add, values, 0.0)


def defender_slot(core: MissionCore, d: int) -> np.ndarray:
    cfg = core.config.world.observation
    start = core.n_attackers * (L.PER_ATTACKER_BASE + cfg.lidar_rays) + d * L.PER_DEFENDER
    return core.obs[0, start : start + L.PER_DEFENDER]


# --- dynamics: obstacles, bounds, degradation ---------------------------------------------------------
def test_move_into_obstacle_is_refused_with_one_collision_event_per_step():
    # UGV_A (radius 2.5) touching a circle of radius 5 at (50, 50): any move east overlaps it
    core = make_core([unit("UGV_A", 42.5, 50.0, 0.0)], circles=[(50.0, 50.0, 5.0)])
    for k in range(1, 4):
        reward = step(core, E)
        assert core.u[0, 0, L.U_X] == 42.5 and core.u[0, 0, L.U_Y] == 50.0  # the unit stays
        assert core.u[0, 0, L.U_SPEED] == 0.0
        assert core.u[0, 0, L.U_COLLIDED] == 1.0
        assert term(core, "collision") == -0.5  # once per step, not once per tick (5 ticks)
        assert core.episode_metrics(0)["collisions"] == k
        assert left_fold_sum(core.reward_terms(0).values()) == reward
    # once turned away (180 deg at 90 deg/s), moving is not refused and counts no collision
    for _ in range(10):
        step(core, W)
    assert core.u[0, 0, L.U_X] < 42.5
    assert term(core, "collision") == 0.0


def test_fast_unit_is_stopped_at_a_rotated_rectangle():
    # a grounded UAV_B at full speed heads for a barrier rotated 45 degrees; it must stop before overlapping
    core = make_core([unit("UAV_B", 70.0, 100.0, 0.0, altitude=0)], rects=[(90.0, 100.0, 10.0, 4.0, 45.0)])
    core.u[0, 0, L.U_SPEED] = 15.0
    collided = False
    for _ in range(20):
        step(core, E)
        x, y = core.u[0, 0, L.U_X], core.u[0, 0, L.U_Y]
        assert not overlaps_obstacle(x, y, 0.4, core.static.circles, core.static.rects)
        collided |= core.u[0, 0, L.U_COLLIDED] == 1.0
    assert collided and core.u[0, 0, L.U_SPEED] == 0.0
    assert x > 80.0  # it got close to the barrier before being stopped


def test_no_grounded_unit_ever_overlaps_an_obstacle():
    # random commands on the default map for every unit type: the refusal rule holds everywhere
    n = 16
    core = MissionCore(load_config(), n_envs=n)
    core.seed(np.arange(n), np.arange(n) + 100)
    core.reset()
    s = core.static
    rng = np.random.default_rng(0)
    grounded = s.up[:, L.P_AIR] == 0  # ground units (air units hold band 1 here)
    collided = 0
    for t in range(300):
        if t % 8 == 0:
            actions = rng.integers(0, 9, size=(n, core.n_attackers))
        core.step(actions)
        collided += int(core.u[:, :, L.U_COLLIDED].sum())
        for e in range(n):
            for i in np.flatnonzero(grounded):
                x, y = core.u[e, i, L.U_X], core.u[e, i, L.U_Y]
                assert not overlaps_obstacle(x, y, s.up[i, L.P_RADIUS], s.circles, s.rects), (t, e, i)
        core.reset(np.flatnonzero(core.terminated | core.truncated))
    assert collided > 0


def test_airborne_unit_flies_over_obstacles():
    core = make_core([unit("UAV_B", 42.0, 50.0, 0.0, altitude=1)], circles=[(50.0, 50.0, 5.0)])
    for _ in range(12):
        step(core, E)
    assert core.u[0, 0, L.U_X] > 58.0
    assert core.episode_metrics(0)["collisions"] == 0


def test_positions_are_clamped_inside_the_arena():
    core = make_core([unit("UGV_B", 197.0, 3.0, 0.0)])
    core.u[0, 0, L.U_SPEED] = 8.0
    for _ in range(8):
        step(core, SE)
    r = core.static.up[0, L.P_RADIUS]
    assert core.u[0, 0, L.U_X] == pytest.approx(200.0 - r)
    assert core.u[0, 0, L.U_Y] == pytest.approx(r)


@pytest.mark.parametrize("integrity, factor", [(100.0, 1.0), (50.01, 1.0), (50.0, 0.5), (30.0, 0.5)])
def test_mobility_degradation_halves_speed_accel_and_turn(integrity, factor):
    # UGV_A: max speed 8, accel 3, turn 90 deg/s, integrity 100; threshold 50%
    core = make_core([unit("UGV_A", 50.0, 50.0, 0.0)])
    core.u[0, 0, L.U_INTEG] = integrity
    step(core, E)  # from rest: one step of acceleration
    assert core.u[0, 0, L.U_SPEED] == pytest.approx(3.0 * factor * STEP_S)

    core = make_core([unit("UGV_A", 50.0, 50.0, 0.0)])
    core.u[0, 0, L.U_INTEG] = integrity
    step(core, N)  # turning from east to north
    assert core.u[0, 0, L.U_HEAD] == pytest.approx(math.radians(90.0 * factor * STEP_S))

    core = make_core([unit("UGV_A", 50.0, 50.0, 0.0)])
    core.u[0, 0, L.U_INTEG] = integrity
    core.u[0, 0, L.U_SPEED] = 6.4  # the command speed, 0.8 x 8
    step(core, E)
    assert core.u[0, 0, L.U_SPEED] == pytest.approx(min(6.4, 8.0 * factor))


@pytest.mark.parametrize("integrity, seen", [(100.0, True), (30.01, True), (30.0, False), (10.0, False)])
def test_sensor_degradation_halves_sensor_ranges(integrity, seen):
    # UGV_A's camera_front reaches 40 m (20 m halved); the defender stands 30 m ahead
    core = make_core([unit("UGV_A", 50.0, 50.0, 0.0)], [unit("DEF_UGV", 80.0, 50.0, 0.0)])
    core.u[0, 0, L.U_INTEG] = integrity
    s = core.static
    state, _ = unit_sees(core.u, s.up, s.sp, 0, 0, 1, s.circles, s.rects, s.cfg)
    assert (state == SEEN_EXACT) is seen


def test_disabled_attacker_stops_and_is_ignored():
    # attacker 0 sits in the zone with 1 integrity point, facing a defender 10 m away that faces it
    core = make_core(
        [unit("UGV_A", 100.0, 100.0, 0.0), unit("UGV_A", 20.0, 20.0, 0.0)],
        [unit("DEF_UGV", 110.0, 100.0, 180.0)],
    )
    core.u[0, 0, L.U_INTEG] = 1.0
    core.u[0, 0, L.U_SPEED] = 3.0
    reward = step(core, E, STOP)
    assert core.u[0, 0, L.U_ALIVE] == 0.0 and core.u[0, 0, L.U_INTEG] == 0.0
    assert core.u[0, 0, L.U_SPEED] == 0.0 and core.u[0, 0, L.U_X] == 100.0  # it stops where it was hit
    assert term(core, "unit_disabled") == -20.0
    assert term(core, "integrity_loss") == pytest.approx(-0.1)  # only the point it had left
    assert left_fold_sum(core.reward_terms(0).values()) == reward
    assert core.outcome(0) is None  # attacker 1 is still alive
    a0 = core.obs[0, : L.PER_ATTACKER_BASE]
    assert a0[9] == 1.0  # disabled flag
    for _ in range(20):
        step(core, E, STOP)
    assert core.u[0, 0, L.U_X] == 100.0  # commands no longer move it
    assert core.ev[0, L.E_CAPTURE] == 0.0  # a disabled attacker in the zone does not capture
    assert core.rsum[0, REWARD_TERMS.index("zone_entry")] == 0.0
    assert core.ka[0, 0, L.A_VIS] == 0.0  # nobody detects it any more
    m = core.episode_metrics(0)
    assert m["tag_attempts_defender"] == 1 and m["attackers_disabled"] == 1 and m["attackers_alive"] == 1


def test_disabled_defender_stops_and_is_ignored():
    # the defender faces away (it cannot shoot back this step) with 1 integrity point left
    core = make_core(
        [unit("UGV_A", 100.0, 100.0, 0.0)], [unit("DEF_UGV", 108.0, 100.0, 0.0)], engagement={"capture": {"contested": True}}
    )
    core.u[0, 1, L.U_INTEG] = 1.0
    step(core, TAG)
    assert core.u[0, 1, L.U_ALIVE] == 0.0 and core.u[0, 1, L.U_SPEED] == 0.0
    assert term(core, "defender_disabled") == 10.0 and term(core, "tag_hit") == pytest.approx(0.2)
    x_dead = core.u[0, 1, L.U_X]
    # capture runs although the (disabled) defender is in the contested zone
    assert core.ev[0, L.E_CAPTURE] == pytest.approx(STEP_S)
    assert defender_slot(core, 0)[4] == 0.0  # the attackers know it is down
    for _ in range(13):  # past the 3 s cooldown
        step(core, TAG)
    assert core.u[0, 1, L.U_X] == x_dead  # it never moves again
    m = core.episode_metrics(0)
    assert m["tag_attempts_defender"] == 0  # ...nor shoots
    assert m["tag_attempts_attacker"] == 2 and m["tag_hits_attacker"] == 1  # nor is it a target any more
    assert m["defenders_disabled"] == 1 and m["integrity_lost"] == 0.0


# --- line of sight -------------------------------------------------------------------------------------
# a 20 x 4 wall centred on (100, 100) at various angles; segments along its local y axis cross it
@pytest.mark.parametrize("angle", [0.0, 15.0, 45.0, -20.0, 90.0, 135.0])
def test_line_of_sight_through_a_rotated_rectangle(angle):
    circles = np.zeros((0, 3))
    rects = pack_rects([(100.0, 100.0, 20.0, 4.0, angle)])
    a = math.radians(angle)
    ax, ay = math.cos(a), math.sin(a)  # the wall's long axis
    nx, ny = -ay, ax  # its short axis

    def seg(along: float, half: float = 15.0) -> tuple[float, float, float, float]:
        cx, cy = 100.0 + along * ax, 100.0 + along * ay
        return cx - half * nx, cy - half * ny, cx + half * nx, cy + half * ny

    assert segment_blocked(*seg(0.0), circles, rects)  # through the middle
    assert segment_blocked(*seg(9.9), circles, rects)  # just inside its end
    assert not segment_blocked(*seg(10.1), circles, rects)  # just past its end
    assert not segment_blocked(*seg(-10.1), circles, rects)
    # a segment that stops 0.1 m short of the wall's face
    x0, y0, _, _ = seg(0.0)
    assert not segment_blocked(x0, y0, 100.0 - 2.1 * nx, 100.0 - 2.1 * ny, circles, rects)
    assert segment_blocked(x0, y0, 100.0 - 1.9 * nx, 100.0 - 1.9 * ny, circles, rects)


def test_line_of_sight_uses_the_rotation_not_the_bounding_box():
    # a 20 x 4 wall at 45 deg centred on (100, 100): the horizontal line y = 101 meets it only for x in [98.2, 103.8]
    circles = np.zeros((0, 3))
    rects = pack_rects([(100.0, 100.0, 20.0, 4.0, 45.0)])
    assert not segment_blocked(92.0, 101.0, 96.0, 101.0, circles, rects)  # an unrotated wall would block this
    assert segment_blocked(92.0, 101.0, 99.0, 101.0, circles, rects)
    assert segment_blocked(106.0, 104.0, 106.0, 108.0, circles, rects)  # an unrotated wall would not
    # circles
    circles = np.array([[50.0, 50.0, 3.0]])
    assert segment_blocked(40.0, 52.9, 60.0, 52.9, circles, rects[:0])
    assert not segment_blocked(40.0, 53.1, 60.0, 53.1, circles, rects[:0])


# a 10 x 2 wall centred at (90, 104); the sight line y = 100 from (80, 100) to (100, 100) crosses it or not
@pytest.mark.parametrize(
    "angle, blocked", [(0.0, False), (30.0, False), (60.0, True), (90.0, True), (120.0, True), (150.0, False)]
)
def test_sensors_and_tags_need_line_of_sight_between_grounded_units(angle, blocked):
    core = make_core(
        [unit("UGV_A", 80.0, 100.0, 0.0)], [unit("DEF_UGV", 100.0, 100.0, 90.0)], rects=[(90.0, 104.0, 10.0, 2.0, angle)]
    )
    s = core.static
    state, _ = unit_sees(core.u, s.up, s.sp, 0, 0, 1, s.circles, s.rects, s.cfg)  # lidar and camera both need LOS
    assert state == (NOT_SEEN if blocked else SEEN_EXACT)
    target, _ = find_tag_target(core.u, s.up, 0, 0, s.circles, s.rects, s.cfg)
    assert target == (-1 if blocked else 1)


@pytest.mark.parametrize("altitude, blocked", [(0, True), (1, False), (2, False)])
def test_line_of_sight_is_not_blocked_when_one_unit_is_airborne(altitude, blocked):
    # UAV_B's sensors (lidar_long, camera_front) all need line of sight
    core = make_core(
        [unit("UAV_B", 80.0, 100.0, 0.0, altitude=altitude)],
        [unit("DEF_UGV", 100.0, 100.0, 90.0)],
        rects=[(90.0, 100.0, 2.0, 10.0, 0.0)],
    )
    s = core.static
    state, _ = unit_sees(core.u, s.up, s.sp, 0, 0, 1, s.circles, s.rects, s.cfg)
    assert state == (NOT_SEEN if blocked else SEEN_EXACT)
    target, _ = find_tag_target(core.u, s.up, 0, 0, s.circles, s.rects, s.cfg)
    assert target == (-1 if blocked else 1)
    # after a step the attackers' knowledge agrees
    step(core, STOP)
    assert core.kd[0, 0, L.K_EVER] == (0.0 if blocked else 1.0)


# --- tags ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dist, damage", [(5.0, 25.0), (8.0, 25.0), (14.0, 17.5), (20.0, 10.0), (20.5, 0.0)])
def test_tag_damage_at_range(dist, damage):
    # UGV_A's tag damage is 25 inside 8 m, falling linearly to 10 at 20 m; nothing beyond
    core = make_core([unit("UGV_A", 50.0, 100.0, 0.0)], [unit("DEF_UGV", 50.0 + dist, 100.0, 0.0)])
    assert tag_damage(25.0, dist, core.static.cfg) == pytest.approx(damage if damage else 10.0)
    reward = step(core, TAG)
    assert 150.0 - core.u[0, 1, L.U_INTEG] == pytest.approx(damage)
    hit = damage > 0.0
    assert term(core, "tag_hit") == pytest.approx(0.2 if hit else 0.0)
    assert term(core, "integrity_loss") == 0.0  # the defender's loss is not the attackers'
    assert left_fold_sum(core.reward_terms(0).values()) == reward
    m = core.episode_metrics(0)
    assert (m["tag_attempts_attacker"], m["tag_hits_attacker"]) == (1, int(hit))


@pytest.mark.parametrize("bearing, hit", [(29.9, True), (-29.9, True), (30.1, False), (-30.1, False), (0.0, True)])
def test_tag_cone_edge(bearing, hit):
    b = math.radians(bearing)
    core = make_core(
        [unit("UGV_A", 50.0, 100.0, 0.0)], [unit("DEF_UGV", 50.0 + 10.0 * math.cos(b), 100.0 + 10.0 * math.sin(b), 0.0)]
    )
    step(core, TAG)
    lost = 150.0 - core.u[0, 1, L.U_INTEG]
    assert lost == (pytest.approx(tag_damage(25.0, 10.0, core.static.cfg)) if hit else 0.0)
    assert core.u[0, 0, L.U_FIRED] == 1.0  # a shot either way
    assert core.u[0, 0, L.U_TARGET] == (1.0 if hit else -1.0)


def test_tag_hits_the_closest_enemy_in_the_cone():
    core = make_core([unit("UGV_A", 50.0, 100.0, 0.0)], [unit("DEF_UGV", 65.0, 100.0, 0.0), unit("DEF_UGV", 60.0, 103.0, 0.0)])
    step(core, TAG)
    assert core.u[0, 1, L.U_INTEG] == 150.0
    assert core.u[0, 2, L.U_INTEG] < 150.0


def test_tag_cooldown_is_spent_on_a_miss_and_lasts_three_seconds():
    # the defender is 10 m away at 90 deg: outside the cone, so the first shot misses
    core = make_core([unit("UGV_A", 50.0, 100.0, 0.0)], [unit("DEF_UGV", 50.0, 110.0, 90.0)])
    step(core, TAG)
    assert core.u[0, 0, L.U_FIRED] == 1.0 and core.u[0, 0, L.U_TARGET] == -1.0
    assert core.u[0, 0, L.U_TAG_CD] == pytest.approx(3.0 - STEP_S)
    assert term(core, "tag_hit") == 0.0
    # now put the defender straight ahead: the beam is cooling down until exactly 3 s after the miss
    core.u[0, 1, L.U_X], core.u[0, 1, L.U_Y] = 57.0, 100.0
    for k in range(2, 13):  # decisions at t = 0.25 .. 2.75 s
        step(core, TAG)
        assert core.u[0, 0, L.U_FIRED] == 0.0, f"fired at step {k}"
        core.u[0, 1, L.U_X], core.u[0, 1, L.U_Y] = 57.0, 100.0
    assert core.u[0, 1, L.U_INTEG] == 150.0
    step(core, TAG)  # decision at t = 3.0 s
    assert core.u[0, 0, L.U_FIRED] == 1.0
    assert core.u[0, 1, L.U_INTEG] == pytest.approx(125.0)
    m = core.episode_metrics(0)
    assert (m["tag_attempts_attacker"], m["tag_hits_attacker"]) == (2, 1)


def test_tag_switched_off_acts_as_stop():
    core = make_core([unit("UGV_A", 50.0, 100.0, 0.0)], [unit("DEF_UGV", 60.0, 100.0, 0.0)], engagement=NO_TAG)
    core.u[0, 0, L.U_SPEED] = 4.0
    step(core, TAG)
    assert core.u[0, 1, L.U_INTEG] == 150.0 and core.u[0, 0, L.U_FIRED] == 0.0
    assert core.u[0, 0, L.U_SPEED] < 4.0  # TAG (like STOP) brakes


def test_defender_turns_to_face_and_tags_an_attacker():
    # the defender faces away from a detected attacker: it turns (80 deg/s) and fires once the attacker is in its cone
    core = make_core([unit("UGV_A", 50.0, 100.0, 0.0)], [unit("DEF_UGV", 60.0, 100.0, 0.0)])
    hit_step = None
    for k in range(1, 20):
        step(core, STOP)
        if core.u[0, 0, L.U_INTEG] < 100.0:
            hit_step = k
            break
    assert hit_step is not None and hit_step > 4  # 150 degrees of turning take about 1.9 s
    damage = tag_damage(35.0, 10.0, core.static.cfg)  # DEF_UGV's 35 at 8 m, falling toward 10 at 20 m
    assert core.u[0, 0, L.U_INTEG] == pytest.approx(100.0 - damage)
    assert term(core, "integrity_loss") == pytest.approx(-0.1 * damage)


# --- capture ---------------------------------------------------------------------------------------------
def test_capture_after_exactly_fifteen_seconds_in_the_zone():
    core = make_core([unit("UGV_A", 100.0, 100.0, 0.0)])
    for k in range(1, 60):
        reward = step(core, STOP)
        assert core.outcome(0) is None, f"ended at step {k}"
        assert term(core, "capture_progress") == pytest.approx(2.0 * STEP_S)
        assert term(core, "zone_entry") == (20.0 if k == 1 else 0.0)
        assert left_fold_sum(core.reward_terms(0).values()) == reward
    assert core.ev[0, L.E_CAPTURE] == pytest.approx(59 * STEP_S)
    assert core.obs[0, -1] == pytest.approx(59 / 60)  # capture progress fraction
    reward = step(core, STOP)
    assert core.outcome(0) == "captured"
    assert core.terminated[0] and not core.truncated[0]
    assert term(core, "win_bonus") == 200.0 and term(core, "outcome_penalty") == 0.0
    assert left_fold_sum(core.reward_terms(0).values()) == reward
    m = core.episode_metrics(0)
    assert m["win"] == 1 and m["steps"] == 60
    assert m["time_to_capture"] == pytest.approx(15.0) and m["capture_progress"] == 15.0
    # capture progress is rewarded once: 2 per second for 15 s
    assert m["reward_terms"]["capture_progress"] == pytest.approx(30.0)
    assert m["reward_terms"]["zone_entry"] == 20.0


@pytest.mark.parametrize("contested, pauses", [(True, True), (False, False)])
def test_contested_capture_pauses_while_a_defender_is_in_the_zone(contested, pauses):
    core = make_core(
        [unit("UGV_A", 100.0, 100.0, 0.0)],
        [unit("DEF_UGV", 108.0, 100.0, 90.0)],
        engagement={"capture": {"contested": contested}, **NO_TAG},
    )
    for _ in range(8):
        step(core, STOP)
    assert core.ev[0, L.E_TIME_IN_ZONE] == pytest.approx(8 * STEP_S)
    assert core.ev[0, L.E_CAPTURE] == pytest.approx(0.0 if pauses else 8 * STEP_S)
    # the defender goes down: capture runs again
    core.u[0, 1, L.U_INTEG] = 0.0
    core.u[0, 1, L.U_ALIVE] = 0.0
    before = core.ev[0, L.E_CAPTURE]
    step(core, STOP)
    assert core.ev[0, L.E_CAPTURE] == pytest.approx(before + STEP_S)


def test_contested_capture_resumes_when_the_defender_leaves():
    core = make_core(
        [unit("UGV_A", 100.0, 100.0, 0.0)],
        [unit("DEF_UGV", 110.0, 100.0, 0.0)],
        engagement={"capture": {"contested": True}, **NO_TAG},
    )
    step(core, STOP)
    assert core.ev[0, L.E_CAPTURE] == 0.0
    core.u[0, 1, L.U_X] = 180.0  # moved out of the zone (and out of sight)
    step(core, STOP)
    assert core.ev[0, L.E_CAPTURE] == pytest.approx(STEP_S)


# --- outcomes ---------------------------------------------------------------------------------------------
def test_outcome_all_disabled():
    core = make_core([unit("UGV_A", 50.0, 100.0, 0.0)], [unit("DEF_UGV", 60.0, 100.0, 180.0)])
    core.u[0, 0, L.U_INTEG] = 5.0
    reward = step(core, STOP)
    assert core.outcome(0) == "all_disabled"
    assert core.terminated[0] and not core.truncated[0]
    terms = core.reward_terms(0)
    assert terms["outcome_penalty"] == -100.0 and terms["unit_disabled"] == -20.0
    assert terms["integrity_loss"] == pytest.approx(-0.5)
    assert left_fold_sum(terms.values()) == reward
    m = core.episode_metrics(0)
    assert m["outcome"] == "all_disabled" and m["win"] == 0 and m["attackers_alive"] == 0
    # a finished env is left alone by further steps
    step(core, E)
    assert core.rewards[0] == 0.0 and not core.terminated[0] and core.ev[0, L.E_STEP] == 1


def test_outcome_timeout():
    core = make_core([unit("UGV_A", 20.0, 20.0, 0.0)], world={"physics": {"episode_seconds": 5.0}})
    assert core.max_steps == 20
    for k in range(1, 20):
        step(core, STOP)
        assert core.outcome(0) is None, f"ended at step {k}"
    assert core.obs[0, -2] == pytest.approx(1 / 20)  # time remaining fraction
    reward = step(core, STOP)
    assert core.outcome(0) == "timeout"
    assert core.truncated[0] and not core.terminated[0]
    assert term(core, "outcome_penalty") == -20.0
    assert left_fold_sum(core.reward_terms(0).values()) == reward
    m = core.episode_metrics(0)
    assert m["steps"] == 20 and m["sim_time"] == pytest.approx(5.0)


def test_default_episode_is_1200_steps_and_never_stalls_while_an_attacker_is_in_the_zone():
    # attacker in the zone, contested by a defender that cannot tag: no progress for 300 s, but no stall either
    core = make_core(
        [unit("UGV_A", 100.0, 100.0, 0.0)],
        [unit("DEF_UGV", 105.0, 100.0, 90.0)],
        engagement={"capture": {"contested": True}, **NO_TAG},
    )
    assert core.max_steps == 1200
    for k in range(1, 1200):
        step(core, STOP)
        assert core.outcome(0) is None, f"ended ({core.outcome(0)}) at step {k}"
    step(core, STOP)
    assert core.outcome(0) == "timeout" and core.truncated[0]
    assert core.episode_metrics(0)["time_in_zone"] == pytest.approx(300.0)
    assert core.ev[0, L.E_CAPTURE] == 0.0


def test_outcome_stalled_after_thirty_seconds_without_progress():
    core = make_core([unit("UGV_A", 20.0, 20.0, 0.0)])
    for k in range(1, 120):
        step(core, STOP)
        assert core.outcome(0) is None, f"ended at step {k}"
    reward = step(core, STOP)  # t = 30 s
    assert core.outcome(0) == "stalled"
    assert core.truncated[0] and not core.terminated[0]
    assert term(core, "outcome_penalty") == -50.0
    assert left_fold_sum(core.reward_terms(0).values()) == reward


def test_stall_clock_restarts_on_progress_and_after_leaving_the_zone():
    core = make_core(
        [unit("UGV_A", 100.0, 100.0, 0.0)],
        [unit("DEF_UGV", 105.0, 100.0, 90.0)],
        engagement={"capture": {"contested": True}, **NO_TAG},
    )
    for _ in range(200):  # 50 s in the zone without capture
        step(core, STOP)
    assert core.outcome(0) is None
    core.u[0, 0, L.U_X] = 170.0  # carried out of the zone: the last in-zone step was progress
    for k in range(1, 120):
        step(core, STOP)
        assert core.outcome(0) is None, f"ended at step {k} after leaving"
    step(core, STOP)
    assert core.outcome(0) == "stalled"


def test_distance_progress_postpones_the_stall():
    # drive toward the objective for 4 s (well over 1 m of progress), then stop: stalled 30 s after the last metre gained
    core = make_core([unit("UAV_B", 20.0, 100.0, 0.0)])
    for _ in range(16):
        step(core, E)
    assert core.ev[0, L.E_MARK_T] > 2.0  # the stall clock restarted while the unit made progress
    while core.outcome(0) is None:
        step(core, STOP)
    assert core.outcome(0) == "stalled"
    assert core.ev[0, L.E_TIME] > 34.0
    assert core.ev[0, L.E_TIME] - core.ev[0, L.E_MARK_T] == pytest.approx(30.0)


# --- reward terms -------------------------------------------------------------------------------------------
def test_zone_entry_is_counted_once():
    core = make_core([unit("UAV_B", 80.0, 100.0, 0.0)])
    in_zone, entries = [], []
    for action in [E] * 10 + [W] * 16 + [E] * 16:
        step(core, action)
        in_zone.append(bool(core.ev[0, L.E_IN_ZONE]))
        entries.append(term(core, "zone_entry"))
    # it was in the zone, left it, and came back
    changes = sum(a != b for a, b in zip(in_zone, in_zone[1:]))
    assert changes >= 2 and in_zone[-1]
    assert sum(e != 0.0 for e in entries) == 1 and sum(entries) == 20.0
    assert entries[in_zone.index(True)] == 20.0


def test_rings_are_rewarded_once_each():
    # start 85 m west of the objective: rings at 80, 60, 40 and 25 m are crossed on the way in
    core = make_core([unit("UAV_B", 15.0, 100.0, 0.0)])
    rings = []
    while core.u[0, 0, L.U_X] < 80.0:
        step(core, E)
        rings.append(term(core, "ring_bonus"))
    assert sorted(r for r in rings if r) == [5.0] * 4
    d = 100.0 - core.u[0, 0, L.U_X]
    assert core.rsum[0, REWARD_TERMS.index("distance_potential")] == pytest.approx(0.5 * (85.0 - d))
    # back out past 80 m and in again: nothing more
    while core.u[0, 0, L.U_X] > 15.0:
        step(core, W)
    while core.u[0, 0, L.U_X] < 80.0:
        step(core, E)
    assert core.rsum[0, REWARD_TERMS.index("ring_bonus")] == 20.0
    # the potential telescopes: what was lost going out was earned back
    d = 100.0 - core.u[0, 0, L.U_X]
    assert core.rsum[0, REWARD_TERMS.index("distance_potential")] == pytest.approx(0.5 * (85.0 - d))


def test_rings_already_inside_at_spawn_earn_nothing():
    core = make_core([unit("UAV_B", 50.0, 100.0, 0.0)])
    while core.u[0, 0, L.U_X] < 80.0:
        step(core, E)
    assert core.rsum[0, REWARD_TERMS.index("ring_bonus")] == 10.0  # 40 and 25 m only


def test_shaping_aims_at_the_jittered_objective():
    core = make_core([unit("UAV_B", 20.0, 20.0, 45.0)], scenario={"randomization": {"objective_jitter": 10.0}})
    ox, oy = core.ev[0, L.E_OBJ_X], core.ev[0, L.E_OBJ_Y]
    assert (ox, oy) != (100.0, 100.0)
    d0 = math.hypot(20.0 - ox, 20.0 - oy)
    step(core, NE)
    d1 = math.hypot(core.u[0, 0, L.U_X] - ox, core.u[0, 0, L.U_Y] - oy)
    assert term(core, "distance_potential") == pytest.approx(0.5 * (d0 - d1))
    a0 = core.obs[0, : L.PER_ATTACKER_BASE]
    assert a0[10] == pytest.approx((ox - core.u[0, 0, L.U_X]) / 200.0, abs=1e-6)


@pytest.mark.parametrize("seed", [0, 1])
def test_reward_terms_sum_exactly_to_the_reward_over_whole_episodes(seed):
    env = MissionEnv(engagement={"capture": {"contested": True}})
    greedy = make_policy("greedy", env.config)
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    episodes, ret, totals = 0, 0.0, np.zeros(len(REWARD_TERMS))
    while episodes < 3:
        action = greedy(obs)[0]
        explore = rng.random(action.shape) < 0.3
        action = np.where(explore, rng.integers(0, 11, size=action.shape), action)
        obs, reward, terminated, truncated, info = env.step(action)
        assert isinstance(reward, float)
        assert list(info["reward_terms"]) == list(REWARD_TERMS)
        assert left_fold_sum(info["reward_terms"].values()) == reward
        assert sum(info["reward_terms"].values()) == pytest.approx(reward, abs=1e-9)
        ret += reward
        totals += np.array(list(info["reward_terms"].values()))
        if terminated or truncated:
            m = info["episode_metrics"]
            assert info["outcome"] in ("captured", "all_disabled", "timeout", "stalled")
            assert np.allclose(list(m["reward_terms"].values()), totals)
            assert sum(m["reward_terms"].values()) == pytest.approx(ret)
            episodes += 1
            ret, totals = 0.0, np.zeros(len(REWARD_TERMS))
            obs, _ = env.reset()
        else:
            assert info["outcome"] is None


def test_vec_reward_terms_sum_to_the_reward_including_the_last_step():
    env = MissionVecEnv(n_envs=4, seed=3, world={"physics": {"episode_seconds": 10.0}})
    policy = make_policy("random", env.config, seed=0)
    obs = env.reset()
    ended = 0
    for _ in range(100):
        obs, rewards, dones, infos = env.step(policy(obs))
        np.testing.assert_array_equal(rewards, env.reward_terms.sum(axis=1).astype(np.float32))
        for i in np.flatnonzero(dones):  # the ended episode's last terms survive its auto-reset
            ended += 1
            terms = env.env_method("reward_terms", indices=[i])[0]
            assert terms["outcome_penalty"] < 0.0 and np.float32(left_fold_sum(terms.values())) == rewards[i]
    assert ended >= 4


# --- defenders ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dt, repeat", [(0.05, 5), (0.1, 5), (0.05, 2)])
def test_defender_memory_expires_after_five_seconds_of_sim_time(dt, repeat):
    # the defender patrols toward a waypoint to the north, but remembers an attacker 40 m to its east, seen at t = 0
    core = make_core(
        [unit("UGV_A", 10.0, 10.0, 0.0)],
        [unit("DEF_UGV", 100.0, 100.0, 90.0, waypoints=[[100.0, 190.0]])],
        world={"physics": {"dt": dt, "action_repeat": repeat}},
    )
    core.ka[0, 0, [L.A_X, L.A_Y, L.A_SEEN_T, L.A_EVER, L.A_VIS]] = (140.0, 100.0, 0.0, 1.0, 0.0)
    step_s = dt * repeat
    last_chase = round(5.0 / step_s)  # decisions at t = k * step_s chase while t <= 5 s
    for k in range(last_chase + 3):
        t_decision = core.ev[0, L.E_TIME]
        step(core, STOP)
        assert core.ka[0, 0, L.A_VIS] == 0.0  # the attacker itself is never seen
        chasing = abs(core.u[0, 1, L.U_TGT_HEAD]) < 0.05 and core.u[0, 1, L.U_TGT_SPEED] == pytest.approx(0.8 * 6.0)
        patrolling = core.u[0, 1, L.U_TGT_HEAD] > 1.0 and core.u[0, 1, L.U_TGT_SPEED] == pytest.approx(0.5 * 6.0)
        if k <= last_chase:
            assert chasing, f"not chasing at t = {t_decision:.2f} s"
        else:
            assert patrolling, f"still chasing at t = {t_decision:.2f} s"


def test_defender_chases_a_visible_attacker_then_its_last_seen_position():
    # an attacker 30 m west of the defender is visible (defender radar/lidar); the defender heads for it
    core = make_core([unit("UGV_A", 70.0, 100.0, 0.0)], [unit("DEF_UGV", 100.0, 100.0, 90.0, waypoints=[[100.0, 190.0]])])
    step(core, STOP)
    assert core.ka[0, 0, L.A_VIS] == 1.0
    assert abs(abs(core.u[0, 1, L.U_TGT_HEAD]) - math.pi) < 0.05  # west
    # the attacker vanishes (carried far away); the defender goes on to where it was last seen
    core.u[0, 0, L.U_X], core.u[0, 0, L.U_Y] = 5.0, 5.0
    step(core, STOP)
    assert core.ka[0, 0, L.A_VIS] == 0.0
    step(core, STOP)
    assert abs(abs(core.u[0, 1, L.U_TGT_HEAD]) - math.pi) < 0.05


def test_defender_reaction_delay():
    # a fixed 0.5 s reaction delay: a freshly seen attacker is ignored for the first 0.5 s
    core = make_core(
        [unit("UGV_A", 40.0, 100.0, 0.0)],
        [unit("DEF_UGV", 100.0, 100.0, 90.0, waypoints=[[100.0, 190.0]])],
        scenario={"randomization": {"reaction_delay": True}},
        engagement={"defenders": {"reaction_delay": [0.5, 0.5]}},
    )
    assert core.dm[0, 0, L.D_DELAY] == 0.5
    step(core, STOP)
    assert core.ka[0, 0, L.A_VIS] == 0.0  # 60 m: out of the defender's sensors
    core.u[0, 0, L.U_X] = 70.0  # now 30 m away
    step(core, STOP)
    assert core.ka[0, 0, L.A_VIS] == 1.0
    headings = []
    for _ in range(3):
        step(core, STOP)
        headings.append(core.u[0, 1, L.U_TGT_HEAD])
    assert headings[0] > 1.0 and headings[1] > 1.0  # seen 0 and 0.25 s ago: still patrolling north
    assert abs(abs(headings[2]) - math.pi) < 0.05  # 0.5 s: chases west


# --- observation and fog of war ---------------------------------------------------------------------------------
def test_observation_is_finite_and_inside_the_box():
    env = MissionVecEnv(n_envs=4, seed=11)
    space = env.observation_space
    policies = [make_policy("random", env.config, seed=1), make_policy("greedy", env.config)]
    obs = env.reset()
    for t in range(400):
        assert obs.dtype == np.float32 and np.isfinite(obs).all()
        assert (obs >= space.low).all() and (obs <= space.high).all(), np.argwhere((obs < -1) | (obs > 1))
        obs, _, dones, infos = env.step(policies[(t // 50) % 2](obs))
        for i in np.flatnonzero(dones):
            assert space.contains(infos[i]["terminal_observation"])


def test_fog_of_war_hides_never_seen_defenders():
    core = make_core([unit("UGV_A", 20.0, 20.0, 0.0)], [unit("DEF_UGV", 180.0, 180.0, 180.0)])
    assert core.obs.shape == (1, 21 + 7 + 2)
    assert core.kd[0, 0, L.K_EVER] == 0.0
    assert np.all(defender_slot(core, 0) == 0.0)
    step(core, STOP)
    assert np.all(defender_slot(core, 0) == 0.0)
    # the defender appears 20 m ahead of the attacker, inside its camera's field of view
    core.u[0, 1, L.U_X], core.u[0, 1, L.U_Y] = 40.0, 20.0
    step(core, STOP)
    slot = defender_slot(core, 0).copy()
    dx = core.u[0, 1, L.U_X] - core.u[0, 0, L.U_X]
    assert slot[0] == pytest.approx(dx / 200.0, abs=1e-6)
    assert slot[4] == 1.0 and slot[5] == 1.0 and slot[6] == 0.0  # integrity, visible now, seen 0 s ago
    # it leaves: the slot keeps its last known position and ages
    seen_at = core.u[0, 1, [L.U_X, L.U_Y]].copy()
    core.u[0, 1, L.U_X], core.u[0, 1, L.U_Y] = 180.0, 180.0
    step(core, STOP)
    step(core, STOP)
    aged = defender_slot(core, 0)
    assert aged[5] == 0.0
    assert aged[6] == pytest.approx(2 * STEP_S / 30.0)
    assert core.kd[0, 0, L.K_X] == pytest.approx(seen_at[0]) and core.kd[0, 0, L.K_Y] == pytest.approx(seen_at[1])
    assert aged[0] == pytest.approx(slot[0], abs=1e-6)


def test_defender_motion_shows_speed_and_reload_while_seen():
    """observation.defender_motion adds, per defender slot, speed / max speed and tag cooldown / cooldown time
    while an attacker sees the defender, zeros otherwise; the rest of the vector is unchanged."""
    attackers = [unit("UGV_A", 20.0, 20.0, 0.0)]
    defenders = [unit("DEF_UGV", 180.0, 180.0, 180.0)]
    core = make_core(attackers, defenders, world={"observation": {"defender_motion": True}})
    plain = make_core(attackers, defenders)
    assert core.obs.shape[1] == L.obs_size(1, 1, 8, defender_motion=True) == plain.obs.shape[1] + L.PER_MOTION

    def motion() -> np.ndarray:
        return core.obs[0, -2 - L.PER_MOTION : -2]

    assert np.all(motion() == 0.0)  # never seen
    # it drives at 3 m/s with 1.5 s of its 3 s reload left, 20 m ahead inside the camera's field of view
    for c in (core, plain):
        c.u[0, 1, L.U_X], c.u[0, 1, L.U_Y] = 40.0, 20.0
        c.u[0, 1, L.U_SPEED], c.u[0, 1, L.U_TAG_CD] = 3.0, 1.5
        step(c, STOP)
    assert core.kd[0, 0, L.K_VIS] == 1.0
    speed = core.u[0, 1, L.U_SPEED] / 6.0
    assert motion() == pytest.approx([speed, (1.5 - STEP_S) / 3.0], abs=1e-5)
    assert 0.0 < speed < 1.0
    assert np.array_equal(np.delete(core.obs[0], np.s_[-2 - L.PER_MOTION : -2]), plain.obs[0])
    # out of sight: its motion is unknown again, though its last position stays
    core.u[0, 1, L.U_X], core.u[0, 1, L.U_Y] = 180.0, 180.0
    step(core, STOP)
    assert core.kd[0, 0, L.K_VIS] == 0.0 and np.all(motion() == 0.0)


def test_observation_layout_of_an_attacker():
    core = make_core([unit("UGV_A", 50.0, 150.0, 90.0)])
    a = core.obs[0, : L.PER_ATTACKER_BASE + 8]
    expected = [
        -0.5,
        0.5,
        0.0,
        1.0,
        0.0,
        1.0,
        0.0,
        0.0,
        0.0,
        0.0,
        50 / 200,
        -50 / 200,
        math.hypot(50, 50) / math.hypot(200, 200),
    ]
    assert np.allclose(a[: L.PER_ATTACKER_BASE], expected, atol=1e-6)
    # lidar: ray 0 points north, 50 m to the wall, beyond the 30 m lidar range
    assert a[L.PER_ATTACKER_BASE] == 1.0
    assert core.obs[0, -2:].tolist() == [1.0, 0.0]


# --- scan, simultaneous tags, the smaller reward terms -------------------------------------------------------------
def test_scan_widens_sensors_for_half_a_second_with_a_five_second_cooldown():
    # UGV_A's camera reaches 40 m (60 m while scanning); the defender stands 50 m ahead
    core = make_core(
        [unit("UGV_A", 50.0, 100.0, 0.0)], [unit("DEF_UGV", 100.0, 100.0, 0.0)], engagement={"scan": {"enabled": True}}
    )
    core.u[0, 0, L.U_SPEED] = 4.0
    step(core, SCAN)
    assert core.u[0, 0, L.U_SPEED] < 4.0  # SCAN stops the unit
    assert core.u[0, 0, L.U_SCAN_T] == pytest.approx(0.5 - STEP_S)
    assert core.u[0, 0, L.U_SCAN_CD] == pytest.approx(5.0 - STEP_S)
    assert core.kd[0, 0, L.K_VIS] == 1.0
    step(core, SCAN)  # the scan runs out; asking again during the cooldown does nothing
    assert core.u[0, 0, L.U_SCAN_T] == 0.0 and core.kd[0, 0, L.K_VIS] == 0.0
    for _ in range(18):  # decisions up to t = 4.75 s
        step(core, SCAN)
        assert core.u[0, 0, L.U_SCAN_T] == 0.0
    step(core, SCAN)  # t = 5.0 s
    assert core.u[0, 0, L.U_SCAN_T] > 0.0 and core.kd[0, 0, L.K_VIS] == 1.0


def test_scan_switched_off_acts_as_stop():
    core = make_core([unit("UGV_A", 50.0, 100.0, 0.0)], [unit("DEF_UGV", 100.0, 100.0, 0.0)])
    core.u[0, 0, L.U_SPEED] = 4.0
    step(core, SCAN)
    assert core.u[0, 0, L.U_SCAN_T] == 0.0 and core.u[0, 0, L.U_SCAN_CD] == 0.0
    assert core.u[0, 0, L.U_SPEED] == pytest.approx(4.0 - 3.0 * STEP_S)
    assert core.kd[0, 0, L.K_VIS] == 0.0


def test_both_teams_tag_at_once():
    # attacker and defender face each other 8 m apart with 1 integrity point each: both shots land
    core = make_core([unit("UGV_A", 50.0, 100.0, 0.0)], [unit("DEF_UGV", 58.0, 100.0, 180.0)])
    core.u[0, :, L.U_INTEG] = 1.0
    reward = step(core, TAG)
    assert core.u[0, :, L.U_ALIVE].tolist() == [0.0, 0.0]
    terms = core.reward_terms(0)
    assert terms["defender_disabled"] == 10.0 and terms["tag_hit"] == pytest.approx(0.2)
    assert terms["unit_disabled"] == -20.0 and terms["outcome_penalty"] == -100.0
    assert core.outcome(0) == "all_disabled" and left_fold_sum(terms.values()) == reward
    m = core.episode_metrics(0)
    assert (m["tag_hits_attacker"], m["tag_hits_defender"], m["defenders_disabled"]) == (1, 1, 1)


@pytest.mark.parametrize("gap, spread", [(3.0, False), (5.0, False), (6.0, True)])
def test_spread_formation(gap, spread):
    core = make_core([unit("UAV_A", 20.0, 20.0, 0.0), unit("UAV_A", 20.0, 20.0 + gap, 0.0), unit("UAV_A", 20.0, 50.0, 0.0)])
    step(core, STOP, STOP, STOP)
    assert term(core, "spread_formation") == (0.005 if spread else 0.0)
    assert term(core, "time") == -0.001


def test_detected_term():
    # an attacker 30 m from the defender is detected (radar/lidar), one 120 m away is not
    for x, detected in ((70.0, True), (10.0, False)):
        core = make_core([unit("UGV_A", x, 20.0, 0.0)], [unit("DEF_UGV", 100.0, 20.0, 180.0)], engagement=NO_TAG)
        step(core, STOP)
        assert term(core, "detected") == (-0.05 if detected else 0.0)
        assert core.u[0, 0, L.U_DETECTED] == float(detected)
        m = core.episode_metrics(0)
        assert m["detected_time_fraction"] == float(detected)
        assert ("first_detection_time" in m) is detected


def test_radar_sees_through_obstacles_with_noise():
    # a wall between a defender and an attacker 20 m away: cameras and lidar are blind, the radar is not
    core = make_core(
        [unit("UGV_A", 80.0, 100.0, 0.0)], [unit("DEF_UGV", 100.0, 100.0, 180.0)], rects=[(90.0, 100.0, 2.0, 20.0, 0.0)]
    )
    s = core.static
    state, slot = unit_sees(core.u, s.up, s.sp, 0, 1, 0, s.circles, s.rects, s.cfg)
    assert state == SEEN_RADAR and slot == 1  # DEF_UGV: lidar_medium, radar_medium, camera_wide
    reports = np.array(
        [team_detects(core.u, s.up, s.sp, 0, 1, 2, 0, s.circles, s.rects, s.cfg, core.rng)[1:] for _ in range(400)]
    )
    err = np.hypot(reports[:, 0] - 80.0, reports[:, 1] - 100.0)
    assert err.std() > 0.5  # noisy: radar_medium has range sigma 2 m and bearing sigma 3 deg
    assert err.max() < 10.0
    assert np.abs(reports.mean(axis=0) - (80.0, 100.0)).max() < 0.5


# --- defender modes and randomisation ---------------------------------------------------------------------------------
def test_guard_mode_returns_to_the_objective_and_holds():
    core = make_core([unit("UGV_A", 10.0, 10.0, 0.0)], [unit("DEF_UGV", 100.0, 150.0, 0.0, waypoints=[[190, 150]])])
    core.dm[0, 0, L.D_MODE] = L.MODE_GUARD
    step(core, STOP)
    assert core.u[0, 1, L.U_TGT_HEAD] == pytest.approx(-math.pi / 2)  # straight back south, not to its waypoint
    assert core.u[0, 1, L.U_TGT_SPEED] == pytest.approx(0.5 * 6.0)
    core.u[0, 1, L.U_Y] = 115.0  # within 20 m of the objective: hold
    step(core, STOP)
    assert core.u[0, 1, L.U_TGT_SPEED] == 0.0


@pytest.mark.parametrize("mode, speed", [(L.MODE_PATROL, 0.8 * 6.0), (L.MODE_INTERCEPT, 1.0 * 6.0)])
def test_intercept_mode_chases_faster(mode, speed):
    core = make_core([unit("UGV_A", 70.0, 100.0, 0.0)], [unit("DEF_UGV", 100.0, 100.0, 180.0)])
    core.dm[0, 0, L.D_MODE] = mode
    step(core, STOP)
    assert core.u[0, 1, L.U_TGT_SPEED] == pytest.approx(speed)


def test_configured_defender_speeds_are_honoured():
    core = make_core(
        [unit("UGV_A", 10.0, 10.0, 0.0)],
        [unit("DEF_UGV", 100.0, 100.0, 0.0, waypoints=[[190, 100]])],
        engagement={"defenders": {"patrol_speed": 0.3}},
    )
    step(core, STOP)
    assert core.u[0, 1, L.U_TGT_SPEED] == pytest.approx(0.3 * 6.0)
    assert core.u[0, 1, L.U_TGT_HEAD] == pytest.approx(0.0)


def test_randomisation_draws_within_its_bounds():
    n = 400
    config = load_config()
    core = MissionCore(config, n_envs=n)
    core.seed(np.arange(n), np.arange(n) * 7919 + 1)
    core.reset()
    s = core.static
    obj = core.ev[:, [L.E_OBJ_X, L.E_OBJ_Y]]
    assert np.abs(obj - 100.0).max() <= 10.0 and obj.std(axis=0).min() > 3.0
    n_a = core.n_attackers
    offsets = core.u[:, :, [L.U_X, L.U_Y]] - s.up[None, :, [L.P_X0, L.P_Y0]]
    assert np.abs(offsets[:, :n_a]).max() <= 5.0 and np.abs(offsets[:, n_a:]).max() <= 8.0
    assert offsets[:, :n_a].std() > 1.5 and offsets[:, n_a:].std() > 2.5
    grounded = (s.up[:, L.P_AIR] == 0) | (s.up[:, L.P_ALT0] == 0)
    for e in range(n):
        for i in np.flatnonzero(grounded):
            assert not overlaps_obstacle(core.u[e, i, L.U_X], core.u[e, i, L.U_Y], s.up[i, L.P_RADIUS], s.circles, s.rects)
    wp_offsets = core.wps - s.waypoints[None]
    assert np.abs(wp_offsets).max() <= 10.0 and wp_offsets.std() > 3.0
    modes = core.dm[:, :, L.D_MODE].ravel()
    freqs = [np.mean(modes == m) for m in (L.MODE_PATROL, L.MODE_GUARD, L.MODE_INTERCEPT)]
    assert np.allclose(freqs, [0.5, 0.3, 0.2], atol=0.06)
    delays = core.dm[:, :, L.D_DELAY]
    assert delays.min() >= 0.0 and delays.max() <= 0.5 and delays.std() > 0.1
    assert core.u[:, n_a:, L.U_ALT].tolist() == [[0.0, 0.0]] * n and (core.u[:, 2:4, L.U_ALT] == 1.0).all()


def test_randomisation_switched_off_gives_the_scenario_as_written():
    core = MissionCore(load_config(overrides={"scenario": {"randomization": NO_RANDOM}}), n_envs=3)
    core.seed([0, 1, 2], [1, 2, 3])
    core.reset()
    s = core.static
    assert (core.ev[:, [L.E_OBJ_X, L.E_OBJ_Y]] == 100.0).all()
    assert (core.u[:, :, [L.U_X, L.U_Y]] == s.up[None, :, [L.P_X0, L.P_Y0]]).all()
    assert (core.wps == s.waypoints[None]).all()
    assert (core.dm[:, :, L.D_MODE] == L.MODE_PATROL).all() and (core.dm[:, :, L.D_DELAY] == 0.0).all()
