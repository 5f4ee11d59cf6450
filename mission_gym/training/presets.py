"""Presets and the resolved training configuration.

A preset is a YAML file of :class:`TrainConfig` fields; the shipped ones live in ``mission_gym/presets/``
(``fast``, ``heavy``, ``beast``, ``cpu``, ``quick``, and ``auto``, which picks one of the others by hardware).
The configuration a run uses is the preset with the command line's explicit flags applied on top, validated
by the same model, and saved as the run's ``config.yaml``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from mission_gym.config.loader import deep_merge, suggest
from mission_gym.config.yaml_io import ConfigError, read_yaml, validate
from mission_gym.training.vec_env import MISSION_ENV_ID

AUTO_PRESET = "auto"
Activation = Literal["tanh", "relu", "elu", "leaky_relu", "gelu", "silu"]
Schedule = Literal["constant", "linear"]
VecEnvKind = Literal["auto", "native", "subproc", "dummy"]


def presets_dir() -> Path:
    """The directory of the presets shipped with the package."""
    return Path(__file__).resolve().parent.parent / "presets"


def preset_names(directory: str | Path | None = None) -> list[str]:
    """Names of the presets in ``directory`` (default: the shipped ones), selectors such as ``auto`` included."""
    folder = Path(directory) if directory is not None else presets_dir()
    return sorted(p.stem for p in folder.glob("*.yaml"))


def _steps_to_fractions(data: Any) -> Any:
    """Raw configuration data with every schedule position written as env steps turned into a fraction.

    ``phases[].start``, ``curriculum[].start`` / ``until`` and ``population.cuts[].at`` (and the phases and curricula
    of ``population.variants``) are fractions of ``timesteps``; a whole number above 1 is a count of env steps of that
    ``timesteps`` instead (``at: 2_000_000``), so a preset can name the exact step where a curriculum ends or a cut
    falls. The result is a fraction like any other: a later ``--timesteps`` scales it with the rest of the schedule.
    """
    if not isinstance(data, Mapping):
        return data
    timesteps = data.get("timesteps", TrainConfig.model_fields["timesteps"].default)
    if isinstance(timesteps, bool) or not isinstance(timesteps, int) or timesteps < 1:
        return data  # the field's own validation names the bad value

    def convert(items: Any, where: str, keys: tuple[str, ...]) -> Any:
        if not isinstance(items, list):
            return items
        out = []
        for i, item in enumerate(items):
            if isinstance(item, Mapping):
                item = dict(item)
                for key in keys:
                    value = item.get(key)
                    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 1:
                        continue
                    if value != int(value):
                        raise ValueError(
                            f"{where}[{i}].{key}: {value} is neither a fraction of timesteps (0-1) nor a whole "
                            f"number of env steps"
                        )
                    if value > timesteps or (value == timesteps and key != "until"):
                        raise ValueError(
                            f"{where}[{i}].{key}: step {int(value):,} is not inside the run's {timesteps:,} timesteps"
                        )
                    item[key] = value / timesteps
            out.append(item)
        return out

    def convert_schedules(section: Mapping[str, Any], where: str) -> dict[str, Any]:
        out = dict(section)
        for key, keys in (("phases", ("start",)), ("curriculum", ("start", "until"))):
            if key in out:
                out[key] = convert(out[key], f"{where}{key}", keys)
        return out

    data = convert_schedules(data, "")
    population = data.get("population")
    if isinstance(population, Mapping):
        population = dict(population)
        if "cuts" in population:
            population["cuts"] = convert(population["cuts"], "population.cuts", ("at",))
        if isinstance(population.get("variants"), list):  # a variant's positions are of the run's timesteps too
            population["variants"] = [
                convert_schedules(v, f"population.variants[{k}].") if isinstance(v, Mapping) else v
                for k, v in enumerate(population["variants"])
            ]
        data["population"] = population
    return data


class Phase(BaseModel):
    """A later part of a run (``phases:`` in a preset): from ``start`` (a fraction of ``timesteps``) on, the
    learning rate restarts from ``learning_rate`` and follows ``lr_schedule`` over the phase (``linear``: down
    to 0 at its end; the run's own ``lr_schedule`` is the first phase's), and ``ent_coef`` applies. An unset
    value keeps the previous phase's."""

    model_config = ConfigDict(extra="forbid")

    start: float = Field(gt=0, lt=1, description="fraction of the run's timesteps where the phase begins (or env steps)")
    learning_rate: float | None = Field(None, gt=0)
    lr_schedule: Schedule | None = None
    ent_coef: float | None = Field(None, ge=0)


