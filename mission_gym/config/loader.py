"""Load the environment configuration: packaged defaults, then a user's config directory or
scenario file, then keyword overrides; one validation path for all of them."""

from __future__ import annotations

import copy
import difflib
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from mission_gym.config.models import (
    SECTIONS,
    Engagement,
    MissionConfig,
    Reward,
    Scenario,
    Sensors,
    Spawn,
    Units,
    UnitType,
    World,
)
from mission_gym.config.yaml_io import ConfigError, read_yaml, validate

_MODELS = {
    "world": World,
    "scenario": Scenario,
    "units": Units,
    "sensors": Sensors,
    "engagement": Engagement,
    "reward": Reward,
}


def defaults_dir() -> Path:
    """The directory of the packaged default YAML files."""
    return Path(str(resources.files("mission_gym.config") / "defaults"))


def deep_merge(base: Any, update: Any) -> Any:
    """Merge ``update`` into a copy of ``base``: mappings merge key by key, anything else replaces."""
    if isinstance(base, Mapping) and isinstance(update, Mapping):
        out = dict(copy.deepcopy(base))
        for key, value in update.items():
            out[key] = deep_merge(out[key], value) if key in out else copy.deepcopy(value)
        return out
    return copy.deepcopy(update)


def suggest(name: str, valid: list[str]) -> str:
    """``" (did you mean 'x'?)"`` for the closest valid name, or ``""``."""
    by_lower = {v.lower(): v for v in valid}  # case does not count against a name: 'uav_b' -> 'UAV_B'
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1)
    return f" (did you mean {by_lower[close[0]]!r}?)" if close else ""


