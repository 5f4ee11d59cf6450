"""The configuration of a training run (:class:`TrainConfig`): its fields, what each may hold and what must hold
between them; a population's members and their variants (:data:`Variant`).

Every schedule position (``phases[].start``, ``curriculum[].start`` / ``until``, ``population.cuts[].at``) is a
count of env steps (a shorter run keeps each at its step: :mod:`mission_gym.settings.overrides`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    create_model,
    field_serializer,
    field_validator,
    model_serializer,
    model_validator,
)

from mission_gym import ENV_ID
from mission_gym.config.loader import suggest
from mission_gym.settings.game import CurriculumStep, Distill, DistillStage
from mission_gym.settings.registry import AUTO_POLICY, POLICIES
from mission_gym.settings.starts import Restarts, RestartStage, own_starts_path, restarts_problem
from mission_gym.vec import VEC_ENV_KINDS

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
#: what every member of a population shares; a variant cannot set it
VARIANT_FORBIDDEN = ("seed", "population", "timesteps", "env", "preset", "description", "recipe", "tier")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Phase(_Strict):
    """A later part of a run (``phases:`` in a preset): from env step ``start`` on, the learning rate restarts from
    ``learning_rate`` and follows ``lr_schedule`` over the phase (``linear``: down to 0 at its end), and ``ent_coef``
    and ``n_epochs`` apply. An unset value keeps the previous phase's."""

    start: int = Field(gt=0, description="env step where the phase begins")
    learning_rate: float | None = Field(None, gt=0)
    lr_schedule: Schedule | None = None
    ent_coef: float | None = Field(None, ge=0)
    n_epochs: int | None = Field(None, ge=1, description="passes over each rollout in an update")


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
    distill: DistillStage | None = Field(None, description="the members that carry on learn from each situation's best")
    redraw_restarts: RestartStage | None = Field(None, description="drawn members start games from the best's won games")
    n_envs: int | None = Field(
        None,
        ge=1,
        description="envs per member from this cut on (a larger rollout each iteration, the same minibatch size: the "
        "few members of a late stage keep more cores busy)",
    )

    @model_validator(mode="after")
    def _check_redraw(self) -> PopulationCut:
        if self.redraw_restarts is not None and self.redraw_below is None:
            raise ValueError(f"population.cuts at {self.at:,}: redraw_restarts needs redraw_below and redraws")
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
    learner: Literal["auto", "processes", "batched"] = Field(
        "auto",
        description="processes: a train_ppo process per member; batched: the members in one batched learner "
        "(mission_gym.ppo.batched); auto: batched where the members train on CUDA, else processes",
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
    recipe: str = Field("", description="the recipe it trains (mission_gym.plan.recipes), when a tier sized one")
    tier: str = Field("", description="the tier that sized the recipe for the machine (mission_gym.plan.tiers)")
    env: str = ENV_ID
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    env_wrapper: list[Any] = Field(
        default_factory=list, description="Gymnasium wrappers around the env by name (mission_gym.vec.wrappers), e.g. atari"
    )
    frame_stack: int | None = Field(None, ge=1, description="observations stacked (SB3's VecFrameStack), as the zoo's key")
    timesteps: int = Field(1_000_000, gt=0)
    n_envs: int = Field(8, ge=1)
    n_steps: int = Field(256, ge=1)
    batch_size: int | Literal["auto"] = "auto"
    target_batch: int = Field(2048, ge=1)
    min_batch: int = Field(64, ge=1, description="floor for the automatic batch size")
    n_epochs: int = Field(10, ge=1)
    network_arch: list[int] = Field(default_factory=lambda: [64, 64])
    policy: str = Field(
        "mlp",
        description="a registered policy (mission_gym.settings.registry): mlp, cnn, multi_input, an optional one, or auto "
        "(by the observations: cnn for images, multi_input for a Dict, else mlp)",
    )
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
    distill: Distill | None = Field(None, description="learn from teachers chosen per game by the defenders' modes")
    restarts: list[Restarts] | None = Field(
        None, description="start some games from states along a winner's won games (a list: each in its own span)"
    )
    population: Population = Field(default_factory=Population, description="members trained side by side")
    normalize: bool = Field(False, description="VecNormalize observations")
    normalize_reward: bool = Field(False, description="VecNormalize rewards too (needs normalize)")
    vec_env: str = Field("auto", description=f"auto or a training env kind: {', '.join(VEC_ENV_KINDS)}")
    device: str = "auto"
    num_threads: int | None = Field(None, ge=1)
    seed: int = Field(0, ge=0)
    eval_freq: int = Field(50_000, ge=0)
    eval_episodes: int = Field(20, ge=1)
    stop_return: float | None = Field(
        None, description="end the run at the first evaluation whose mean return reaches this (a task's ceiling)"
    )
    save_freq: int = Field(100_000, ge=0)
    keep_checkpoints: int = Field(5, ge=1)
    tensorboard: bool = True
    hyperparams: dict[str, Any] = Field(default_factory=dict, description="extra keyword arguments for SB3's PPO")

    @field_validator("restarts", mode="before")
    @classmethod
    def _one_block_is_a_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, Mapping | Restarts) else value

    @field_serializer("restarts")
    def _one_block_as_written(self, value: list[Restarts] | None) -> Any:
        # one block is written as a mapping, as presets write it, so `restarts.until=...` overrides still find it
        return value[0].model_dump() if value is not None and len(value) == 1 else value

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
        # no hidden layer is SB3's own choice after a CNN's features (its CnnPolicy's heads are linear)
        if any(w < 1 for w in value):
            raise ValueError(f"expected positive layer widths (or none), got {value}")
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
        valid = [AUTO_POLICY, *POLICIES]
        if value not in valid:
            raise ValueError(f"unknown policy {value!r}{suggest(value, valid)}; valid: {', '.join(valid)}")
        return value

    @field_validator("vec_env")
    @classmethod
    def _check_vec_env(cls, value: str) -> str:
        valid = ["auto", *VEC_ENV_KINDS]
        if value not in valid:
            raise ValueError(f"unknown vec_env {value!r}{suggest(value, valid)}; valid: {', '.join(valid)}")
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
        for where, value in positions(data):
            if isinstance(value, float) and 0 < value < 1:
                hint = f" ({value:g} of {timesteps:,} is {round(value * timesteps):,})" if isinstance(timesteps, int) else ""
                raise ValueError(f"{where}: schedule positions are env steps, got the fraction {value:g}{hint}")
        return data

    @model_validator(mode="after")
    def _check_combination(self) -> TrainConfig:
        if self.normalize_reward and not self.normalize:
            raise ValueError("normalize_reward needs normalize: true")
        for where, value in positions(self.model_dump(include={"phases", "curriculum", "population"})):
            if not where.endswith(".until") and value >= self.timesteps:
                raise ValueError(f"{where}: step {value:,} is not inside the run's {self.timesteps:,} timesteps")
        check_schedule(self.phases, self.curriculum, "")
        game_only = self.game_settings()
        if game_only and self.env != ENV_ID:
            raise ValueError(
                f"{', '.join(game_only)} {'is a setting' if len(game_only) == 1 else 'are settings'} of Mission Gym's game "
                f"({ENV_ID}); env {self.env!r} has none: leave {'it' if len(game_only) == 1 else 'them'} out for this task"
            )
        return self

    @model_validator(mode="after")
    def _check_restart_spans(self) -> TrainConfig:
        pop = self.population
        stages = [0, *(c.at for c in pop.cuts)] if pop.size > 1 else None
        problem = restarts_problem(self.restarts or [], stages, [v.model_dump().get("restarts") for v in pop.variants])
        if problem:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _check_cut_envs(self) -> TrainConfig:
        problem = self.cut_envs_problem()
        if problem:
            raise ValueError(problem)
        return self

    def game_settings(self) -> list[str]:
        """The settings this configuration sets that only Mission Gym's game has: a curriculum or restarts over its
        game settings, a distillation by its defenders' modes (a cut's too), and a variant's of any of them."""
        found = [name for name in ("curriculum", "restarts", "distill") if getattr(self, name)]
        for i, cut in enumerate(self.population.cuts):
            found += [f"population.cuts[{i}].{name}" for name in ("distill", "redraw_restarts") if getattr(cut, name)]
        for i, variant in enumerate(self.population.variants):
            own = variant.model_dump()
            found += [f"population.variants[{i}].{name}" for name in ("curriculum", "restarts", "distill") if own.get(name)]
        return found

    def with_starts_in(self, directory: Path, member: str | None = None) -> TrainConfig:
        """This configuration with each ``restarts`` block that finds its own states writing them in ``directory``
        (``restarts<i>.npz``; an absolute path, as a population's members read their run's); a block that names its
        file already keeps it. A block of each member's own (``policy: own``) is ``restarts<i>-<member>.npz`` for a
        ``member`` (placed again for a member drawn or cloned from another's recipe), unplaced in a population's own
        configuration, ``restarts<i>.npz`` in a single run's."""
        blocks = []
        for i, b in enumerate(self.restarts or []):
            own = b.find is not None and b.find.policy == "own"
            if own and member is not None:
                b = b.model_copy(update={"states": own_starts_path(directory, i, member)})
            elif b.find is not None and not b.states and not (own and self.population.size > 1):
                b = b.model_copy(update={"states": str(directory.resolve() / f"restarts{i}.npz")})
            blocks.append(b)
        return self.model_copy(update={"restarts": blocks}) if blocks != list(self.restarts or []) else self

    def without_found_starts(self) -> TrainConfig:
        """This configuration without the ``restarts`` blocks that find their own states: what a benchmark of its
        training speed trains (a recording is no training step)."""
        kept = [b for b in self.restarts or [] if b.find is None]
        if len(kept) == len(self.restarts or []):
            return self
        return self.model_copy(update={"restarts": kept or None})

    def cut_envs_problem(self) -> str | None:
        """Why a cut's ``n_envs`` cannot split into this configuration's minibatches (once ``batch_size`` is a
        number), or None."""
        for cut in self.population.cuts:
            if cut.n_envs is not None and isinstance(self.batch_size, int) and cut.n_envs * self.n_steps % self.batch_size:
                return (
                    f"population.cuts at {cut.at:,}: n_envs {cut.n_envs} x n_steps {self.n_steps} is not a multiple of "
                    f"batch_size {self.batch_size}"
                )
        return None

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


def positions(data: Mapping[str, Any]) -> list[tuple[str, Any]]:
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