class CurriculumStep(BaseModel):
    """Another game for part of the run (``curriculum:`` in a preset): from ``start`` (a fraction of
    ``timesteps``, default the first step) the training envs play ``setting`` (a dotted game setting such as
    ``engagement.capture.time_to_capture``) at ``value``, moving linearly to the game's own value by ``until`` and
    keeping it from there; before ``start`` they play the game's own value. An easier game while training starts
    (``start: 0``), or later practice of what the agent still loses (e.g. more guarding defenders in the last part
    of a run). A setting may have several steps whose spans do not overlap. Evaluation, in training and after,
    always plays the game's own value."""

    model_config = ConfigDict(extra="forbid")

    setting: str = Field(min_length=1, description="dotted game setting, e.g. engagement.capture.time_to_capture")
    value: float = Field(description="the setting's value at the step's start")
    until: float = Field(
        gt=0, le=1, description="fraction of the run's timesteps (or env steps) where the game's own value is back"
    )
    start: float = Field(0.0, ge=0, lt=1, description="fraction of the run's timesteps (or env steps) where the step begins")

    @model_validator(mode="after")
    def _check_span(self) -> CurriculumStep:
        if self.until <= self.start:
            raise ValueError(
                f"curriculum: {self.setting} must start before its until, got start {self.start} until {self.until}"
            )
        return self


VARIANT_FORBIDDEN = {"seed", "population", "timesteps", "env"}  # what every member of a population shares


class PopulationCut(BaseModel):
    """At ``at`` (a fraction of the run's timesteps) the best ``keep`` members carry on, and ``clones`` copies of
    the best one with seeds of their own (population-based training's exploit step): they start from its
    checkpoint at the cut and then see other games, so each is another draw of how the best member ends."""

    model_config = ConfigDict(extra="forbid")

    at: float = Field(gt=0, lt=1, description="fraction of the run's timesteps (or env steps) where the members are compared")
    keep: int = Field(ge=1, description="members that carry on")
    clones: int = Field(0, ge=0, description="copies of the best member that also carry on, each with a new seed")


