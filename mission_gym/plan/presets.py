"""Preset files, read by the one :func:`compose_preset` (:func:`load_preset` gives its configuration).

The shipped presets live in ``mission_gym/presets/``; a user file works the same way. There are three kinds:

- a **recipe**: :class:`~mission_gym.settings.schema.TrainConfig` fields, with ``for:`` saying which tasks it is
  the recipe of (:mod:`mission_gym.plan.recipes`): ``mission`` (the game's), a task's own (``hopper``, ``walker2d``,
  ``halfcheetah``, ``ant``, ``humanoid``, ``cartpole``, ``acrobot``, ``pendulum``), and the defaults by kind
  ``discrete``, ``mujoco`` (continuous actions), ``pixels``, ``atari``.
  Named as ``--preset``, a recipe (or any file of fields, such as ``quick``) trains at the size it is written for;
- a **tier** (``tier: true``: ``cpu``, ``fast``, ``heavy``, ``beast``): how big a recipe runs
  (:mod:`mission_gym.plan.tiers`); named as ``--preset``, it sizes the task's recipe (or ``--recipe``'s);
- a **selector** (``selector: true``: ``auto``): picks a tier by the hardware (:func:`choose_preset`, by the rule
  of :mod:`mission_gym.plan.fit`, weighing the tiers' configurations of the task at hand).

A preset may start from another (``base: mujoco``): its own keys are merged over the base's (mappings key by key,
anything else, lists included, replaced); a tier as its base (``base: cpu``) is that tier's configuration of the
file's ``env`` (default Mission Gym).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from mission_gym import ENV_ID
from mission_gym.config.loader import deep_merge, suggest
from mission_gym.config.yaml_io import ConfigError, read_yaml, validate
from mission_gym.hardware import Hardware, detect_hardware
from mission_gym.plan.fit import Verdict, pick, weigh
from mission_gym.plan.recipes import FOR_KEY, Choice, choose, recipe_uses
from mission_gym.plan.tiers import Composed, Tier, compose, fit_to_memory
from mission_gym.settings.schema import TrainConfig

AUTO_PRESET = "auto"
#: what a tier sizes when no ``--env`` names a task
DEFAULT_ENV = ENV_ID


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


def read_tier(name_or_path: str | Path, directory: str | Path | None = None) -> Tier | None:
    """The tier a preset is (``tier: true``), or None when it is a recipe or a selector."""
    path = preset_path(name_or_path, directory)
    data = _read_mapping(path)
    return validate(Tier, data, str(path)) if data.get("tier") is True else None


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
    if data.get("tier") is True:
        raise ConfigError(f"preset {path.stem!r} is a tier: it sizes a recipe, it is not one (a tier cannot be a recipe)")
    name = path.stem if path.parent == (Path(directory) if directory is not None else presets_dir()) else str(path)
    return {"preset": name, **data}, str(path)


def _with_base(path: Path, directory: str | Path | None, seen: list[Path]) -> dict[str, Any]:
    """A preset file's mapping merged over its ``base`` (a preset name in the same directory, or a path)."""
    data = _read_mapping(path)
    data.pop(FOR_KEY, None)  # what a recipe is for is not a setting of the run
    base = data.pop("base", None)
    if base is None:
        return data
    if not isinstance(base, str):
        raise ConfigError(f"{path}: base: expected a preset name or file, got {base!r}")
    if path.resolve() in seen:
        raise ConfigError(f"{path}: base: presets that start from each other ({' -> '.join(p.name for p in seen)})")
    beside = path.parent / f"{base}.yaml"  # a preset beside this one, else a shipped one (or a path)
    base_path = beside if beside.is_file() else preset_path(base, directory)
    if _read_mapping(base_path).get("tier") is True:  # a tier's configuration of this file's task (default the game)
        env = data.get("env")
        sized = compose_preset(base_path, base_path.parent, env=str(env) if env else None).config.model_dump()
        return deep_merge(sized, data)
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
    env: str | None = None,
) -> str:
    """The tier a selector picks on a machine for a task (the rule: :mod:`mission_gym.plan.fit`).

    :param gpu_mem_gb: total memory of the GPU in GiB, None without a CUDA GPU
    :param cores: CPU cores available to the run
    :param ram_gb: host RAM in GiB available to the run
    :param directory: a directory of presets with an ``auto.yaml``; None for the package's own
    :param rules: the parsed selector; None reads ``directory``'s ``auto.yaml``
    :param env: the task (default Mission Gym)
    """
    rules = _auto_rules(directory) if rules is None else rules
    return pick(weigh_candidates(gpu_mem_gb, cores, ram_gb, directory, rules, env), rules.cpu)