def load_config(
    config_dir: str | Path | None = None,
    scenario: str | Path | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> MissionConfig:
    """Build a validated :class:`MissionConfig`.

    :param config_dir: a directory holding any of ``world.yaml``, ``scenario.yaml``, ``units.yaml``,
        ``sensors.yaml``, ``engagement.yaml``, ``reward.yaml``; each file present is merged over the default
    :param scenario: a scenario YAML file merged over the scenario section (lists such as ``attackers`` replace)
    :param overrides: ``{section: {key: value}}`` merged last, e.g. ``{"reward": {"win_bonus": 100.0}}``
    :raises ConfigError: naming the file (or override) and the key at fault
    """
    overrides = dict(overrides or {})
    unknown = [k for k in overrides if k not in SECTIONS]
    if unknown:
        raise ConfigError(
            f"unknown config section {unknown[0]!r}{suggest(unknown[0], list(SECTIONS))}; valid: {', '.join(SECTIONS)}"
        )
    if config_dir is not None and not Path(config_dir).is_dir():
        raise ConfigError(f"config_dir {str(config_dir)!r} is not a directory")

    sections: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for name in SECTIONS:
        data = read_yaml(defaults_dir() / f"{name}.yaml")
        source = f"{name}.yaml"
        layers: list[tuple[Any, str]] = []
        if config_dir is not None and (Path(config_dir) / f"{name}.yaml").is_file():
            path = Path(config_dir) / f"{name}.yaml"
            layers.append((read_yaml(path), str(path)))
        if name == "scenario" and scenario is not None:
            layers.append((read_yaml(scenario), str(scenario)))
        if name in overrides:
            layers.append((overrides[name], f"{name} overrides"))
        for layer, layer_source in layers:
            if layer is None:
                continue
            if not isinstance(layer, Mapping):
                raise ConfigError(f"{layer_source}: expected a mapping of keys to values, got {type(layer).__name__}")
            data = deep_merge(data, layer)
            source = layer_source
        sections[name] = validate(_MODELS[name], data, source)
        sources[name] = source

    config = MissionConfig(**sections)
    check_consistency(config, sources)
    return config


def check_consistency(config: MissionConfig, sources: Mapping[str, str] | None = None) -> None:
    """Cross-file checks: unit types and sensors exist, teams match their lists, spawns lie in the arena.

    :param sources: per section, the file (or override) to name in errors; ``<section>.yaml`` by default
    """
    sources = sources or {}
    units_src = sources.get("units", "units.yaml")
    scenario_src = sources.get("scenario", "scenario.yaml")
    types = config.units.types
    sensors = config.sensors.root
    for type_name, unit in types.items():
        for sensor in unit.sensors:
            if sensor not in sensors:
                raise ConfigError(
                    f"{units_src}: types.{type_name}.sensors: unknown sensor {sensor!r}{suggest(sensor, list(sensors))}"
                )
    w, h = config.world.arena.width, config.world.arena.height
    sc = config.scenario
    for team, spawns in (("attacker", sc.attackers), ("defender", sc.defenders)):
        for i, spawn in enumerate(spawns):
            _check_spawn(spawn, team, f"{scenario_src}: {team}s.{i}", types, w, h)
    if not (0 <= sc.objective.x <= w and 0 <= sc.objective.y <= h):
        raise ConfigError(f"{scenario_src}: objective: ({sc.objective.x}, {sc.objective.y}) is outside the {w}x{h} arena")


def _check_spawn(spawn: Spawn, team: str, key: str, types: Mapping[str, UnitType], w: float, h: float) -> None:
    """One spawn of the scenario: a unit type of its team, inside the ``w`` x ``h`` arena, at one of its altitude bands.

    :param key: where the spawn is, to name in errors
    """
    if spawn.type not in types:
        raise ConfigError(f"{key}.type: unknown unit type {spawn.type!r}{suggest(spawn.type, list(types))}")
    if types[spawn.type].team != team:
        raise ConfigError(f"{key}.type: {spawn.type!r} is a {types[spawn.type].team} type, not a {team}")
    if not (0 <= spawn.x <= w and 0 <= spawn.y <= h):
        raise ConfigError(f"{key}: position ({spawn.x}, {spawn.y}) is outside the {w}x{h} arena")
    bands = types[spawn.type].altitude_bands
    if spawn.altitude is not None and spawn.altitude >= bands:
        raise ConfigError(f"{key}.altitude: band {spawn.altitude} but {spawn.type} has bands 0..{bands - 1}")


def get_setting(config: MissionConfig, key: str) -> Any:
    """The value of a dotted setting such as ``engagement.capture.time_to_capture``.

    :raises ConfigError: naming the first part of ``key`` that does not exist
    """
    node: Any = config.model_dump()
    path: list[str] = []
    for part in key.split("."):
        valid = list(node) if isinstance(node, Mapping) else []
        if part not in valid:
            where = ".".join(path) or "the config"
            hint = f"; valid: {', '.join(map(str, valid))}" if valid else f" ({where} is a value, not a section)"
            raise ConfigError(f"unknown setting {key!r}: {where} has no {part!r}{suggest(part, valid)}{hint}")
        node = node[part]
        path.append(part)
    return node


def with_setting(config: MissionConfig, key: str, value: Any) -> MissionConfig:
    """A copy of ``config`` with the dotted setting ``key`` set to ``value``, validated like any override.

    :raises ConfigError: for an unknown key or a value its section rejects
    """
    return with_settings(config, {key: value})


def with_settings(config: MissionConfig, values: Mapping[str, Any]) -> MissionConfig:
    """A copy of ``config`` with each dotted setting in ``values`` set, validated once all are set: settings that
    are only valid together (the defenders' ``mode_probs``, which sum to 1) can move together.

    :raises ConfigError: for an unknown key or a combination of values a section rejects
    """
    data = config.model_dump()
    for key, value in values.items():
        get_setting(config, key)
        section, *rest = key.split(".")
        node = data[section]
        for part in rest[:-1]:
            node = node[part]
        if rest:
            node[rest[-1]] = value
        else:
            data[section] = value
    where = ", ".join(values)
    sections = {name: validate(_MODELS[name], data[name], f"{name} setting {where}") for name in SECTIONS}
    updated = MissionConfig(**sections)
    check_consistency(updated)
    return updated
