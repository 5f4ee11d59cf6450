"""A tier sizes a recipe for a machine: :func:`compose`.

A recipe (:mod:`mission_gym.plan.recipes`) says what is learned; a tier (``cpu``, ``fast``, ``heavy``,
``beast``: a preset file with ``tier: true``) says how big it runs. The rule:

- **A population recipe** (Mission Gym's game: members side by side, cut by their scores) keeps everything it
  learns; the tier sets its members (``members``) and the device (on CUDA the members train as one batched learner).
- **A single-run recipe** keeps its rollout (``n_envs × n_steps`` env steps), its minibatch size, epochs and learning
  rate: what it learns per env step is the recipe's, as the Meta-World guide keeps the paper's settings and tunes
  only the envs. The tier chooses how those envs step, from the task's measured step cost
  (:mod:`mission_gym.vec.probe`): the task's own batched env where it has one (``native``); worker processes
  (``subproc``, one per env, their count a multiple of the cores) where workers measured at least
  ``SUBPROC_MIN_GAIN`` times this process's speed; else in this process (``dummy``). A tier with ``seeds`` above 1
  trains that many seeds side by side (a population without cuts, the best kept), each on its share of the cores.
  The learner trains on the tier's device where the policy has a CNN; an MLP policy trains on the CPU (a GPU waits
  on kernel launches for networks this small: SB3's own advice), its cores left to the env workers' share.
- ``auto`` (the default) does not fit the memory here: the envs are halved (the rollout kept) until it does, and
  the notes say so. A size given explicitly (``--n-envs``) that does not fit is refused by the memory check.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from mission_gym.hardware import GB, Hardware
from mission_gym.settings.memory import FIT_FRACTION
from mission_gym.settings.minibatch import divisors
from mission_gym.settings.registry import AUTO_POLICY, policy_for
from mission_gym.settings.schema import TrainConfig


class Tier(BaseModel):
    """A tier file (``tier: true``): how big a recipe runs.

    :param description: one line: the machine it is for
    :param device: the learner's device (``auto``: CUDA when present)
    :param members: members of a population recipe (None: the recipe's own)
    :param seeds: seeds of a single-run recipe trained side by side, the best kept
    :param min_cores: the cores ``auto`` wants before it picks this tier for a single-run recipe
    """

    model_config = ConfigDict(extra="forbid")
    tier: bool = True
    description: str = ""
    device: str = "cpu"
    members: int | None = Field(None, ge=1, le=64)
    seeds: int = Field(1, ge=1, le=64)
    min_cores: int = Field(1, ge=1)


@dataclass
class Composed:
    """A recipe sized by a tier: the configuration and what was chosen, as lines for the user."""

    config: TrainConfig
    notes: list[str] = field(default_factory=list)


#: the task's measured profile for a number of cores (:func:`mission_gym.vec.probe.task_profile`), given lazily: a
#: recipe with a batched env of its own needs none
Profiler = Callable[[int], Any]


def compose(
    recipe: TrainConfig, recipe_name: str, tier: Tier, tier_name: str, hw: Hardware, profile: Profiler, why: str = ""
) -> Composed:
    """The configuration of ``recipe`` at ``tier``'s size on the machine ``hw`` (see the module doc).

    :param why: the line that says why this recipe was chosen (first of the notes)
    """
    notes = [why] if why else []
    data = recipe.model_dump()
    data.update(recipe=recipe_name, tier=tier_name, preset=tier_name, description=f"{tier.description}; {recipe.description}")
    if recipe.population.size > 1:  # a population recipe: its members and the device
        if tier.members is not None:
            data["population"]["size"] = tier.members
        data["device"] = tier.device
        members = data["population"]["size"]
        data["description"] = f"{tier.description}; {members} members, {recipe.description}"
        notes.append(f"size: tier {tier_name} ({tier.description}): {members} members of the recipe, device {tier.device}")
        return Composed(TrainConfig.model_validate(data), notes)
    seeds = tier.seeds
    cores = max(1, hw.cores // seeds)
    kind, n_envs, line = _envs(recipe, cores, profile)
    # the learner's threads stay the recipe's where it sets them (its MLP's update is faster on one), else the run's cores
    data.update(vec_env=kind, n_envs=n_envs, n_steps=recipe.rollout // n_envs)
    obs = profile(cores).obs_kind if recipe.policy == AUTO_POLICY or kind != "native" else "vector"
    if recipe.policy == AUTO_POLICY:
        data["policy"] = policy_for(obs)
    cnn = data["policy"] in ("cnn", "multi_input") and obs in ("image", "dict")
    data["device"] = tier.device if cnn else "cpu"
    device_line = (
        f"learner on {tier.device}"
        if cnn or tier.device == "cpu"
        else "learner on the CPU (an MLP policy this small trains faster on CPU cores than on a GPU, as SB3 advises)"
    )
    if seeds > 1:
        data["population"] = {"size": seeds, "learner": "processes", "episodes": max(recipe.eval_episodes, 10)}
        data["num_threads"] = cores
    at_once = min(seeds, max(1, hw.cores // cores))
    when = "" if at_once == seeds else f", {at_once} at a time on {hw.cores} cores"
    side = (
        f"{seeds} seeds side by side on {cores} core{'s' if cores > 1 else ''} each{when}, the best kept; "
        if seeds > 1
        else ""
    )
    notes.append(
        f"size: tier {tier_name} ({tier.description}): {side}{line}; rollout {n_envs} x {recipe.rollout // n_envs} = "
        f"{recipe.rollout:,} steps and minibatch {recipe.batch_size} as the recipe has it; {device_line}"
    )
    return Composed(TrainConfig.model_validate(data), notes)


def _envs(recipe: TrainConfig, cores: int, profile: Profiler) -> tuple[str, int, str]:
    """How the recipe's envs step on ``cores`` cores: (vec-env kind, n_envs, why)."""
    from mission_gym.vec.factory import has_native

    if recipe.vec_env not in ("auto", "native") or (recipe.vec_env == "native" and not has_native(recipe.env)):
        return recipe.vec_env, recipe.n_envs, f"{recipe.n_envs} envs ({recipe.vec_env}, as the recipe asks)"
    if has_native(recipe.env, recipe.env_kwargs, recipe.env_wrapper):
        return "native", recipe.n_envs, f"{recipe.n_envs} envs in {recipe.env}'s own batched env (native)"
    task = profile(cores)
    if cores > 1 and task.worth_a_process:
        n_envs = _multiple_of(recipe.rollout, recipe.n_envs, cores)
        return (
            "subproc",
            n_envs,
            (
                f"{n_envs} envs in worker processes (subproc: a step costs {task.step_us:,.0f} µs and {cores} workers "
                f"stepped it {task.subproc_gain:.2f}x as fast as one process)"
            ),
        )
    if task.step_us is None:
        return (
            "dummy",
            recipe.n_envs,
            f"{recipe.n_envs} envs in this process (dummy: its step raised {task.error} when probed)",
        )
    why = f"a step costs {task.step_us:,.0f} µs"
    if task.subproc_gain is not None:
        why += f"; {cores} workers stepped it {task.subproc_gain:.2f}x as fast as one process"
    elif task.error is not None:
        why += f"; workers not timed: {task.error}"
    elif cores > 1:
        why += ", too little for a worker process to pay for itself"
    return "dummy", recipe.n_envs, f"{recipe.n_envs} envs in this process (dummy: {why})"


def _multiple_of(rollout: int, n_envs: int, cores: int) -> int:
    """The fewest envs, at least ``n_envs`` and a multiple of ``cores``, that divide the rollout (else ``n_envs``)."""
    fitting = [d for d in divisors(rollout) if d >= n_envs and d % cores == 0]
    return fitting[0] if fitting else n_envs


def fit_to_memory(composed: Composed, host_gb: float, estimate: Callable[[TrainConfig], Any]) -> Composed:
    """``auto``'s configuration made to fit ``host_gb`` of host RAM, said in a note: first its envs halved (the
    rollout kept: what it learns per step is the recipe's), then, where the rollout itself is too large (a huge
    observation), its steps per env halved and the minibatch with them, to the largest size that fits. Unchanged when
    it fits, for a population recipe, or when not even one env and one step fit (the memory check then refuses it).

    :param estimate: the memory estimate of a configuration (:func:`~mission_gym.settings.sizing.population_estimate`)
    """
    config = composed.config
    budget = FIT_FRACTION * host_gb * GB
    first = estimate(config).host_bytes
    if first <= budget or config.population.size > 1 and config.population.cuts:
        return composed
    for smaller in _smaller(config):
        need = estimate(smaller).host_bytes
        if need <= budget:
            kept = (
                "the same rollout"
                if smaller.rollout == config.rollout
                else f"a rollout of {smaller.rollout:,}, not {config.rollout:,}"
            )
            note = (
                f"memory: {config.n_envs} envs x {config.n_steps} steps would need ~{first / GB:.1f} GiB of the "
                f"{host_gb:.1f} GiB here; {smaller.n_envs} envs x {smaller.n_steps} steps ({kept}, minibatch "
                f"{smaller.batch_size}) fit (~{need / GB:.1f} GiB)"
            )
            return Composed(TrainConfig.model_validate(smaller.model_dump()), [*composed.notes, note])
    return composed


def _smaller(config: TrainConfig) -> Iterator[TrainConfig]:
    """Ever smaller sizes of a configuration: fewer envs for the same rollout, then fewer steps per env."""
    n_envs = config.n_envs
    while n_envs > 1:
        n_envs = max(d for d in divisors(config.rollout) if d < n_envs)
        yield config.model_copy(update={"n_envs": n_envs, "n_steps": config.rollout // n_envs})
    batch = int(config.batch_size) if isinstance(config.batch_size, int) else None
    n_steps = config.rollout // n_envs
    while n_steps > 1:
        n_steps //= 2
        rollout = n_envs * n_steps
        update: dict[str, Any] = {"n_envs": n_envs, "n_steps": n_steps}
        if batch is not None:
            update["batch_size"] = max(d for d in divisors(rollout) if d <= batch)
        yield config.model_copy(update=update)
