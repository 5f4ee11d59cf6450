"""Changing a configuration: settings by name or dotted path (``learning_rate``, ``population.size``,
``curriculum[0].value``), from flags, ``--hyperparams`` or a search's trial.

``--timesteps`` keeps every schedule position at its env step, so a shorter run is the exact first part of the longer
one: what would start at or after the new end is dropped (:func:`mission_gym.plan.notes.schedule_changes` says
what), a curriculum ramp that ends after it is cut off there, and the last phase's learning rate runs to the new end.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from typing import Any

from mission_gym import ENV_ID
from mission_gym.config.loader import deep_merge, suggest
from mission_gym.config.yaml_io import ConfigError, validate
from mission_gym.settings.ppo_args import ppo_extra_args
from mission_gym.settings.schema import TrainConfig

_PATH_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def parse_path(key: str) -> list[str | int]:
    """``"curriculum[0].value"`` → ``["curriculum", 0, "value"]``; ``"population.size"`` → ``["population", "size"]``.

    :raises ConfigError: for a key that is not a dotted path with optional ``[index]`` parts
    """
    parts: list[str | int] = []
    pos = 0
    for match in _PATH_PART.finditer(key):
        if match.start() != pos and key[pos : match.start()] != ".":
            break
        parts.append(match.group(1) if match.group(1) is not None else int(match.group(2)))
        pos = match.end()
    if not parts or pos != len(key) or not isinstance(parts[0], str):
        raise ConfigError(
            f"setting {key!r}: expected a dotted name such as learning_rate, population.size or curriculum[0].value"
        )
    return parts


def set_path(data: dict[str, Any], path: Sequence[str | int], value: Any, source: str) -> None:
    """Set ``value`` at ``path`` inside plain configuration data (mappings are created as needed; a list index
    must exist)."""
    node: Any = data
    for depth, part in enumerate(path[:-1]):
        nxt = path[depth + 1]
        where = path_text(path[: depth + 1])
        if isinstance(part, int):
            if not isinstance(node, list) or not -len(node) <= part < len(node):
                size = len(node) if isinstance(node, list) else 0
                raise ConfigError(f"{source}: {where} does not exist (the list has {size} items)")
            node = node[part]
            continue
        if not isinstance(node, dict):
            raise ConfigError(f"{source}: {where} sets a key inside a value that is not a mapping")
        if node.get(part) is None:
            node[part] = [] if isinstance(nxt, int) else {}
        node = node[part]
    last = path[-1]
    if isinstance(last, int):
        if not isinstance(node, list) or not -len(node) <= last < len(node):
            raise ConfigError(f"{source}: {path_text(path)} does not exist")
        node[last] = value
    elif isinstance(node, dict):
        node[last] = value
    else:
        raise ConfigError(f"{source}: {path_text(path)} sets a key inside a value that is not a mapping")


def path_text(path: Sequence[str | int]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else p) for i, p in enumerate(path))


def env_change_problem(data: Mapping[str, Any], previous_env: str, given: Sequence[str] = ()) -> str | None:
    """Why a configuration made for ``previous_env`` cannot train ``data['env']`` as it stands (one line), or None:
    its env arguments (the run's or a variant's) are the old env's, unless ``given`` gives them anew. Mission Gym's own
    settings on another task are refused by the configuration's check (:meth:`TrainConfig.game_settings`)."""
    env = data.get("env", ENV_ID)
    if env == previous_env:
        return None
    held = [] if "env_kwargs" in given or not data.get("env_kwargs") else ["env_kwargs"]
    for i, variant in enumerate((data.get("population") or {}).get("variants") or []):
        if isinstance(variant, Mapping) and variant.get("env_kwargs"):
            held.append(f"population.variants[{i}].env_kwargs")
    if not held:
        return None
    return (
        f"{', '.join(held)} {'is' if len(held) == 1 else 'are'} for {previous_env}, not for env {env!r}: give this "
        "task's own with --env-kwargs, or use a preset made for it"
    )


