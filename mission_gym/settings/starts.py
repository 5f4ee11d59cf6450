"""What a run's restarts start from (``restarts:`` in a configuration): a states file, or the starts the run finds
itself with the lookahead (:class:`FindStarts`), and where a population's members keep their own."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LookaheadBudget(_Strict):
    """How hard the lookahead looks (:mod:`mission_gym.agents.lookahead`; ``evaluate --lookahead-budget
    EVERY,CANDIDATES,COPIES,HORIZON``, or a mapping of these in a preset)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    every: int = Field(20, ge=1, description="steps between decisions (a candidate prefix's length)")
    candidates: int = Field(8, ge=1, description="prefixes tried per decision")
    copies: int = Field(4, ge=1, description="copies of the game each prefix is played on, each with fresh dice")
    horizon: int = Field(150, ge=1, description="steps the sampled policy plays on after the prefix")

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, value: Any) -> Any:
        if isinstance(value, str):
            return cls.fields_of(value)
        return value

    @staticmethod
    def fields_of(text: str) -> dict[str, int]:
        """``"20,8,4,150"`` → its fields.

        :raises ValueError: naming the bad value and what is valid
        """
        try:
            values = [int(p) for p in text.split(",")]
        except ValueError:
            values = []
        if len(values) != 4 or min(values) < 1:
            raise ValueError(
                f"lookahead budget {text!r} is not valid; give EVERY,CANDIDATES,COPIES,HORIZON, four integers >= 1"
            )
        return dict(zip(("every", "candidates", "copies", "horizon"), values))

    @classmethod
    def parse(cls, text: str) -> LookaheadBudget:
        """``"20,8,4,150"`` → the budget.

        :raises ValueError: naming the bad value and what is valid
        """
        return cls(**cls.fields_of(text))

    def text(self) -> str:
        return f"{self.every},{self.candidates},{self.copies},{self.horizon}"


#: the policies a run can find its starts with (:class:`FindStarts`)
FIND_POLICIES = ("greedy", "best", "own")


class FindStarts(_Strict):
    """How a run finds the won games a ``restarts`` block starts from (the explore phase of Go-Explore, Ecoffet et al.
    2021; :mod:`mission_gym.extras.found`): at the block's ``start`` the run plays ``games`` games (seeds no training
    or evaluation plays) by the lookahead over ``policy``'s sampled plays, or by its own play with ``lookahead:
    null``, and keeps the states of the games won, once, in its directory (``starts/``)."""

    policy: Literal["greedy", "best", "own"] = Field(
        description="greedy: the scripted greedy fleet (Mission Gym's baseline), sampled with `noise`; best: the run's "
        "policy at the block's start, sampled (a population's best scored member at the cut there); own: each "
        "member's own policy at the cut, `games` each, all in one lookahead (a single run: its policy, as best)"
    )
    lookahead: LookaheadBudget | None = Field(
        default_factory=LookaheadBudget, description="the lookahead's budget; null: the policy's own deterministic play"
    )
    games: int = Field(256, ge=1, description="games played")
    situation: Literal["all", "worst", "lost"] = Field(
        "all",
        description="worst: only games of the situation (the defenders' modes) the policy's own play loses most; lost: "
        "only games its own play loses (the first `games` of 1,000 or more), in every situation",
    )
    noise: float = Field(0.2, ge=0, le=1, description="greedy: the share of its commands drawn at random in a sampled play")
    every: int = Field(5, ge=1, description="a state kept every this many steps of each won game")

    def describe(self, whose: str = "the run's policy") -> str:
        """What the recording plays, in a few words (the log and the dashboard); ``whose``: the policy of ``best``,
        e.g. ``m3's policy at 2,752,896 steps``."""
        who = f"greedy (noise {self.noise:g})" if self.policy == "greedy" else whose
        how = f"the lookahead ({self.lookahead.text()}) over {who}" if self.lookahead else f"{who}'s own play"
        each = " each" if self.policy == "own" else ""
        where = {"worst": " of the situation it loses most", "lost": " of those it loses"}.get(self.situation, "")
        return f"{how}, {self.games:,} games{each}{where}"


