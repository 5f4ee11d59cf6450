"""A population member's configuration: the run's with one of its ``population.variants`` applied."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from mission_gym.config.loader import deep_merge
from mission_gym.config.yaml_io import validate
from mission_gym.settings.schema import TrainConfig


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