def weigh_candidates(
    gpu_mem_gb: float | None,
    cores: int,
    ram_gb: float,
    directory: str | Path | None = None,
    rules: AutoPreset | None = None,
    env: str | None = None,
) -> list[Verdict]:
    """The selector's GPU candidates, each sized for the task, weighed against a machine in the order the rule tries
    them (none without a GPU).

    :param directory: a directory of presets with an ``auto.yaml``; None for the package's own
    :param rules: the parsed selector; None reads ``directory``'s ``auto.yaml``
    :param env: the task (default Mission Gym)
    """
    rules = _auto_rules(directory) if rules is None else rules
    if not gpu_mem_gb:
        return []
    hw = Hardware(gpu_mem_gb, None, cores, ram_gb)
    candidates, min_cores = {}, {}
    for name in rules.gpu:
        composed = compose_preset(name, directory, env=env, hardware=hw)
        candidates[name] = composed.config
        tier = read_tier(name, directory)
        if tier is not None and not composed.config.population.cuts:  # a single-run recipe's seeds
            min_cores[name] = tier.min_cores
    return weigh(candidates, gpu_mem_gb, cores, ram_gb, min_cores)


def _auto_rules(directory: str | Path | None) -> AutoPreset:
    found = read_selector(AUTO_PRESET, directory)
    if found is None:
        raise ConfigError(f"preset {AUTO_PRESET!r} in {directory or presets_dir()} is not a selector")
    return found[0]


def recipe_for(env: str, directory: str | Path | None = None, env_kwargs: Mapping[str, Any] | None = None) -> Choice:
    """The recipe a tier sizes for ``env`` (:func:`mission_gym.plan.recipes.choose` among the presets of
    ``directory``, else the shipped ones): its name and why. The task is probed only when no recipe names it.

    :raises ConfigError: when no recipe serves the task's kind of spaces
    """
    folder = Path(directory) if directory is not None else presets_dir()
    uses, descriptions = recipe_uses(folder, _read_mapping)
    if directory is not None and Path(directory).resolve() != presets_dir().resolve():
        shipped, shipped_descriptions = recipe_uses(presets_dir(), _read_mapping)
        uses, descriptions = {**shipped, **uses}, {**shipped_descriptions, **descriptions}

    def kinds() -> tuple[str, str]:
        from mission_gym.vec.probe import task_profile

        profile = task_profile(env, env_kwargs)
        return profile.action_kind, profile.recipe_obs_kind

    return choose(env, uses, kinds, descriptions)


