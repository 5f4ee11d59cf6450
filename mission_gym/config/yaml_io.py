"""The one YAML reader of the project: safe loading, floats like ``3e-4`` read as numbers,
and validation errors that name the file and the key."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError


class ConfigError(ValueError):
    """A configuration file or value is invalid. The message names the file, the key and the reason."""


# libyaml's parser where PyYAML was built with it (its wheels are): the same documents read about 8x faster, which
# every run pays for its scenario files at each env it makes
_SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_SafeLoader):
    """SafeLoader that also reads YAML 1.2 floats such as ``3e-4`` (PyYAML's 1.1 resolver makes them strings)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def parse_yaml(text: str, source: str = "<string>") -> Any:
    """Parse YAML text with the project's loader.

    :param text: the YAML document
    :param source: where it came from, for error messages
    """
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}".replace("\n", " ")) from exc


def read_yaml(path: str | Path) -> Any:
    """Read one YAML file; a missing or unreadable file is a :class:`ConfigError`."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    return parse_yaml(text, str(path))


def dump_yaml(data: Any) -> str:
    """Serialise plain data (dicts, lists, scalars) as block-style YAML."""
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None)


M = TypeVar("M", bound=BaseModel)


def format_validation_error(exc: ValidationError, source: str) -> str:
    """One line per problem: ``source: key.path: reason (got value)``."""
    lines = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "<root>"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        got = err.get("input")
        # a whole section's values say nothing that the reason does not (model-level checks name their fields)
        quiet = err["type"] in ("extra_forbidden", "missing") or isinstance(got, dict)
        got_txt = "" if quiet else f" (got {got!r})"
        lines.append(f"{source}: {key}: {msg}{got_txt}")
    return "; ".join(lines)


def validate(model: type[M], data: Any, source: str) -> M:
    """Validate ``data`` into ``model``; errors become a :class:`ConfigError` naming ``source`` and the key."""
    try:
        return model.model_validate(data if data is not None else {})
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source)) from None