class Restarts(_Strict):
    """Start some training games from states recorded along won games (the backward algorithm of Salimans & Chen 2018;
    :mod:`mission_gym.extras.restarts`): from env step ``start``, a ``share`` of the games that end start anew from a
    state ``back`` steps before such a game's end, and the start moves ``step`` steps further back whenever at least
    ``advance_at`` of the games started that way in a rollout are won, until env step ``until``. The states come from
    a file (``states``) or the run finds them itself (``find``; ``states`` is then where it writes them). A list of
    blocks restarts from each in its own span of steps."""

    states: str | None = Field(
        None, min_length=1, description="a states file (tools/record_states.py); with find, where the run writes its own"
    )
    find: FindStarts | None = Field(None, description="the run finds the states itself at the block's start")
    share: float = Field(0.5, gt=0, le=1)
    back: int = Field(30, ge=1, description="steps before a won game's end the first restarts start at")
    step: int = Field(30, ge=1, description="steps the start moves back at each advance")
    advance_at: float = Field(0.5, gt=0, le=1, description="win rate of restarted games that moves the start back")
    start: int = Field(0, ge=0, description="env step from which games restart")
    until: int = Field(gt=0, description="env step after which every game starts afresh")

    @property
    def label(self) -> str:
        """The block's source in a message: its file, or what finds its states."""
        return repr(self.states) if self.find is None else f"find ({self.find.policy})"

    @model_validator(mode="after")
    def _check_span(self) -> Restarts:
        if self.states is None and self.find is None:
            raise ValueError("restarts: give each block its states (a file) or find (how the run finds them)")
        if self.start >= self.until:
            raise ValueError(f"restarts from {self.label}: start {self.start:,} must come before until {self.until:,}")
        if self.find is not None and self.find.policy != "greedy" and self.start == 0:
            raise ValueError(
                f"restarts: find with policy {self.find.policy} needs a start after 0 (the run has no policy before then)"
            )
        return self


class RestartStage(_Strict):
    """At a cut that draws new members: the best scored member's won games are recorded and the drawn members start
    a ``share`` of their games from them (:class:`Restarts`) until the cut."""

    share: float = Field(0.5, gt=0, le=1)
    back: int = Field(30, ge=1)
    step: int = Field(30, ge=1)
    advance_at: float = Field(0.5, gt=0, le=1)


def restarts_problem(blocks: list[Restarts], stages: list[int] | None, variants: list[Any]) -> str | None:
    """Why ``restarts`` blocks do not fit together, or None: each block's span follows the one before it; in a
    population (``stages``: its start and its cuts' steps) a block finds its starts where a stage begins, and only
    the run's blocks do (``variants``: each variant's own ``restarts``)."""
    for before, after in zip(blocks, blocks[1:]):
        if after.start < before.until:
            return (
                f"restarts: each block's span follows the one before it; {after.label} starts at {after.start:,}, "
                f"before {before.label} ends at {before.until:,}"
            )
    if stages is None:
        return None
    for block in blocks:  # a population finds its starts between its stages
        if block.find is not None and block.start not in stages:
            return (
                f"restarts: a population finds its starts at its start or at a cut; find ({block.find.policy}) "
                f"starts at {block.start:,}, not one of {', '.join(f'{s:,}' for s in stages)}"
            )
    for i, variant in enumerate(variants):
        if any(b.get("find") for b in blocks_of(variant)):
            return f"population.variants[{i}].restarts: the run's find blocks are the whole population's"
    return None


def own_starts_path(directory: Path, block: int, member: str) -> str:
    """Where a population's ``member`` keeps the states of its own ``restarts[block]`` (``policy: own``)."""
    return str(directory.resolve() / f"restarts{block}-{member}.npz")


def place_own_starts(data: dict[str, Any], directory: Path, member: str) -> dict[str, Any]:
    """A member's configuration (a mapping, as its file holds it) with its own blocks' states placed for ``member``
    (a member drawn or cloned from another's configuration)."""
    blocks = blocks_of(data.get("restarts"))
    if not any((b.get("find") or {}).get("policy") == "own" for b in blocks):
        return data
    placed = [
        {**b, "states": own_starts_path(directory, i, member)} if (b.get("find") or {}).get("policy") == "own" else b
        for i, b in enumerate(blocks)
    ]
    return {**data, "restarts": placed}


def blocks_of(value: Any) -> list[Any]:
    """A ``restarts`` value as a list of blocks (one block may be written as a mapping)."""
    return [value] if isinstance(value, Mapping) else list(value or [])