class Population(BaseModel):
    """Several members of the configuration, one seed each, trained side by side as separate processes
    (``population:`` in a preset; :mod:`mission_gym.training.population`). At each cut the members are scored by
    a fresh evaluation of ``episodes`` games on the evaluation seeds and the best ``keep`` carry on; the best model
    at the end is the run's. ``size: 1`` (the default) is an ordinary run."""

    model_config = ConfigDict(extra="forbid")

    size: int = Field(1, ge=1, le=64, description="members started (the first keeps the run's seed)")
    cuts: list[PopulationCut] = Field(default_factory=list)
    episodes: int = Field(200, ge=1, description="evaluation episodes per member at each cut and at the end")
    final_episodes: int | None = Field(None, ge=1, description="evaluation episodes per model at the end (default: episodes)")
    final_checkpoints: bool = Field(
        False, description="at the end also score each survivor's kept checkpoints, not only its best and final models"
    )
    variants: list[dict[str, Any]] = Field(
        default_factory=list,
        description="member k trains with variants[k % len(variants)] applied over the run's configuration (settings "
        "as in --hyperparams, e.g. another curriculum): a population of recipes as well as of seeds",
    )

    @model_validator(mode="after")
    def _check_cuts(self) -> Population:
        ats = [c.at for c in self.cuts]
        if any(b <= a for a, b in zip(ats, ats[1:])):
            raise ValueError(f"population.cuts: 'at' must increase, got {ats}")
        alive = self.size
        for cut in self.cuts:
            if cut.keep >= alive:
                raise ValueError(
                    f"population.cuts: keep {cut.keep} at {cut.at} must be fewer than the {alive} members before it"
                )
            if cut.keep + cut.clones > alive:
                raise ValueError(
                    f"population.cuts: keep {cut.keep} + clones {cut.clones} at {cut.at} must be at most the {alive} "
                    "members before it (clones fill the places of members cut)"
                )
            alive = cut.keep + cut.clones
        if len(self.variants) > self.size:
            raise ValueError(f"population.variants: {len(self.variants)} variants for {self.size} members")
        for i, variant in enumerate(self.variants):
            owned = sorted(set(variant) & VARIANT_FORBIDDEN)
            if owned:
                raise ValueError(
                    f"population.variants[{i}]: {', '.join(owned)} belong to the whole population, not to a member"
                )
        return self


