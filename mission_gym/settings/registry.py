"""The names of a run's optional parts and where each lives: what a configuration's ``policy:`` may name, and the
run parts every session calls (:mod:`mission_gym.agents.spec` builds a policy, :mod:`mission_gym.training.parts` the
run parts). Entry points are ``"module:attribute"`` strings, imported only when a run uses the part, so the core
imports none of the extras.
"""

from __future__ import annotations

import importlib
from typing import Any

#: policy name -> entry point of its builder ("" for SB3's MlpPolicy)
POLICIES: dict[str, str] = {
    "mlp": "",
    "trunk": "mission_gym.extras.trunk:trunk_policy",
}
#: run part name -> entry point
RUN_PARTS: dict[str, str] = {
    "curriculum": "mission_gym.extras.curriculum:curriculum_part",
    "restarts": "mission_gym.extras.restarts:restarts_part",
}


def load(entry_point: str) -> Any:
    """The object an entry point ``"module:attribute"`` names (a registered name's, never one a file gives)."""
    module, _, attr = entry_point.partition(":")
    return getattr(importlib.import_module(module), attr)


def register_policy(name: str, entry_point: str) -> None:
    """Make ``policy: name`` available to presets (``entry_point``: ``"module:function"``, see the module doc)."""
    POLICIES[name] = entry_point


def register_run_part(name: str, entry_point: str) -> None:
    """Call ``entry_point`` (``"module:function"``) in every training session (see the module doc)."""
    RUN_PARTS[name] = entry_point
