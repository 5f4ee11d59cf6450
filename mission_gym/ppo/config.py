"""The resolved configuration of a training run (:class:`TrainConfig`) and how flags and variants change it.

Every schedule position (``phases[].start``, ``curriculum[].start`` / ``until``, ``population.cuts[].at``) is a
count of env steps. ``--timesteps`` keeps each at its step, so a shorter run is the exact first part of the longer
one: what would start at or after the new end is dropped (:func:`schedule_changes` says what), a curriculum ramp that
ends after it is cut off there, and the last phase's learning rate runs to the new end.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_serializer, model_validator

from mission_gym import ENV_ID
from mission_gym.config.loader import deep_merge, suggest
from mission_gym.config.yaml_io import ConfigError, validate

#: activation name in a preset -> ``torch.nn`` class name (the one table of them)
ACTIVATIONS: dict[str, str] = {
    "tanh": "Tanh",
    "relu": "ReLU",
    "elu": "ELU",
    "leaky_relu": "LeakyReLU",
    "gelu": "GELU",
    "silu": "SiLU",
}
Schedule = Literal["constant", "linear"]
VecEnvKind = Literal["auto", "native", "subproc", "dummy"]
#: what every member of a population shares; a variant cannot set it
VARIANT_FORBIDDEN = ("seed", "population", "timesteps", "env", "preset", "description")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Phase(_Strict):
    """A later part of a run (``phases:`` in a preset): from env step ``start`` on, the learning rate restarts from
    ``learning_rate`` and follows ``lr_schedule`` over the phase (``linear``: down to 0 at its end), and ``ent_coef``
    applies. An unset value keeps the previous phase's."""

    start: int = Field(gt=0, description="env step where the phase begins")
    learning_rate: float | None = Field(None, gt=0)
    lr_schedule: Schedule | None = None
    ent_coef: float | None = Field(None, ge=0)


class CurriculumStep(_Strict):
    """Another game for part of the run (``curriculum:`` in a preset; :mod:`mission_gym.extras.curriculum`): from
    env step ``start`` the training envs play ``setting`` at ``value``, moving linearly to the game's own value by
    ``until``. Evaluation always plays the game's own value."""

    setting: str = Field(min_length=1, description="dotted game setting, e.g. engagement.capture.time_to_capture")
    value: float = Field(description="the setting's value at the step's start")
    until: int = Field(gt=0, description="env step where the game's own value is back")
    start: int = Field(0, ge=0, description="env step where the step begins")

    @model_validator(mode="after")
    def _check_span(self) -> CurriculumStep:
        if self.until <= self.start:
            raise ValueError(
                f"curriculum: {self.setting} must start before its until, got start {self.start:,} until {self.until:,}"
            )
        return self


class PopulationCut(_Strict):
    """At env step ``at`` the best ``keep`` members carry on, and ``clones`` copies of the best one with seeds of
    their own (population-based training's exploit step). With ``redraw_below``, a cut whose best member wins less
    than that first draws ``redraws`` new members (the next seeds and recipes), trains them to ``at`` and compares
    them too: once per cut, on envs that report a win rate."""

    at: int = Field(gt=0, description="env step where the members are compared")
    keep: int = Field(ge=1, description="members that carry on")
    clones: int = Field(0, ge=0, description="copies of the best member that also carry on, each with a new seed")
    redraw_below: float | None = Field(
        None, gt=0, le=1, description="win rate under which the cut's best member brings in `redraws` new members"
    )
    redraws: int = Field(0, ge=0, description="new members drawn when the best member wins less than redraw_below")

    @model_validator(mode="after")
    def _check_redraw(self) -> PopulationCut:
        if (self.redraw_below is None) != (self.redraws == 0):
            raise ValueError(
                f"population.cuts at {self.at:,}: redraw_below and redraws go together "
                f"(got redraw_below {self.redraw_below}, redraws {self.redraws})"
            )
        return self


