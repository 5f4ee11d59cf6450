"""The config loader: packaged defaults, a user's config directory and scenario file, overrides, and
errors that name the file, the key and the reason."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from mission_gym.config import REWARD_TERMS, SECTIONS, ConfigError, MissionConfig, defaults_dir, load_config, parse_yaml
from mission_gym.envs import MissionEnv


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text)
    return path


def test_defaults_load_and_match_the_spec():
    config = load_config()
    assert isinstance(config, MissionConfig)
    assert {p.name for p in defaults_dir().glob("*.yaml")} == {f"{s}.yaml" for s in SECTIONS}
    world = config.world
    assert (world.arena.width, world.arena.height) == (200.0, 200.0)
    assert (world.physics.dt, world.physics.action_repeat, world.physics.episode_seconds) == (0.05, 5, 300.0)
    assert len(world.obstacles.circles) + len(world.obstacles.rects) == 22
    sc = config.scenario
    assert [a.type for a in sc.attackers] == ["UGV_A", "UGV_B", "UAV_A", "UAV_B"]
    assert [d.type for d in sc.defenders] == ["DEF_UGV", "DEF_UGV"]
    assert (sc.objective.x, sc.objective.y) == (100.0, 100.0)
    tag = config.engagement.tag
    assert (tag.range, tag.optimal_range, tag.half_angle, tag.cooldown) == (20.0, 8.0, 30.0, 3.0)
    assert config.engagement.capture.time_to_capture == 15.0
    assert config.engagement.defenders.memory_seconds == 5.0
    assert config.reward.ring_radii == [80.0, 60.0, 40.0, 25.0]
    assert set(REWARD_TERMS) - {"outcome_penalty"} <= set(type(config.reward).model_fields)


# type: team, category, max speed, accel, turn, radius, integrity, tag damage, sensors
UNIT_TABLE = {
    "UGV_A": ("attacker", "ground", 8, 3, 90, 2.5, 100, 25, ["lidar_short", "camera_front"]),
    "UGV_B": ("attacker", "ground", 10, 4, 120, 2.0, 80, 20, ["lidar_short", "radar_medium"]),
    "UAV_A": ("attacker", "air", 12, 5, 180, 0.5, 30, 15, ["camera_wide", "radar_short"]),
    "UAV_B": ("attacker", "air", 15, 6, 200, 0.4, 30, 12, ["lidar_long", "camera_front"]),
    "DEF_UGV": ("defender", "ground", 6, 2.5, 80, 2.5, 150, 35, ["lidar_medium", "radar_medium", "camera_wide"]),
    "DEF_UAV": ("defender", "air", 10, 4, 150, 0.6, 50, 10, ["radar_long", "camera_wide"]),
}


@pytest.mark.parametrize("name", list(UNIT_TABLE))
def test_default_unit_types_match_the_spec_table(name):
    t = load_config().units.types[name]
    got = (t.team, t.category, t.max_speed, t.accel, t.turn_rate, t.radius, t.integrity, t.tag_damage, t.sensors)
    assert got == UNIT_TABLE[name]


@pytest.mark.parametrize(
    "section, text, key, reason",
    [
        ("world", "physics:\n  dtt: 0.1\n", "physics.dtt", "unknown key"),
        ("reward", "win_bonus: 200\nwin_bonnus: 100\n", "win_bonnus", "unknown key"),
        ("reward", 'time: "3e-4"\n', "time", "valid number"),
        ("reward", "win_bonus: true\n", "win_bonus", "valid number"),
        ("world", "physics:\n  action_repeat: 2.5\n", "physics.action_repeat", "valid integer"),
        ("units", "types:\n  UGV_A:\n    max_speed: fast\n", "types.UGV_A.max_speed", "valid number"),
        ("world", "physics:\n  dt: -0.05\n", "physics.dt", "greater than 0"),
        ("engagement", "tag:\n  half_angle: 200\n", "tag.half_angle", "less than or equal to 180"),
        ("engagement", "tag:\n  optimal_range: 30\n", "tag", "optimal_range 30.0 must be <= range 20.0"),
        (
            "engagement",
            "defenders:\n  mode_probs: {patrol: 0.5, guard_objective: 0.5, intercept: 0.5}\n",
            "defenders.mode_probs",
            "sum to 1",
        ),
        (
            "engagement",
            "defenders:\n  reaction_delay: [0.5, 0.1]\n",
            "defenders",
            "reaction_delay must be [low, high] with low <= high (got [0.5, 0.1])",
        ),
        ("scenario", "attackers: []\n", "attackers", "at least 1 item"),
        ("sensors", "radar_long: {kind: sonar, range: 10, fov: 90}\n", "radar_long.kind", "'lidar', 'radar' or 'camera'"),
    ],
)
def test_bad_file_names_file_key_and_reason(tmp_path, section, text, key, reason):
    path = write(tmp_path, f"{section}.yaml", text)
    with pytest.raises(ConfigError) as info:
        load_config(config_dir=tmp_path)
    message = str(info.value)
    assert message.startswith(f"{path}: {key}"), message
    assert reason in message


def test_yaml_floats_in_exponent_form_are_numbers(tmp_path):
    # PyYAML's YAML 1.1 resolver reads 3e-4 as a string; the project's loader reads it as a float
    assert parse_yaml("x: 3e-4\ny: 1E3\nz: -2.5e+1\n") == {"x": 3e-4, "y": 1000.0, "z": -25.0}
    write(tmp_path, "reward.yaml", "time: 3e-4\n")
    assert load_config(config_dir=tmp_path).reward.time == pytest.approx(3e-4)


def test_invalid_yaml_and_non_mapping_files(tmp_path):
    path = write(tmp_path, "world.yaml", "physics: {dt: 0.1\n")
    with pytest.raises(ConfigError, match=re.escape(str(path)) + ".*not valid YAML"):
        load_config(config_dir=tmp_path)
    path = write(tmp_path, "world.yaml", "- 1\n- 2\n")
    with pytest.raises(ConfigError, match=re.escape(str(path)) + ".*expected a mapping"):
        load_config(config_dir=tmp_path)


def test_missing_config_dir_and_scenario_file(tmp_path):
    with pytest.raises(ConfigError, match="not a directory"):
        load_config(config_dir=tmp_path / "nope")
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(scenario=tmp_path / "nope.yaml")


def test_config_dir_files_override_only_what_they_set(tmp_path):
    write(tmp_path, "reward.yaml", "win_bonus: 100\noutcome_penalty: {stalled: -10}\n")
    write(tmp_path, "world.yaml", "physics:\n  episode_seconds: 60\n")
    config = load_config(config_dir=tmp_path)
    default = load_config()
    assert config.reward.win_bonus == 100.0
    assert config.reward.outcome_penalty.stalled == -10.0
    assert config.reward.outcome_penalty.timeout == default.reward.outcome_penalty.timeout
    assert config.reward.capture_progress == default.reward.capture_progress
    assert config.world.physics.episode_seconds == 60.0 and config.world.physics.dt == 0.05
    assert config.world.obstacles == default.world.obstacles
    for section in ("scenario", "units", "sensors", "engagement"):
        assert getattr(config, section) == getattr(default, section)
    env = MissionEnv(config_dir=tmp_path)
    assert env.core.max_steps == 240


def test_a_scenario_file_of_the_users_own(tmp_path):
    path = write(
        tmp_path,
        "two_on_one.yaml",
        """
