"""Which recipe trains a task: :func:`recipe_for`.

A recipe is a preset file that says what is learned (the PPO settings, the network, the budget, the policy and the
wrappers). It says which tasks it is meant for with a ``for:`` key:

- ``for: [Hopper-v5]``: the recipe of these ids (the game's own recipe, a shipped per-task recipe, a user's);
- ``for: {actions: [continuous], observations: [vector, dict]}``: the default for tasks of that kind, from
  published settings its file names.

The lookup goes as rl-baselines3-zoo's does (its ``read_hyperparameters``: the id, then the ``atari`` block for ALE
games, then a default), with the default chosen by the task's kind: the exact id first, then a recipe for the id's
entry point's package (``ale_py``: the Atari preprocessing), then the kind's default. A tier sizes the recipe for
the machine (:mod:`mission_gym.plan.tiers`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mission_gym.config.yaml_io import ConfigError

#: the key of a preset file that makes it a recipe (popped before the rest is validated as a configuration)
FOR_KEY = "for"
OBS_KINDS = ("vector", "image", "dict")
ACTION_KINDS = ("discrete", "multidiscrete", "multibinary", "continuous")


@dataclass(frozen=True)
class RecipeUse:
    """What a recipe file says it is for.

    :param tasks: Gymnasium ids it is the recipe of
    :param entry_points: entry-point packages of the ids it serves (``ale_py``)
    :param actions: action kinds of the tasks it is the default for
    :param observations: observation kinds of those tasks
    """

    tasks: tuple[str, ...] = ()
    entry_points: tuple[str, ...] = ()
    actions: tuple[str, ...] = ()
    observations: tuple[str, ...] = ()

    @classmethod
    def parse(cls, value: Any, source: str) -> RecipeUse:
        """A ``for:`` value: a list of ids, or a mapping of ``tasks``, ``entry_points``, ``actions``, ``observations``.

        :raises ConfigError: naming the file for anything else
        """
        if isinstance(value, str):
            value = [value]
        if isinstance(value, Sequence) and not isinstance(value, str):
            return cls(tasks=tuple(str(v) for v in value))
        if not isinstance(value, Mapping):
            raise ConfigError(f"{source}: for: expected a list of env ids or a mapping of kinds, got {value!r}")
        fields = ("tasks", "entry_points", "actions", "observations")
        unknown = [k for k in value if k not in fields]
        if unknown:
            raise ConfigError(f"{source}: for: unknown key {unknown[0]!r}; valid: {', '.join(fields)}")
        out = {k: tuple(str(v) for v in ([value[k]] if isinstance(value[k], str) else value[k])) for k in value}
        for key, valid in (("actions", ACTION_KINDS), ("observations", OBS_KINDS)):
            bad = [v for v in out.get(key, ()) if v not in valid]
            if bad:
                raise ConfigError(f"{source}: for.{key}: unknown kind {bad[0]!r}; valid: {', '.join(valid)}")
        return cls(**out)

    def serves_kind(self, actions: str, observations: str) -> bool:
        """Whether it is the default for tasks of these kinds."""
        return bool(self.actions) and actions in self.actions and (not self.observations or observations in self.observations)


@dataclass(frozen=True)
class Choice:
    """The recipe chosen for a task, and why (a line for the user)."""

    name: str
    why: str


def entry_point_package(env_id: str) -> str | None:
    """The top package of a registered id's entry point (``ale_py`` for an ALE game), or None."""
    import gymnasium as gym

    from mission_gym.vec.wrappers import ensure_registered

    bare = env_id.partition(":")[2] if ":" in env_id else env_id
    ensure_registered(bare)
    try:
        entry = gym.spec(bare).entry_point
    except gym.error.Error:
        return None
    if isinstance(entry, str):
        return entry.split(":", 1)[0].split(".", 1)[0]
    module = getattr(entry, "__module__", "") or ""
    return module.split(".", 1)[0] or None


def choose(
    env_id: str,
    uses: Mapping[str, RecipeUse],
    kinds: Callable[[], tuple[str, str]],
    descriptions: Mapping[str, str],
) -> Choice:
    """The recipe of ``env_id`` among recipes by name and what they are for.

    :param kinds: the task's (action kind, observation kind), asked only when no recipe is made for its id
    :param descriptions: recipe name -> its description, for the line that says why
    :raises ConfigError: when no recipe serves the task, naming its kinds and the kinds there are recipes for
    """
    bare = env_id.partition(":")[2] if ":" in env_id else env_id
    for name, use in uses.items():
        if bare in use.tasks or env_id in use.tasks:
            return Choice(name, f"recipe {name}: the recipe made for {bare}")
    package = entry_point_package(env_id)
    if package is not None:
        for name, use in uses.items():
            if package in use.entry_points:
                return Choice(name, f"recipe {name}: {bare} is a {package} task ({descriptions.get(name, '')})")
    actions, observations = kinds()
    for name, use in uses.items():
        if use.serves_kind(actions, observations):
            return Choice(
                name,
                f"recipe {name}: no recipe is made for {bare}; the default for {actions} actions and {observations} "
                f"observations ({descriptions.get(name, '')})",
            )
    served = sorted({f"{a} actions with {o} observations" for u in uses.values() for a in u.actions for o in u.observations})
    raise ConfigError(
        f"--env {env_id}: {actions} actions with {observations} observations have no recipe; recipes serve "
        f"{', '.join(served)} (observations: {', '.join(OBS_KINDS)}; pass --preset FILE with a recipe of your own)"
    )


def recipe_uses(directory: Path, read: Any) -> tuple[dict[str, RecipeUse], dict[str, str]]:
    """Every recipe among a directory's preset files: name -> what it is for, and name -> its description.

    :param read: reads a preset file's raw mapping (``for`` and ``base`` still in it)
    """
    uses, descriptions = {}, {}
    for path in sorted(directory.glob("*.yaml")):
        data = read(path)
        if FOR_KEY in data:
            uses[path.stem] = RecipeUse.parse(data[FOR_KEY], str(path))
            descriptions[path.stem] = str(data.get("description", ""))
    return uses, descriptions