class Population(_Strict):
    """Several members of the configuration, one seed each, trained side by side as launcher jobs
    (``population:`` in a preset; :mod:`mission_gym.launch.population`). ``size: 1`` is an ordinary run."""

    size: int = Field(1, ge=1, le=64, description="members started (the first keeps the run's seed)")
    cuts: list[PopulationCut] = Field(default_factory=list)
    episodes: int = Field(200, ge=1, description="evaluation episodes per member at each cut and at the end")
    final_episodes: int | None = Field(None, ge=1, description="evaluation episodes per model at the end (default: episodes)")
    final_checkpoints: bool = Field(
        False, description="at the end also score each survivor's kept checkpoints, not only its best and final models"
    )
    variants: list[Variant] = Field(
        default_factory=list,
        description="member k trains with variants[k % len(variants)] applied over the run's configuration",
    )

    @field_validator("variants", mode="before")
    @classmethod
    def _members_share(cls, value: Any) -> Any:
        for i, variant in enumerate(value if isinstance(value, list) else []):
            owned = sorted(set(variant) & set(VARIANT_FORBIDDEN)) if isinstance(variant, Mapping) else []
            if owned:
                raise ValueError(f"variants[{i}]: {', '.join(owned)} belong to the whole population, not to a member")
        return value

    @model_validator(mode="after")
    def _check_cuts(self) -> Population:
        ats = [c.at for c in self.cuts]
        if any(b <= a for a, b in zip(ats, ats[1:])):
            raise ValueError(f"population.cuts: 'at' must increase, got {ats}")
        alive = self.size
        for cut in self.cuts:
            if cut.keep >= alive:
                raise ValueError(
                    f"population.cuts: keep {cut.keep} at {cut.at:,} must be fewer than the {alive} members before it"
                )
            if cut.keep + cut.clones > alive:
                raise ValueError(
                    f"population.cuts: keep {cut.keep} + clones {cut.clones} at {cut.at:,} must be at most the {alive} "
                    "members before it (clones fill the places of members cut)"
                )
            alive = cut.keep + cut.clones
        if len(self.variants) > self.size:
            raise ValueError(f"population.variants: {len(self.variants)} variants for {self.size} members")
        return self


