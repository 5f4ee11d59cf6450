"""The names of a run's optional parts and where each lives: what a configuration's ``policy:`` may name, and the
run parts every session calls (:mod:`mission_gym.agents.spec` builds a policy, :mod:`mission_gym.training.parts` the
run parts). Entry points are ``"module:attribute"`` strings, imported only when a run uses the part, so the core
imports none of the extras.
"""

from __future__ import annotations

import importlib
from typing import Any

#: policy name -> SB3's own policy of that name: an MLP over vectors, its NatureCNN over images, its
#: CombinedExtractor (a CNN per image key, the rest flattened) over a Dict
SB3_POLICIES: dict[str, str] = {"mlp": "MlpPolicy", "cnn": "CnnPolicy", "multi_input": "MultiInputPolicy"}
#: ``policy: auto`` picks one of :data:`SB3_POLICIES` by the observation space (:func:`policy_for`)
AUTO_POLICY = "auto"
#: policy name -> entry point of its builder ("" for SB3's own, :data:`SB3_POLICIES`)
POLICIES: dict[str, str] = {
    **{name: "" for name in SB3_POLICIES},
    "trunk": "mission_gym.extras.trunk:trunk_policy",
}
#: run part name -> entry point
RUN_PARTS: dict[str, str] = {
    "curriculum": "mission_gym.extras.curriculum:curriculum_part",
    "restarts": "mission_gym.extras.restarts:restarts_part",
}


def policy_for(obs_kind: str) -> str:
    """The SB3 policy ``policy: auto`` gives observations of a kind (``vector``, ``image``, ``dict``:
    :func:`mission_gym.vec.probe.obs_kind`)."""
    return {"image": "cnn", "dict": "multi_input"}.get(obs_kind, "mlp")


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
