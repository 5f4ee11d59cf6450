"""A population's members: their seeds, their configurations (the run's, or a variant's, checked like a run's before
anything starts) and the stages they train through."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from mission_gym.config.yaml_io import ConfigError, dump_yaml, read_yaml
from mission_gym.rundir.directory import RunDir, saved_with
from mission_gym.rundir.files import atomic_copy, atomic_write_text, read_json, write_json
from mission_gym.rundir.lock import LOCK_FILE
from mission_gym.settings.schema import Population, TrainConfig
from mission_gym.settings.starts import place_own_starts
from mission_gym.settings.variants import apply_variant
from mission_gym.training.trainer import Trainer


def member_seeds(seed: int, size: int) -> list[int]:
    """The members' seeds: the run's own first, then independent streams drawn from it."""
    children = np.random.SeedSequence(seed).spawn(size - 1)
    return [seed] + [int(c.generate_state(1)[0] % 2**31) for c in children]


def stages(config: TrainConfig) -> list[tuple[int, int]]:
    """``(step, members kept after it)`` for each cut, then ``(timesteps, 1)`` for the end of the run."""
    cuts = [(c.at, c.keep) for c in config.population.cuts]
    return [*cuts, (config.timesteps, 1)]


def member_config(config: TrainConfig, seed: int) -> TrainConfig:
    """A member's configuration: the run's (or its variant's), with its own seed and no population of its own."""
    return config.model_copy(update={"seed": seed, "population": Population()})


def check_variant(config: TrainConfig, variant: Any, index: int, memory_check: bool = True) -> TrainConfig:
    """The run's configuration with ``population.variants[index]`` applied, finalised and checked like the first
    member's (its env and model built and closed).

    :raises ConfigError: naming the variant, for one that makes an invalid configuration
    """
    try:
        recipe = apply_variant(config, variant, index)
        checked = Trainer.check(member_config(recipe, config.seed), memory_check=memory_check)
    except ConfigError as exc:
        msg = str(exc)
        raise ConfigError(msg if msg.startswith("population.variants") else f"population.variants[{index}]: {msg}") from None
    return recipe.model_copy(update={"batch_size": checked.config.batch_size, "vec_env": checked.config.vec_env})


def clone_member(members_dir: Path, best: str, name: str, seed: int, step: int) -> None:
    """Copy member ``best``, paused at ``step``, as member ``name`` with seed ``seed`` (its run directory, its
    recipe ``<name>.yaml`` and a line in its log); a copy a stopped session left half-made is replaced."""
    dst, tmp = members_dir / name, members_dir / f".{name}.partial"
    for leftover in (dst, tmp):  # from a session stopped before this cut was recorded
        if leftover.exists():
            shutil.rmtree(leftover)
    # not the source's lock, nor a file a killed writer left half-written
    shutil.copytree(members_dir / best, tmp, ignore=shutil.ignore_patterns(LOCK_FILE, ".*.tmp*"))
    starts = members_dir.parent / "starts"  # the run's: the clone's own blocks get states of its own
    recipe = place_own_starts(read_yaml(members_dir / f"{best}.yaml"), starts, name)  # the source's (variant's) own
    saved = place_own_starts(read_yaml(tmp / "config.yaml"), starts, name)  # the source's finalised one, but the seed
    atomic_write_text(tmp / "config.yaml", dump_yaml({**saved, "seed": seed}))
    clone_of = {"member": best, "step": step}
    lineage = read_json(tmp / "lineage.json")
    write_json(tmp / "lineage.json", {**lineage, "run": name, "clone_of": clone_of})
    RunDir(tmp).update_metadata(run=name, clone_of=clone_of)
    os.replace(tmp, dst)
    atomic_write_text(members_dir / f"{name}.yaml", dump_yaml({**recipe, "seed": seed}))
    with open(members_dir / f"{name}.log", "w") as log:
        log.write(f"clone of {best} at step {step:,} with seed {seed}\n")


def draw_member(members_dir: Path, k: int, seed: int, n_recipes: int, restarts: Any = None) -> str:
    """Member ``k``, drawn with ``seed`` and recipe ``k % n_recipes`` (as at the start): its recipe file, with its own
    starts placed for it and, given ``restarts`` (its recipe's ``restarts`` -> the drawn member's), other restarts;
    its name. What a stopped session left of a member of that name (a clone's) is removed."""
    name = f"m{k}"
    for leftover in (members_dir / name, members_dir / f".{name}.partial"):
        if leftover.exists():  # a clone's, from a session stopped before its cut was recorded
            shutil.rmtree(leftover)
    recipe = read_yaml(members_dir / f"m{k % n_recipes}.yaml")  # that recipe's member configuration
    extra = {"restarts": restarts(recipe.get("restarts"))} if restarts is not None else {}
    mine = place_own_starts({**recipe, "seed": seed, **extra}, members_dir.parent / "starts", name)
    atomic_write_text(members_dir / f"{name}.yaml", dump_yaml(mine))
    return name


def grow_envs(members_dir: Path, names: list[str], n_envs: int) -> None:
    """Members ``names`` carry on with ``n_envs`` envs each: written into each one's saved configuration, which its
    resume builds its env from (the checkpoint's model and statistics take the new env as SB3's ``load`` does)."""
    for name in names:
        path = members_dir / name / "config.yaml"
        atomic_write_text(path, dump_yaml({**read_yaml(path), "n_envs": n_envs}))


def adopt_winner(run: RunDir, members_dir: Path, best: dict[str, Any], timesteps: int) -> None:
    """Copy the winning member's files into the run directory; its best-scoring model is ``best_model.zip``."""
    src = RunDir(members_dir / best["member"])
    # every file is copied atomically, final_model.zip last: --resume takes the run as finished once it is there
    for name in ("checkpoints", "tb", "frames"):
        if (src / name).is_dir():
            shutil.copytree(src / name, run / name, dirs_exist_ok=True, copy_function=atomic_copy)
    model = src / best["model"]
    for beside, dst in zip(saved_with(model), saved_with(run / "best_model.zip")):
        if beside.is_file():
            atomic_copy(beside, dst)
    atomic_copy(model, run / "best_model.zip")
    final = [p.name for p in saved_with(src / "final_model.zip")]
    for name in ("progress.csv", "evaluations.csv", *final, "final_model.zip"):
        if (src / name).is_file():
            atomic_copy(src / name, run / name)
    meta = read_json(src / "metadata.json")
    run.update_metadata(
        timesteps=meta.get("timesteps", timesteps),
        winner={"member": best["member"], "model": best["model"], "evaluation": best["record"]},
    )