def compose_preset(
    name_or_path: str | Path,
    directory: str | Path | None = None,
    env: str | None = None,
    recipe: str | Path | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    hardware: Hardware | None = None,
) -> Composed:
    """A preset's configuration for a task on this machine, and what was chosen (lines for the user):

    - a tier: the task's recipe (``recipe``, else :func:`recipe_for`) sized by it (:func:`~mission_gym.plan.tiers.
      compose`);
    - a selector (``auto``): the tier it picks here, and on a machine whose memory the tier's size does not fit, the
      envs halved until it does (:func:`~mission_gym.plan.tiers.fit_to_memory`);
    - a recipe or another file of settings: as written (``env``, if given, is applied by the command line's overrides).

    :param name_or_path: a shipped preset name or a YAML file path
    :param directory: where named presets live; None for the shipped ones
    :param env: the task (a tier's default: Mission Gym; a recipe's default: its own ``env``)
    :param recipe: the recipe a tier sizes, instead of the task's own
    :param env_kwargs: the task's arguments (for probing it)
    :param hardware: the machine (default: this one)
    :raises ConfigError: naming the file and the key at fault
    """
    found = read_selector(name_or_path, directory)
    auto = found is not None
    hw = hardware or detect_hardware()
    if found is not None:
        rules, path = found
        chosen = choose_preset(hw.gpu_mem_gb, hw.cores, hw.ram_gb, path.parent, rules, env or _recipe_env(recipe, directory))
        if chosen == path.stem:
            raise ConfigError(f"{path}: a selector cannot choose itself")
        name_or_path, directory = chosen, path.parent
    tier = read_tier(name_or_path, directory)
    if tier is None:
        if recipe is not None:
            raise ConfigError(
                f"--recipe {recipe} goes with a tier (cpu, fast, heavy, beast or auto), not --preset {name_or_path}"
            )
        return Composed(_load_run_preset(name_or_path, directory))
    env = env or _recipe_env(recipe, directory) or DEFAULT_ENV
    choice = (
        Choice(str(recipe), f"recipe {recipe} (--recipe)") if recipe is not None else recipe_for(env, directory, env_kwargs)
    )
    # a recipe the index found among the shipped ones when ``directory`` (a user's) has none of that name
    shipped = directory is not None and choice.name not in preset_names(directory) and choice.name in preset_names()
    config = _load_run_preset(choice.name, None if shipped else directory)
    if config.env != env:
        data = config.model_dump()
        if data.get("env_kwargs"):
            raise ConfigError(f"recipe {choice.name}: its env_kwargs are for {config.env}, not for {env}")
        config = validate(TrainConfig, {**data, "env": env}, f"recipe {choice.name} for {env}")
    kwargs = dict(env_kwargs or config.env_kwargs)

    def profile(cores: int) -> Any:
        from mission_gym.vec.probe import task_profile

        return task_profile(env, kwargs, config.env_wrapper, cores)

    composed = compose(config, Path(choice.name).stem, tier, Path(str(name_or_path)).stem, hw, profile, choice.why)
    if auto:
        from mission_gym.settings.sizing import population_estimate

        device = "cuda" if hw.gpu_mem_gb else "cpu"
        composed = fit_to_memory(composed, _host_gb(), lambda c: population_estimate(c, device, hw.cores))
    return composed


def _recipe_env(recipe: str | Path | None, directory: str | Path | None) -> str | None:
    """The env a ``--recipe`` is written for (None without one)."""
    if recipe is None:
        return None
    data, _ = read_preset_data(recipe, directory)
    env = data.get("env")
    return str(env) if env else None


def _host_gb() -> float:
    """Host RAM available to a run now, in GiB (what the memory check will compare with)."""
    import psutil

    from mission_gym.hardware import GB

    return float(psutil.virtual_memory().available + psutil.Process().memory_info().rss) / GB


def load_preset(
    name_or_path: str | Path,
    directory: str | Path | None = None,
    env: str | None = None,
    recipe: str | Path | None = None,
) -> TrainConfig:
    """Read and validate a preset: :func:`compose_preset`'s configuration (a tier or ``auto`` sizes the task's
    recipe; a recipe or another file of settings is as written).

    :param name_or_path: a shipped preset name (``auto``, ``cpu``, ``fast``, ``heavy``, ``beast``, ``quick``,
        ``mission``, a task's recipe such as ``hopper`` or ``ant``, ``mujoco``, ``discrete``, ``pixels``, ``atari``) or
        a YAML file path
    :param directory: where named presets live; None for the shipped ones
    :param env: the task a tier sizes (default Mission Gym)
    :param recipe: the recipe a tier sizes instead of the task's own
    :raises ConfigError: naming the file and the key at fault
    """
    return compose_preset(name_or_path, directory, env=env, recipe=recipe).config


def load_presets(directory: str | Path | None = None, env: str | None = None) -> dict[str, TrainConfig]:
    """Every preset's configuration by name (selectors left out; a tier's for ``env``, default Mission Gym), from
    ``directory`` or the shipped presets.

    :raises FileNotFoundError: when the directory has none
    """
    names = [n for n in preset_names(directory) if not is_selector(n, directory)]
    if not names:
        raise FileNotFoundError(f"no presets (*.yaml) in {Path(directory) if directory is not None else presets_dir()}")
    return {name: load_preset(name, directory, env=env) for name in names}