class TrainConfig(BaseModel):
    """Everything a training run needs; a preset file sets any subset of these fields.

    Sizes: ``n_envs × n_steps`` env steps per rollout, cut into minibatches of ``batch_size`` (``auto``: the
    largest divisor of the rollout that is ≤ ``target_batch``). Frequencies are in env steps; 0 switches off.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    preset: str = Field("custom", description="the preset this configuration started from")
    description: str = ""
    env: str = MISSION_ENV_ID
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    timesteps: int = Field(1_000_000, gt=0)
    n_envs: int = Field(8, ge=1)
    n_steps: int = Field(256, ge=1)
    batch_size: int | Literal["auto"] = "auto"
    target_batch: int = Field(2048, ge=1)
    min_batch: int = Field(64, ge=1, description="floor for the automatic batch size")
    n_epochs: int = Field(10, ge=1)
    network_arch: list[int] = Field(default_factory=lambda: [64, 64])
    policy: Literal["mlp", "trunk", "units"] = Field(
        "mlp",
        description="mlp: SB3's MlpPolicy; trunk: one network for the actor and the critic; "
        "units: one actor network shared by Mission Gym's attackers",
    )
    activation: Activation = "tanh"
    ortho_init: bool = True
    learning_rate: float = Field(3e-4, gt=0)
    lr_schedule: Schedule = "constant"
    gamma: float = Field(0.99, gt=0, le=1)
    gae_lambda: float = Field(0.95, ge=0, le=1)
    clip_range: float = Field(0.2, gt=0)
    clip_schedule: Schedule = "constant"
    clip_range_vf: float | None = Field(None, gt=0)
    ent_coef: float = Field(0.0, ge=0)
    vf_coef: float = Field(0.5, ge=0)
    max_grad_norm: float = Field(0.5, gt=0)
    target_kl: float | None = Field(None, gt=0)
    phases: list[Phase] = Field(default_factory=list, description="later parts of the run with their own lr/entropy")
    curriculum: list[CurriculumStep] = Field(default_factory=list, description="game settings that start easier")
    population: Population = Field(default_factory=Population, description="members trained side by side")
    normalize: bool = Field(False, description="VecNormalize observations")
    normalize_reward: bool = Field(False, description="VecNormalize rewards too (needs normalize)")
    bootstrap_truncated: bool = Field(
        True,
        description="bootstrap the value of an episode cut by truncation (SB3's default); false: every episode end "
        "is terminal to the learner, for games whose limits are part of the task and visible to the agent",
    )
    vec_env: VecEnvKind = "auto"
    device: str = "auto"
    num_threads: int | None = Field(None, ge=1)
    seed: int = Field(0, ge=0)
    eval_freq: int = Field(50_000, ge=0)
    eval_episodes: int = Field(20, ge=1)
    save_freq: int = Field(100_000, ge=0)
    keep_checkpoints: int = Field(5, ge=1)
    tensorboard: bool = True
    hyperparams: dict[str, Any] = Field(default_factory=dict, description="extra keyword arguments for SB3's PPO")

    @field_validator("network_arch", mode="before")
    @classmethod
    def _parse_arch(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return [int(w) for w in value.replace(" ", "").split(",") if w]
            except ValueError:
                raise ValueError(f"expected comma-separated layer widths like '512,512', got {value!r}") from None
        return value

    @field_validator("network_arch")
    @classmethod
    def _check_arch(cls, value: list[int]) -> list[int]:
        if not value or any(w < 1 for w in value):
            raise ValueError(f"expected one or more positive layer widths, got {value}")
        return value

    @field_validator("device")
    @classmethod
    def _check_device(cls, value: str) -> str:
        head, _, index = value.partition(":")
        if head not in ("auto", "cpu", "cuda", "mps") or (index and (head != "cuda" or not index.isdigit())):
            raise ValueError(f"device must be auto, cpu, cuda or cuda:<index>, got {value!r}")
        return value

    @model_validator(mode="before")
    @classmethod
    def _positions_in_steps(cls, data: Any) -> Any:
        return _steps_to_fractions(data)

    @model_validator(mode="after")
    def _check_combination(self) -> TrainConfig:
        if self.normalize_reward and not self.normalize:
            raise ValueError("normalize_reward needs normalize: true")
        starts = [p.start for p in self.phases]
        if any(b <= a for a, b in zip(starts, starts[1:])):
            raise ValueError(f"phases: starts must increase, got {starts}")
        spans: dict[str, list[tuple[float, float]]] = {}
        for c in self.curriculum:
            spans.setdefault(c.setting, []).append((c.start, c.until))
        for setting, spans_of in spans.items():
            spans_of.sort()
            if any(b[0] < a[1] for a, b in zip(spans_of, spans_of[1:])):
                raise ValueError(f"curriculum: the steps of {setting} overlap, got (start, until) {spans_of}")
        if self.curriculum and self.env != MISSION_ENV_ID:
            raise ValueError(f"curriculum changes Mission Gym's game settings; env {self.env!r} has none")
        return self

    @property
    def rollout(self) -> int:
        """Env steps per rollout (``n_envs × n_steps``)."""
        return self.n_envs * self.n_steps


class AutoPreset(BaseModel):
    """``auto.yaml``: the preset ``--preset auto`` runs without CUDA, and the candidates it weighs with the
    memory estimator when there is a GPU (see :func:`mission_gym.training.memory.choose_auto_preset`)."""

    model_config = ConfigDict(extra="forbid")
    selector: Literal[True] = True
    cpu: str = "cpu"
    gpu: list[str] = Field(min_length=1)


def _preset_path(name_or_path: str | Path, directory: str | Path | None = None) -> Path:
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
    data = read_yaml(path)
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: expected a mapping of preset keys, got {type(data).__name__}")
    return dict(data)


def is_selector(name_or_path: str | Path, directory: str | Path | None = None) -> bool:
    """Whether a preset picks another preset by hardware (``selector: true``, like ``auto``) instead of describing a run."""
    return _read_mapping(_preset_path(name_or_path, directory)).get("selector") is True


def read_preset_data(name_or_path: str | Path, directory: str | Path | None = None) -> tuple[dict[str, Any], str]:
    """The raw mapping of a preset and the file it came from (``auto`` is resolved to the preset it picks).

    :param name_or_path: a preset name or a YAML file path
    :param directory: where named presets live; None for the shipped ones
    """
    path = _preset_path(name_or_path, directory)
    data = _read_mapping(path)
    if data.get("selector") is True:
        from mission_gym.training import memory

        rules = validate(AutoPreset, data, str(path))
        hw = memory.detect_hardware()
        chosen = memory.choose_auto_preset(hw.gpu_mem_gb, hw.cores, hw.ram_gb, directory=path.parent, rules=rules)
        if chosen == path.stem:
            raise ConfigError(f"{path}: an auto preset cannot choose itself")
        data, path_str = read_preset_data(chosen, path.parent)
        return {**data, "preset": data.get("preset", chosen)}, path_str
    name = path.stem if path.parent == (Path(directory) if directory is not None else presets_dir()) else str(path)
    return {"preset": name, **data}, str(path)


def load_preset(name_or_path: str | Path, directory: str | Path | None = None) -> TrainConfig:
    """Read and validate a preset (a selector such as ``auto`` gives the preset it picks on this machine).

    :param name_or_path: a shipped preset name (``fast``, ``heavy``, ``beast``, ``cpu``, ``quick``, ``auto``) or a
        YAML file path
    :param directory: where named presets live; None for the shipped ones
    :raises ConfigError: naming the file and the key at fault
    """
    data, source = read_preset_data(name_or_path, directory)
    return validate(TrainConfig, data, source)


def apply_overrides(config: TrainConfig, overrides: Mapping[str, Any], source: str = "command line") -> TrainConfig:
    """A copy of ``config`` with ``overrides`` (field → value) applied and validated again.

    A preset's ``env_kwargs`` and ``curriculum`` belong to its env: with another ``env`` they are left out unless
    given; given ``env_kwargs`` merge into the preset's for the same env.

    :param source: what to name in errors
    """
    fields = list(TrainConfig.model_fields)
    for key in overrides:
        if key not in fields:
            raise ConfigError(f"{source}: unknown setting {key!r}{suggest(key, fields)}")
    merged = {**config.model_dump(), **dict(overrides)}
    if "env" in overrides and "curriculum" not in overrides and merged["env"] != MISSION_ENV_ID:
        merged["curriculum"] = []  # a preset's curriculum ramps Mission Gym's game, which another env does not have
    own_env_kwargs = config.env_kwargs if merged["env"] == config.env else {}
    merged["env_kwargs"] = deep_merge(own_env_kwargs, dict(overrides.get("env_kwargs") or {}))
    return validate(TrainConfig, merged, source)


# PPO constructor arguments the configuration sets itself (or that make no sense from a command line).
_MANAGED_PPO_ARGS = {
    "policy",
    "env",
    "tensorboard_log",
    "verbose",
    "device",
    "seed",
    "_init_setup_model",
    "rollout_buffer_class",
}


def ppo_extra_args() -> list[str]:
    """Keyword arguments of SB3's ``PPO`` that ``hyperparams`` may set (those without a configuration field)."""
    import inspect

    from stable_baselines3 import PPO

    params = inspect.signature(PPO.__init__).parameters
    return sorted(p for p in params if p not in _MANAGED_PPO_ARGS and p != "self" and p not in TrainConfig.model_fields)


def split_hyperparams(pairs: Mapping[str, Any], source: str = "--hyperparams") -> tuple[dict[str, Any], dict[str, Any]]:
    """Sort ``key=value`` hyperparameters into configuration fields and extra PPO arguments.

    :raises ConfigError: for a key that is neither, naming the closest valid one
    """
    fields, extra = {}, {}
    extra_valid = ppo_extra_args()
    field_names = [f for f in TrainConfig.model_fields if f not in ("hyperparams", "env_kwargs", "preset", "description")]
    for key, value in pairs.items():
        if key in field_names:
            fields[key] = value
        elif key in extra_valid:
            extra[key] = value
        else:
            valid = field_names + extra_valid
            raise ConfigError(f"{source}: unknown hyperparameter {key!r}{suggest(key, valid)}; valid: {', '.join(valid)}")
    return fields, extra