def apply_overrides(config: TrainConfig, overrides: Mapping[str, Any], source: str = "command line") -> TrainConfig:
    """A copy of ``config`` with ``overrides`` applied and validated again.

    Keys are field names or dotted paths (``population.final_episodes``, ``curriculum[0].value``): a plain key sets
    the field's whole value, a dotted one changes one entry inside it. ``env_kwargs`` merge into the preset's for the
    same env; with another ``env`` the preset's Mission Gym settings (curriculum, env arguments, variants' too) are
    left out unless given. A new ``timesteps`` keeps every schedule position at its step and drops what would start
    at or after the new end (:func:`~mission_gym.plan.notes.schedule_changes` lists it).

    :param source: what to name in errors
    """
    fields = list(TrainConfig.model_fields)
    data = copy.deepcopy(config.model_dump())
    for key, value in overrides.items():
        path = parse_path(key)
        if path[0] not in fields:
            raise ConfigError(f"{source}: unknown setting {path[0]!r}{suggest(str(path[0]), fields)}")
        if key == "env_kwargs":
            continue
        set_path(data, path, copy.deepcopy(value), source)
    given = [str(parse_path(k)[0]) for k in overrides]
    problem = env_change_problem(data, config.env, given)
    if problem:
        raise ConfigError(f"{source}: {problem}")
    own_env_kwargs = config.env_kwargs if data["env"] == config.env else {}
    data["env_kwargs"] = deep_merge(own_env_kwargs, dict(overrides.get("env_kwargs") or {}))
    if data["timesteps"] != config.timesteps:
        _fit_schedule(data)
    return validate(TrainConfig, data, source)


def _fit_schedule(data: dict[str, Any]) -> None:
    """Drop, in place, every phase, curriculum step and cut that would start at or after ``timesteps``."""
    end = data["timesteps"]

    def fit(section: dict[str, Any]) -> None:
        if section.get("phases"):
            section["phases"] = [p for p in section["phases"] if p["start"] < end]
        if section.get("curriculum"):
            section["curriculum"] = [c for c in section["curriculum"] if c.get("start", 0) < end]

    fit(data)
    population = data.get("population") or {}
    if population.get("cuts"):
        population["cuts"] = [c for c in population["cuts"] if c["at"] < end]
    for variant in population.get("variants") or []:
        if isinstance(variant, dict):
            fit(variant)


def apply_command_line(
    preset: TrainConfig, flags: Mapping[str, Any], hyperparams: Mapping[str, Any], env_kwargs: Mapping[str, Any]
) -> tuple[TrainConfig, dict[str, Any]]:
    """A preset with a command line's changes: its flags (configuration fields), then ``--hyperparams`` (settings by
    name or path, and extra PPO arguments merged into the preset's), then ``--env-kwargs`` (merged into the preset's
    by :func:`apply_overrides`); and what was given, as :func:`~mission_gym.plan.notes.shadowed_overrides` reads it.

    :raises ConfigError: for anything invalid, naming the flag or key
    """
    overrides = dict(flags)
    fields, extra = split_hyperparams(hyperparams)
    overrides.update(fields)
    if extra:
        overrides["hyperparams"] = {**preset.hyperparams, **extra}
    if env_kwargs:
        overrides["env_kwargs"] = dict(env_kwargs)
    config = apply_overrides(preset, overrides)
    given = {**overrides, "hyperparams": extra} if extra else dict(overrides)
    return config, given


def split_hyperparams(pairs: Mapping[str, Any], source: str = "--hyperparams") -> tuple[dict[str, Any], dict[str, Any]]:
    """Sort ``key=value`` hyperparameters into configuration settings (field names or dotted paths into them) and
    extra PPO arguments.

    :raises ConfigError: for a key that is neither, naming the closest valid one
    """
    fields, extra = {}, {}
    extra_valid = ppo_extra_args()
    field_names = [f for f in TrainConfig.model_fields if f not in ("hyperparams", "env_kwargs", "preset", "description")]
    for key, value in pairs.items():
        head = str(parse_path(key)[0])
        if head in field_names:
            fields[key] = value
        elif key in extra_valid:
            extra[key] = value
        else:
            valid = field_names + extra_valid
            raise ConfigError(f"{source}: unknown hyperparameter {key!r}{suggest(head, valid)}; valid: {', '.join(valid)}")
    return fields, extra
