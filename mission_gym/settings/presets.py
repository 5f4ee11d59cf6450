"""Preset files: YAML files of :class:`~mission_gym.settings.schema.TrainConfig` fields, read by the one
:func:`load_preset`.

The shipped presets live in ``mission_gym/presets/`` (``fast``, ``heavy``, ``beast``, ``cpu``, ``quick``, ``mujoco``,
``hopper``, ``walker2d``, ``halfcheetah``); a user file works the same way. A preset may start from another
(``base: cpu``): its own keys are merged over the base's (mappings key by key, anything else, lists included,
replaced), so one recipe serves several scales.
``auto`` is a *selector* (``selector: true``): it names the presets it picks from by hardware, and
:func:`load_preset` gives the one it picks on this machine (:func:`choose_preset`, by the rule of
:mod:`mission_gym.settings.fit`).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from mission_gym.config.loader import deep_merge, suggest
from mission_gym.config.yaml_io import ConfigError, read_yaml, validate
from mission_gym.hardware import detect_hardware
from mission_gym.settings.fit import Verdict, pick, weigh
from mission_gym.settings.schema import TrainConfig

AUTO_PRESET = "auto"


def presets_dir() -> Path:
    """The directory of the presets shipped with the package."""
    return Path(__file__).resolve().parent.parent / "presets"


def preset_names(directory: str | Path | None = None) -> list[str]:
    """Names of the presets in ``directory`` (default: the shipped ones), selectors such as ``auto`` included."""
    folder = Path(directory) if directory is not None else presets_dir()
    return sorted(p.stem for p in folder.glob("*.yaml"))


class AutoPreset(BaseModel):
    """A selector preset such as ``auto.yaml``: the preset it runs without CUDA, and the candidates it weighs with
    the memory estimator when there is a GPU (see :func:`choose_preset`)."""

    model_config = ConfigDict(extra="forbid")
    selector: Literal[True] = True
    cpu: str = "cpu"
    gpu: list[str] = Field(min_length=1)


def preset_path(name_or_path: str | Path, directory: str | Path | None = None) -> Path:
    """The file of a preset name (in ``directory``, default the shipped ones) or a user path; unknown names
    suggest the closest one."""
    text = str(name_or_path)
    folder = Path(directory) if directory is not None else presets_dir()
    names = preset_names(folder)
    if text not in names and (text.endswith((".yaml", ".yml")) or "/" in text or Path(text).is_file()):
        path = Path(text)
        if not path.is_file():
            raise ConfigError(f"preset file {text!r} does not exist")
        return path
    if text not in names:
        raise ConfigError(f"unknown preset {text!r}{suggest(text, names)}; valid: {', '.join(names)} or a YAML file path")
    return folder / f"{text}.yaml"


def _read_mapping(path: Path) -> dict[str, Any]:
    stat = path.stat()
    return copy.deepcopy(_parsed(str(path.resolve()), stat.st_mtime_ns, stat.st_size))


@functools.lru_cache(maxsize=64)
def _parsed(path: str, mtime_ns: int, size: int) -> dict[str, Any]:
    """A preset file's mapping, read once per version of the file (a command weighs ``auto.yaml`` and its
    candidates more than once)."""
    data = read_yaml(path)
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: expected a mapping of preset keys, got {type(data).__name__}")
    return dict(data)


def is_selector(name_or_path: str | Path, directory: str | Path | None = None) -> bool:
    """Whether a preset picks another preset by hardware (``selector: true``, like ``auto``) instead of describing a run."""
    return _read_mapping(preset_path(name_or_path, directory)).get("selector") is True


def read_selector(name_or_path: str | Path, directory: str | Path | None = None) -> tuple[AutoPreset, Path] | None:
    """The rules of a selector preset and its file, or None when the preset describes a run."""
    path = preset_path(name_or_path, directory)
    data = _read_mapping(path)
    if data.get("selector") is not True:
        return None
    return validate(AutoPreset, data, str(path)), path


def read_preset_data(name_or_path: str | Path, directory: str | Path | None = None) -> tuple[dict[str, Any], str]:
    """The raw mapping of a run preset (with its ``preset`` name) and the file it came from.

    :param name_or_path: a preset name or a YAML file path
    :param directory: where named presets live; None for the shipped ones
    :raises ConfigError: for a selector (:func:`load_preset` resolves it)
    """
    path = preset_path(name_or_path, directory)
    data = _with_base(path, directory, seen=[])
    if data.get("selector") is True:
        raise ConfigError(f"preset {path.stem!r} picks another preset by hardware; a selector cannot pick a selector")
    name = path.stem if path.parent == (Path(directory) if directory is not None else presets_dir()) else str(path)
    return {"preset": name, **data}, str(path)


def _with_base(path: Path, directory: str | Path | None, seen: list[Path]) -> dict[str, Any]:
    """A preset file's mapping merged over its ``base`` (a preset name in the same directory, or a path)."""
    data = _read_mapping(path)
    base = data.pop("base", None)
    if base is None:
        return data
    if not isinstance(base, str):
        raise ConfigError(f"{path}: base: expected a preset name or file, got {base!r}")
    if path.resolve() in seen:
        raise ConfigError(f"{path}: base: presets that start from each other ({' -> '.join(p.name for p in seen)})")
    beside = path.parent / f"{base}.yaml"  # a preset beside this one, else a shipped one (or a path)
    base_path = beside if beside.is_file() else preset_path(base, directory)
    return deep_merge(_with_base(base_path, directory, [*seen, path.resolve()]), data)


