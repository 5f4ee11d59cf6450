"""What is said to the user about a configuration before a run starts: what a new ``timesteps`` did to its
schedule, each given setting that a later phase or a population variant replaces, a GPU preset that finds no CUDA
device here; and, when training runs out of CUDA memory, the estimator's view and the preset that fits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from mission_gym.hardware import available_cores, detect_hardware
from mission_gym.plan import presets
from mission_gym.plan.fit import pick
from mission_gym.settings.memory import RunShape, estimate_memory
from mission_gym.settings.overrides import parse_path, path_text
from mission_gym.settings.schema import Phase, TrainConfig, positions
from mission_gym.settings.sizing import members_at_once


def config_notes(before: TrainConfig, after: TrainConfig, given: Mapping[str, Any]) -> list[str]:
    """Every note about a configuration a command line made of a preset: what a new ``timesteps`` did to its
    schedule (:func:`schedule_changes`), each given setting that a later phase or a variant replaces
    (:func:`shadowed_overrides`), a GPU preset without a CUDA device here (:func:`device_notes`)."""
    notes = size_changes(before, after) + schedule_changes(before, after)
    return notes + shadowed_overrides(after, given) + device_notes(after)


#: the fields of a run's size that the ``size:`` note of a tier describes
_SIZE_FIELDS = ("n_envs", "n_steps", "batch_size", "vec_env", "device")


def size_changes(before: TrainConfig, after: TrainConfig) -> list[str]:
    """The size a command line gave in place of the tier's (the ``size:`` note says what the tier chose), as one
    line (none when unchanged)."""
    changed = [f"{f} {getattr(after, f)} (the tier's {getattr(before, f)})" for f in _SIZE_FIELDS
               if getattr(after, f) != getattr(before, f)]  # fmt: skip
    if not changed:
        return []
    return [f"size as given: {', '.join(changed)}; rollout {after.n_envs} x {after.n_steps} = {after.rollout:,} steps"]


def schedule_changes(before: TrainConfig, after: TrainConfig) -> list[str]:
    """What a new ``timesteps`` did to a configuration's schedule, as one line for the user (none when unchanged)."""
    if before.timesteps == after.timesteps:
        return []
    sections = {"phases", "curriculum", "population"}
    dropped = [f"{k} {v:,}" for k, v in positions(before.model_dump(include=sections))
               if not k.endswith(".until") and v >= after.timesteps]  # fmt: skip
    cut_off = [f"{k} {v:,}" for k, v in positions(after.model_dump(include=sections))
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

    A phase that sets ``learning_rate``, ``lr_schedule``, ``ent_coef`` or ``n_epochs`` takes over from its start; a
    variant that sets a field (or, for ``env_kwargs`` and ``hyperparams``, the same key) replaces the value in its
    members.
    """
    notes: list[str] = []
    variants = [v.model_dump() if isinstance(v, BaseModel) else dict(v) for v in config.population.variants]
    for key, value in overrides.items():
        path = parse_path(key)
        head = str(path[0])
        for leaf_path, leaf in _leaves(path, value):
            given = f"{path_text(leaf_path)}={_value_text(leaf)}"
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
                        f"{', '.join(map(str, members))} ({where}.{path_text(leaf_path)}=... changes it)"
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


def device_notes(config: TrainConfig) -> list[str]:
    """A line for a GPU preset that finds no CUDA device here: it trains on the CPU, slower."""
    found = presets.read_selector(presets.AUTO_PRESET)
    if found is None or config.preset not in found[0].gpu or config.device not in ("auto", "cuda"):
        return []
    hw = detect_hardware()
    if hw.gpu_mem_gb:
        return []
    members = config.population.size
    instead = f"(slower; --preset {found[0].cpu} is this machine's)"
    if members <= 1:  # one run, or a population's member (pinned to its own core)
        return [f"no CUDA device here: the GPU preset {config.preset!r} trains on the CPU {instead}"]
    at_once = members_at_once(config, hw.cores)
    return [
        f"no CUDA device here: the GPU preset {config.preset!r} trains its {members} members on the CPU, {at_once} at a "
        f"time on {hw.cores} cores {instead}"
    ]


def oom_message(
    shape: RunShape, gpu_mem_gb: float | None, ram_gb: float, cores: int | None = None, directory: Any = None
) -> str:
    """The text shown when training runs out of CUDA memory: the estimator's breakdown of the failing run and the
    preset that fits this machine (what ``--preset auto`` picks: :mod:`mission_gym.plan.fit`).

    :param shape: the run that failed
    :param gpu_mem_gb: total memory of the card in GiB (None if it cannot be read)
    :param ram_gb: host RAM in GiB
    :param cores: CPU cores available (default: this process's)
    :param directory: a directory of presets with an ``auto.yaml``; None for the shipped ones (a failure to read
        them is reported, not raised)
    """
    est = estimate_memory(shape)
    card = f"{gpu_mem_gb:.1f} GiB" if gpu_mem_gb else "unknown size"
    lines = [f"CUDA out of memory (card: {card}). The estimator's view of this run:", est.breakdown()]
    cores = available_cores() if cores is None else cores
    try:
        verdicts = presets.weigh_candidates(gpu_mem_gb, cores, ram_gb, directory)
    except (OSError, ValueError) as exc:
        verdicts = []
        lines.append(f"(presets could not be read: {exc})")
    best = pick(verdicts, "")
    if best:
        lines.append(f"The preset that fits this machine (what --preset auto picks): --preset {best}.")
    elif gpu_mem_gb:
        lines.append("No GPU preset fits this machine; try --device cpu.")
    lines.append(
        "Other ways out: stop other processes on the GPU (nvidia-smi) and --resume the run as it is (a single run "
        "may add --device cpu); or start a new run with a smaller --batch-size (activations scale with it) or a "
        "narrower --network-arch, which --resume does not change."
    )
    return "\n".join(lines)