name: two_on_one
objective: {x: 150, y: 50, radius: 10}
attackers:
  - {type: UAV_B, x: 20, y: 20, heading: 0}
  - {type: UGV_B, x: 30, y: 20}
defenders:
  - {type: DEF_UAV, x: 140, y: 60, altitude: 2, waypoints: [[140, 60], [160, 40]]}
randomization: {objective_jitter: 0}
""",
    )
    config = load_config(scenario=path)
    sc = config.scenario
    assert sc.name == "two_on_one"
    assert [a.type for a in sc.attackers] == ["UAV_B", "UGV_B"]  # lists replace the default's
    assert [d.type for d in sc.defenders] == ["DEF_UAV"]
    assert sc.randomization.objective_jitter == 0.0 and sc.randomization.attacker_spawn_jitter == 5.0
    env = MissionEnv(scenario=path)
    assert env.action_space.nvec.tolist() == [11, 11]
    assert env.observation_space.shape == (2 * (13 + 8) + 1 * 7 + 2,)
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    assert env.core.ev[0, 3:5].tolist() == [150.0, 50.0]  # the objective, unjittered


def test_scenario_as_a_mapping_of_overrides():
    env = MissionEnv(scenario={"attackers": [{"type": "UGV_A", "x": 10, "y": 10}], "defenders": []})
    assert env.action_space.shape == (1,)
    assert env.observation_space.shape == (13 + 8 + 2,)


@pytest.mark.parametrize(
    "bad, suggestion",
    [("UGV_AA", "UGV_A"), ("uav_b", "UAV_B"), ("DEF_UVG", "DEF_UGV")],
)
def test_unknown_unit_type_suggests_the_closest_name(tmp_path, bad, suggestion):
    path = write(tmp_path, "mine.yaml", f"attackers:\n  - {{type: {bad}, x: 10, y: 10}}\n")
    with pytest.raises(ConfigError) as info:
        load_config(scenario=path)
    message = str(info.value)
    assert message.startswith(f"{path}: attackers.0.type: unknown unit type {bad!r}"), message
    assert f"did you mean {suggestion!r}" in message


def test_cross_file_errors_name_the_file_at_fault(tmp_path):
    write(tmp_path, "scenario.yaml", "defenders:\n  - {type: UGV_A, x: 10, y: 10}\n")
    with pytest.raises(ConfigError, match=re.escape(f"{tmp_path / 'scenario.yaml'}: defenders.0.type: 'UGV_A' is a attacker")):
        load_config(config_dir=tmp_path)
    write(tmp_path, "scenario.yaml", "attackers:\n  - {type: UGV_A, x: 250, y: 10}\n")
    with pytest.raises(ConfigError, match="attackers.0: position .* outside the 200.0x200.0 arena"):
        load_config(config_dir=tmp_path)
    write(tmp_path, "scenario.yaml", "attackers:\n  - {type: UAV_A, x: 10, y: 10, altitude: 3}\n")
    with pytest.raises(ConfigError, match="attackers.0.altitude: band 3 but UAV_A has bands 0..2"):
        load_config(config_dir=tmp_path)
    (tmp_path / "scenario.yaml").unlink()
    path = write(tmp_path, "units.yaml", "types:\n  UGV_A:\n    sensors: [lidar_shrt]\n")
    with pytest.raises(
        ConfigError, match=re.escape(f"{path}: types.UGV_A.sensors: unknown sensor 'lidar_shrt'") + ".*'lidar_short'"
    ):
        load_config(config_dir=tmp_path)


def test_overrides():
    config = load_config(overrides={"reward": {"win_bonus": 50.0}, "engagement": {"capture": {"contested": True}}})
    assert config.reward.win_bonus == 50.0 and config.engagement.capture.contested
    assert config.engagement.capture.time_to_capture == 15.0
    env = MissionEnv(reward={"time": -0.01}, world={"physics": {"episode_seconds": 10.0}})
    assert env.config.reward.time == -0.01 and env.core.max_steps == 40
    with pytest.raises(ValueError, match="not both"):
        MissionEnv(config=config, reward={"time": 0.0})


def test_override_of_an_unknown_section_suggests_the_closest():
    with pytest.raises(ConfigError, match=r"unknown config section 'rewards' \(did you mean 'reward'\?\)"):
        load_config(overrides={"rewards": {"win_bonus": 1.0}})
    with pytest.raises(ConfigError, match="unknown config section"):
        MissionEnv(enemies={"count": 3})


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"reward": {"win_bonu": 1.0}}, "reward overrides: win_bonu: unknown key"),
        ({"reward": {"time": "3e-4"}}, "reward overrides: time: Input should be a valid number (got '3e-4')"),
        ({"world": {"physics": {"dt": 0.0}}}, "world overrides: physics.dt: Input should be greater than 0"),
        ({"scenario": {"attackers": [{"type": "UGV_C", "x": 1, "y": 1}]}}, "scenario overrides: attackers.0.type"),
    ],
)
def test_bad_overrides_name_the_override_and_key(overrides, message):
    with pytest.raises(ConfigError) as info:
        load_config(overrides=overrides)
    assert message in str(info.value)


def test_configs_are_frozen():
    config = load_config()
    with pytest.raises(Exception):  # noqa: B017 - pydantic raises its ValidationError for frozen models
        config.reward.win_bonus = 1.0  # type: ignore[misc]
    assert math.isclose(config.reward.win_bonus, 200.0)


def test_get_and_with_setting_by_dotted_key():
    from mission_gym.config import get_setting, load_config, with_setting

    config = load_config()
    assert get_setting(config, "engagement.capture.time_to_capture") == 15.0
    easier = with_setting(config, "engagement.capture.time_to_capture", 5.0)
    assert easier.engagement.capture.time_to_capture == 5.0 and config.engagement.capture.time_to_capture == 15.0
    assert easier.model_dump()["reward"] == config.model_dump()["reward"]  # nothing else moved
    with pytest.raises(ConfigError, match="did you mean 'time_to_capture'"):
        get_setting(config, "engagement.capture.time_to_captur")
    with pytest.raises(ConfigError, match="is a value, not a section"):
        get_setting(config, "reward.win_bonus.x")
    with pytest.raises(ConfigError, match="greater than 0"):
        with_setting(config, "engagement.capture.time_to_capture", -1.0)