class TrainConfig(_Strict):
    """Everything a training run needs; a preset file sets any subset of these fields.

    Sizes: ``n_envs × n_steps`` env steps per rollout, cut into minibatches of ``batch_size`` (``auto``: the
    largest divisor of the rollout that is ≤ ``target_batch``). Frequencies and schedule positions are env steps.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    preset: str = Field("custom", description="the preset this configuration started from")
    description: str = ""
    env: str = ENV_ID
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    timesteps: int = Field(1_000_000, gt=0)
    n_envs: int = Field(8, ge=1)
    n_steps: int = Field(256, ge=1)
    batch_size: int | Literal["auto"] = "auto"
    target_batch: int = Field(2048, ge=1)
    min_batch: int = Field(64, ge=1, description="floor for the automatic batch size")
    n_epochs: int = Field(10, ge=1)
    network_arch: list[int] = Field(default_factory=lambda: [64, 64])
    policy: str = Field("mlp", description="a registered policy (mission_gym.ppo.parts): mlp, or an optional one")
    activation: str = "tanh"
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
    compile_update: bool = Field(
        False, description="compile each minibatch's loss with torch.compile (needs a C++ compiler, else eager)"
    )
    phases: list[Phase] = Field(default_factory=list, description="later parts of the run with their own lr/entropy")
    curriculum: list[CurriculumStep] = Field(default_factory=list, description="game settings that start easier")
    population: Population = Field(default_factory=Population, description="members trained side by side")
    normalize: bool = Field(False, description="VecNormalize observations")
    normalize_reward: bool = Field(False, description="VecNormalize rewards too (needs normalize)")
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

    @field_validator("activation")
    @classmethod
    def _check_activation(cls, value: str) -> str:
        if value not in ACTIVATIONS:
            valid = list(ACTIVATIONS)
            raise ValueError(f"unknown activation {value!r}{suggest(value, valid)}; valid: {', '.join(valid)}")
        return value

    @field_validator("policy")
    @classmethod
    def _check_policy(cls, value: str) -> str:
        from mission_gym.ppo.parts import POLICIES

        if value not in POLICIES:
            raise ValueError(f"unknown policy {value!r}{suggest(value, list(POLICIES))}; valid: {', '.join(POLICIES)}")
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
    def _positions_are_steps(cls, data: Any) -> Any:
        """A position written as a fraction of the run (the format of runs made before positions were env steps)
        gets a message saying what it would be in steps."""
        if not isinstance(data, Mapping):
            return data
        timesteps = data.get("timesteps")
        for where, value in _positions(data):
            if isinstance(value, float) and 0 < value < 1:
                hint = f" ({value:g} of {timesteps:,} is {round(value * timesteps):,})" if isinstance(timesteps, int) else ""
                raise ValueError(f"{where}: schedule positions are env steps, got the fraction {value:g}{hint}")
        return data

    @model_validator(mode="after")
    def _check_combination(self) -> TrainConfig:
        if self.normalize_reward and not self.normalize:
            raise ValueError("normalize_reward needs normalize: true")
        for where, value in _positions(self.model_dump(include={"phases", "curriculum", "population"})):
            if not where.endswith(".until") and value >= self.timesteps:
                raise ValueError(f"{where}: step {value:,} is not inside the run's {self.timesteps:,} timesteps")
        check_schedule(self.phases, self.curriculum, "")
        if self.curriculum and self.env != ENV_ID:
            raise ValueError(f"curriculum changes Mission Gym's game settings; env {self.env!r} has none")
        for i, variant in enumerate(self.population.variants):
            if variant.model_dump().get("curriculum") and self.env != ENV_ID:
                raise ValueError(f"population.variants[{i}].curriculum changes Mission Gym's game; env {self.env!r} has none")
        return self

    @property
    def rollout(self) -> int:
        """Env steps per rollout (``n_envs × n_steps``)."""
        return self.n_envs * self.n_steps

    def fraction(self, step: int) -> float:
        """A schedule position as a fraction of the run (what SB3's progress is measured in)."""
        return step / self.timesteps


def check_schedule(phases: Sequence[Phase], curriculum: Sequence[CurriculumStep], where: str) -> None:
    """Phases must start in order; a setting's curriculum steps must not overlap."""
    starts = [p.start for p in phases]
    if any(b <= a for a, b in zip(starts, starts[1:])):
        raise ValueError(f"{where}phases: starts must increase, got {starts}")
    spans: dict[str, list[tuple[int, int]]] = {}
    for c in curriculum:
        spans.setdefault(c.setting, []).append((c.start, c.until))
    for setting, spans_of in spans.items():
        spans_of.sort()
        if any(b[0] < a[1] for a, b in zip(spans_of, spans_of[1:])):
            raise ValueError(f"{where}curriculum: the steps of {setting} overlap, got (start, until) {spans_of}")


def _positions(data: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """``(where, value)`` of every schedule position in raw configuration data (variants included)."""

    def of(section: Any, prefix: str) -> list[tuple[str, Any]]:
        out: list[tuple[str, Any]] = []
        if not isinstance(section, Mapping):
            return out
        for key, fields in (("phases", ("start",)), ("curriculum", ("start", "until"))):
            for i, item in enumerate(section.get(key) or []):
                if isinstance(item, Mapping):
                    out += [(f"{prefix}{key}[{i}].{f}", item[f]) for f in fields if item.get(f) is not None]
        return out

    found = of(data, "")
    population = data.get("population")
    if isinstance(population, Mapping):
        for i, cut in enumerate(population.get("cuts") or []):
            if isinstance(cut, Mapping) and "at" in cut:
                found.append((f"population.cuts[{i}].at", cut["at"]))
        for k, variant in enumerate(population.get("variants") or []):
            found += of(variant, f"population.variants[{k}].")
    return found


class _VariantBase(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_serializer(mode="wrap")
    def _only_what_is_set(self, handler: Any) -> dict[str, Any]:
        """A variant's own settings only (a field it leaves unset is None and belongs to the run)."""
        return {key: value for key, value in handler(self).items() if value is not None}


# A variant: any setting of a member's own (everything but VARIANT_FORBIDDEN), each optional.
Variant = create_model(  # type: ignore[call-overload]
    "Variant",
    __base__=_VariantBase,
    __doc__="A member's own settings over the run's (``population.variants[k]``): any field of "
    ":class:`TrainConfig` but those the members share. ``curriculum`` steps merge into the run's by their "
    "(setting, start): the same pair changes that step, a new pair adds one; ``phases`` merge by ``start``; "
    "``env_kwargs`` and ``hyperparams`` merge key by key; any other field replaces the run's.",
    **{
        name: (Optional[field.annotation], None)  # noqa: UP045 (the annotation is a runtime object)
        for name, field in TrainConfig.model_fields.items()
        if name not in VARIANT_FORBIDDEN
    },
)
Population.model_rebuild()
TrainConfig.model_rebuild()


def _merge_by(
    base: list[dict[str, Any]], update: list[dict[str, Any]], key: Sequence[str], defaults: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """``base`` with each item of ``update`` replacing the one with the same ``key`` values (``defaults`` for a key an
    item leaves out), or added."""

    def of(item: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(item.get(k, defaults.get(k)) for k in key)

    out = [dict(item) for item in base]
    for item in update:
        match = next((i for i, b in enumerate(out) if of(b) == of(item)), None)
        if match is None:
            out.append(dict(item))
        else:
            out[match] = {**out[match], **item}
    return out


def apply_variant(config: TrainConfig, variant: Any, index: int) -> TrainConfig:
    """The configuration of a member that trains ``population.variants[index]`` (see :data:`Variant`).

    :raises ConfigError: naming the variant, when the result is not a valid configuration
    """
    data = config.model_dump()
    own = variant.model_dump() if isinstance(variant, BaseModel) else dict(variant)
    for key, value in own.items():
        if key == "curriculum":
            data[key] = _merge_by(data[key], value, ("setting", "start"), {"start": 0})
        elif key == "phases":
            data[key] = _merge_by(data[key], value, ("start",), {})
        elif key in ("env_kwargs", "hyperparams"):
            data[key] = deep_merge(data[key], value)
        else:
            data[key] = value
    return validate(TrainConfig, data, f"population.variants[{index}]")


# --- changing a configuration -------------------------------------------------------------------------------------
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
        where = _path_text(path[: depth + 1])
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
            raise ConfigError(f"{source}: {_path_text(path)} does not exist")
        node[last] = value
    elif isinstance(node, dict):
        node[last] = value
    else:
        raise ConfigError(f"{source}: {_path_text(path)} sets a key inside a value that is not a mapping")


def _path_text(path: Sequence[str | int]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else p) for i, p in enumerate(path))


def for_env(data: dict[str, Any], previous_env: str, given: Sequence[str] = ()) -> None:
    """Drop, in place, what a configuration holds for Mission Gym's game when it now trains another env: the
    curriculum and env arguments of the run and of every variant (unless ``given`` names them)."""
    if data.get("env", ENV_ID) == previous_env:
        return
    if "curriculum" not in given and data.get("env") != ENV_ID:
        data["curriculum"] = []
    if "env_kwargs" not in given:
        data["env_kwargs"] = {}
    for variant in (data.get("population") or {}).get("variants") or []:
        if isinstance(variant, dict):
            if data.get("env") != ENV_ID:
                variant.pop("curriculum", None)
            variant.pop("env_kwargs", None)


def apply_overrides(config: TrainConfig, overrides: Mapping[str, Any], source: str = "command line") -> TrainConfig:
    """A copy of ``config`` with ``overrides`` applied and validated again.

    Keys are field names or dotted paths (``population.final_episodes``, ``curriculum[0].value``): a plain key sets
    the field's whole value, a dotted one changes one entry inside it. ``env_kwargs`` merge into the preset's for the
    same env; with another ``env`` the preset's Mission Gym settings (curriculum, env arguments, variants' too) are
    left out unless given. A new ``timesteps`` keeps every schedule position at its step and drops what would start
    at or after the new end (:func:`schedule_changes` lists it).

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
    for_env(data, config.env, given=[str(parse_path(k)[0]) for k in overrides])
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


def schedule_changes(before: TrainConfig, after: TrainConfig) -> list[str]:
    """What a new ``timesteps`` did to a configuration's schedule, as one line for the user (none when unchanged)."""
    if before.timesteps == after.timesteps:
        return []
    sections = {"phases", "curriculum", "population"}
    dropped = [f"{k} {v:,}" for k, v in _positions(before.model_dump(include=sections))
               if not k.endswith(".until") and v >= after.timesteps]  # fmt: skip
    cut_off = [f"{k} {v:,}" for k, v in _positions(after.model_dump(include=sections))
               if k.endswith(".until") and v > after.timesteps]  # fmt: skip
    line = f"timesteps {after.timesteps:,} (preset {before.timesteps:,}): schedule positions stay at their env steps"
    if dropped:
        line += "; left out (past the end): " + ", ".join(dropped)
    if cut_off:
        line += "; ramps cut off at the end: " + ", ".join(cut_off)
    return [line]


def shadowed_overrides(config: TrainConfig, overrides: Mapping[str, Any]) -> list[str]:
    """Lines saying which ``overrides`` (as given to :func:`apply_overrides`) a later phase or a population variant
    replaces in ``config`` (the configuration they resolved to), so that a change that does not reach the whole
    run is said before it starts.

    A phase that sets ``learning_rate``, ``lr_schedule`` or ``ent_coef`` takes over from its start; a variant that
    sets a field (or, for ``env_kwargs`` and ``hyperparams``, the same key) replaces the value in its members.
    """
    notes: list[str] = []
    variants = [v.model_dump() if isinstance(v, BaseModel) else dict(v) for v in config.population.variants]
    for key, value in overrides.items():
        path = parse_path(key)
        head = str(path[0])
        for leaf_path, leaf in _leaves(path, value):
            given = f"{_path_text(leaf_path)}={_value_text(leaf)}"
            if len(leaf_path) == 1 and head in Phase.model_fields:
                owner = next((i for i, p in enumerate(config.phases) if getattr(p, head) is not None), None)
                if owner is not None:
                    notes.append(
                        f"{given} applies until phases[{owner}] at {config.phases[owner].start:,}; phases set their own "
                        f"from there (phases[{owner}].{head}=... changes it)"
                    )
            for k, variant in enumerate(variants):
                if _variant_sets(variant, leaf_path, config):
                    members = [m for m in range(config.population.size) if m % len(variants) == k]
                    where = f"population.variants[{k}]"
                    notes.append(
                        f"{given} is replaced by {where}'s own in member{'s' if len(members) > 1 else ''} "
                        f"{', '.join(map(str, members))} ({where}.{_path_text(leaf_path)}=... changes it)"
                    )
    return notes


def _leaves(path: list[str | int], value: Any) -> list[tuple[list[str | int], Any]]:
    """``(path, value)`` of every leaf of a mapping override (``env_kwargs``, ``hyperparams``), or the override itself."""
    if str(path[0]) in ("env_kwargs", "hyperparams") and isinstance(value, Mapping) and value:
        out: list[tuple[list[str | int], Any]] = []
        for k, v in value.items():
            out += _leaves([*path, str(k)], v) if isinstance(v, Mapping) and v else [([*path, str(k)], v)]
        return out
    return [(path, value)]


def _variant_sets(variant: Mapping[str, Any], path: Sequence[str | int], config: TrainConfig) -> bool:
    """Whether a variant (its own settings) sets what ``path`` changes: for ``env_kwargs``/``hyperparams`` the same
    key; for a phase or curriculum step one of its own with the same ``start`` (``setting`` and ``start``), which
    merges over it; for ``phases``' fields a phase of its own that sets it; otherwise the field."""
    head = str(path[0])
    if len(path) == 1 and head in Phase.model_fields:
        if any(isinstance(p, Mapping) and p.get(head) is not None for p in variant.get("phases") or []):
            return True
    if head not in variant:
        return False
    if head in ("phases", "curriculum"):
        merge_key = ("start",) if head == "phases" else ("setting", "start")
        items = [i.model_dump() for i in getattr(config, head)]
        if len(path) > 1 and isinstance(path[1], int):
            items = items[path[1] : path[1] + 1 or None]
        own = {tuple((i.get(k, 0) if k == "start" else i.get(k)) for k in merge_key) for i in variant[head] or []}
        return any(tuple(i[k] for k in merge_key) in own for i in items)
    if head in ("env_kwargs", "hyperparams"):
        node: Any = variant
        for part in path:
            if not isinstance(node, Mapping) or part not in node:
                return False
            node = node[part]
    return True


def _value_text(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


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