def _load_run_preset(name_or_path: str | Path, directory: str | Path | None = None) -> TrainConfig:
    data, source = read_preset_data(name_or_path, directory)
    return validate(TrainConfig, data, source)


def choose_preset(
    gpu_mem_gb: float | None,
    cores: int,
    ram_gb: float,
    directory: str | Path | None = None,
    rules: AutoPreset | None = None,
) -> str:
    """The preset a selector runs on a machine (the rule: :mod:`mission_gym.settings.fit`).

    :param gpu_mem_gb: total memory of the GPU in GiB, None without a CUDA GPU
    :param cores: CPU cores available to the run
    :param ram_gb: host RAM in GiB available to the run
    :param directory: a directory of presets with an ``auto.yaml``; None for the package's own
    :param rules: the parsed selector; None reads ``directory``'s ``auto.yaml``
    """
    rules = _auto_rules(directory) if rules is None else rules
    return pick(weigh_candidates(gpu_mem_gb, cores, ram_gb, directory, rules), rules.cpu)


def weigh_candidates(
    gpu_mem_gb: float | None,
    cores: int,
    ram_gb: float,
    directory: str | Path | None = None,
    rules: AutoPreset | None = None,
) -> list[Verdict]:
    """The selector's GPU candidates weighed against a machine, in the order the rule tries them (none without a GPU).

    :param directory: a directory of presets with an ``auto.yaml``; None for the package's own
    :param rules: the parsed selector; None reads ``directory``'s ``auto.yaml``
    """
    rules = _auto_rules(directory) if rules is None else rules
    if not gpu_mem_gb:
        return []
    return weigh({name: _load_run_preset(name, directory) for name in rules.gpu}, gpu_mem_gb, cores, ram_gb)


def _auto_rules(directory: str | Path | None) -> AutoPreset:
    found = read_selector(AUTO_PRESET, directory)
    if found is None:
        raise ConfigError(f"preset {AUTO_PRESET!r} in {directory or presets_dir()} is not a selector")
    return found[0]


def load_preset(name_or_path: str | Path, directory: str | Path | None = None) -> TrainConfig:
    """Read and validate a preset; a selector such as ``auto`` gives the preset it picks on this machine.

    :param name_or_path: a shipped preset name (``fast``, ``heavy``, ``beast``, ``cpu``, ``quick``, ``mujoco``,
        ``hopper``, ``walker2d``, ``halfcheetah``, ``auto``) or a YAML file path
    :param directory: where named presets live; None for the shipped ones
    :raises ConfigError: naming the file and the key at fault
    """
    found = read_selector(name_or_path, directory)
    if found is not None:
        rules, path = found
        hw = detect_hardware()
        chosen = choose_preset(hw.gpu_mem_gb, hw.cores, hw.ram_gb, directory=path.parent, rules=rules)
        if chosen == path.stem:
            raise ConfigError(f"{path}: a selector cannot choose itself")
        name_or_path, directory = chosen, path.parent
    return _load_run_preset(name_or_path, directory)


def load_presets(directory: str | Path | None = None) -> dict[str, TrainConfig]:
    """Every run preset by name (selectors left out), from ``directory`` or the shipped presets.

    :raises FileNotFoundError: when the directory has none
    """
    names = [n for n in preset_names(directory) if not is_selector(n, directory)]
    if not names:
        raise FileNotFoundError(f"no presets (*.yaml) in {Path(directory) if directory is not None else presets_dir()}")
    return {name: _load_run_preset(name, directory) for name in names}
