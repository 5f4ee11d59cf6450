"""A population run's members as its files tell them (who each is, the stages they trained through, what became
of each), for its dashboard (:mod:`mission_gym.dashboard.population`) and the runs index.

``population.json`` (written by :mod:`mission_gym.launch.population`) names the members and records every cut:
each member's score, who was kept, cut, cloned or failed, and at the end the winner with the model chosen. Each
member is an ordinary run under ``RUN/members/mK/``; a clone's directory starts as a copy of its source's at the cut,
so its curves are drawn from the point where it branched off its source's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import yaml

from mission_gym.dashboard.charts import PALETTE
from mission_gym.dashboard.layout import fmt_steps
from mission_gym.dashboard.runs import MEMBERS_DIR, RunData, load_run


@dataclass
class Member:
    """One member of a population run and what became of it.

    :param name: ``mK``
    :param color: its colour in every chart and table of the page
    :param run: its run directory's data (``None`` before the member has started)
    :param seed: its seed
    :param clone_of: the member it was cloned from, for a clone
    :param clone_step: the cut it was cloned at, for a clone
    :param branch_step: the step its own curves start at (a clone's source's checkpoint at the cut), else ``None``
    :param fate: what became of it: ``winner``, ``cut at 512``, ``training``... (also the badge's class, first word)
    :param origin: how it started: ``seed 7`` or ``clone of m0 at 512``
    """

    name: str
    color: str
    run: RunData | None
    seed: Any = None
    clone_of: str | None = None
    clone_step: float | None = None
    branch_step: float | None = None
    fate: str = ""
    origin: str = ""

    @property
    def label(self) -> str:
        """Its legend entry: the name, and whose clone it is."""
        return f"{self.name} (clone of {self.clone_of})" if self.clone_of else self.name

    @property
    def steps(self) -> float:
        """The env steps it reached (NaN before its first rollout)."""
        if self.run is None:
            return math.nan
        last = self.run.last("time/total_timesteps")
        meta = self.run.metadata.get("timesteps")
        return last if math.isfinite(last) else float(meta) if isinstance(meta, int | float) else math.nan

    @property
    def own_steps(self) -> float:
        """The env steps it trained itself (a clone's copied past left out), for the run's total."""
        steps = self.steps
        return max(0.0, steps - (self.branch_step or 0.0)) if math.isfinite(steps) else 0.0


@dataclass
class Stage:
    """A cut (or the end) of a population run: planned in its configuration, recorded once made.

    :param number: 1 for the first cut; the end has the number after the last cut
    :param step: where it falls
    :param keep: members kept (1 at the end)
    :param clones: clones of the best made there
    :param final: the end of the run (its best is the winner) rather than a cut
    :param record: its entry in ``population.json`` once made
    """

    number: int
    step: float
    keep: int | None
    clones: int
    final: bool
    record: Mapping[str, Any] | None = None

    @property
    def title(self) -> str:
        return "End" if self.final else f"Cut {self.number}"

    @property
    def mark(self) -> str:
        """The label of its vertical line in the charts."""
        if self.final:
            return "end"
        return f"cut {self.number}: keep {self.keep if self.keep is not None else '?'}" + (
            f" + {self.clones} clone{'s' if self.clones > 1 else ''}" if self.clones else ""
        )


def score_key(score: Mapping[str, Any]) -> tuple[float, float]:
    """The order a population ranks scores in (``EvalRecord.score``): win rate first, then mean return."""
    rec = score.get("record") or {}
    win, ret = rec.get("win_rate"), rec.get("mean_return")
    return (
        float(win) if isinstance(win, int | float) else -math.inf,
        float(ret) if isinstance(ret, int | float) else -math.inf,
    )


def population_config(run: RunData) -> dict[str, Any]:
    """The run's ``population:`` settings and ``timesteps`` from its config.yaml (``{}`` when unreadable)."""
    try:
        config = yaml.safe_load(run.config_text or "") or {}
    except yaml.YAMLError:
        return {}
    if not isinstance(config, dict):
        return {}
    pop = config.get("population") if isinstance(config.get("population"), dict) else {}
    return {**pop, "timesteps": config.get("timesteps")}


def target_steps(run: RunData) -> float:
    """The env steps each member trains to (NaN when not recorded)."""
    for value in (run.metadata.get("target_timesteps"), population_config(run).get("timesteps")):
        if isinstance(value, int | float):
            return float(value)
    return math.nan


def stages(run: RunData) -> list[Stage]:
    """Every cut, then the end: the planned ones from config.yaml, each with its record once made."""
    made = [c for c in run.population.get("cuts") or [] if isinstance(c, Mapping)]
    planned = [c for c in population_config(run).get("cuts") or [] if isinstance(c, Mapping)]
    target = target_steps(run)
    out: list[Stage] = []
    for i, c in enumerate(planned):
        out.append(Stage(i + 1, float(c.get("at", math.nan)), c.get("keep"), int(c.get("clones") or 0), False))
    out.append(Stage(len(planned) + 1, target, 1, 0, True))
    if len(made) > len(out):  # a configuration that no longer says what was run: trust the records
        out = [
            Stage(i + 1, math.nan, len(c.get("kept") or []), len(c.get("clones") or []), i == len(made) - 1)
            for i, c in enumerate(made)
        ]
    for stage, record in zip(out, made):
        stage.record = record
        stage.step = float(record.get("step", stage.step))
    return out


def load_members(run: RunData) -> list[Member]:
    """The run's members in the order they were made, each with its colour, origin and fate."""
    entries = [m for m in run.population.get("members") or [] if isinstance(m, Mapping) and m.get("name")]
    all_stages = stages(run)
    members: list[Member] = []
    for k, entry in enumerate(entries):
        name = str(entry["name"])
        path = run.path / MEMBERS_DIR / name
        member = Member(name, PALETTE[k % len(PALETTE)], load_run(path, with_frames=False) if path.is_dir() else None)
        member.seed = entry.get("seed")
        member.origin = f"seed {member.seed}" if member.seed is not None else ""
        drawn_at = entry.get("drawn_at")
        if isinstance(drawn_at, int | float):  # drawn at a cut whose best member won too little
            member.origin += f", drawn at {fmt_steps(float(drawn_at))}"
        if entry.get("clone_of"):
            member.clone_of = str(entry["clone_of"])
            step = entry.get("step")
            member.clone_step = float(step) if isinstance(step, int | float) else None
            member.branch_step = _branch_step(all_stages, member.clone_of, member.clone_step)
            member.origin = f"clone of {member.clone_of} at {fmt_steps(member.clone_step)}" + (
                f", seed {member.seed}" if member.seed is not None else ""
            )
        members.append(member)
    _fates(members, all_stages, run.status)
    return members


def _branch_step(all_stages: Sequence[Stage], source: str, step: float | None) -> float | None:
    """The step of the checkpoint a clone started from: its source's scored model at that cut (the cut's step when
    that score is missing)."""
    for stage in all_stages:
        if stage.record is None or stage.step != step:
            continue
        for score in stage.record.get("scores") or []:
            rec = score.get("record") or {}
            if score.get("member") == source and isinstance(rec.get("timesteps"), int | float):
                return float(rec["timesteps"])
    return step


def _fates(members: list[Member], all_stages: Sequence[Stage], status: str) -> None:
    """Set each member's fate: what the last recorded stage that names it made of it, else its run's status."""
    by_name = {m.name: m for m in members}
    for stage in all_stages:
        if stage.record is not None:
            _stage_fates(by_name, stage, stage.record)
    for m in members:
        if not m.fate:
            member_status = m.run.status if m.run is not None else "waiting"
            m.fate = "training" if status == "running" and member_status == "running" else member_status


def _stage_fates(by_name: Mapping[str, Member], stage: Stage, rec: Mapping[str, Any]) -> None:
    """Set the fate that one stage's record gives the members it names: failed or cut there, or at the end the winner
    and the runners-up."""
    at = fmt_steps(stage.step)
    for name in rec.get("failed") or []:
        if name in by_name:
            by_name[name].fate = f"failed at {at}"
    kept = set(rec.get("kept") or [])
    for score in rec.get("scores") or []:
        m = by_name.get(str(score.get("member")))
        if m is not None and not stage.final and m.name not in kept:
            m.fate = f"cut at {at}"
    if stage.final:
        best = (rec.get("best") or {}).get("member")
        for score in rec.get("scores") or []:
            m = by_name.get(str(score.get("member")))
            if m is not None:
                m.fate = "winner" if m.name == best else "runner-up"


def branch_rows(x: np.ndarray, start: float | None) -> np.ndarray:
    """The rows of a clone's own curve: from the last copied row at or before its branch step (a point on its
    source's curve, so the line leaves the source's there) on. Every row for other members."""
    if start is None:
        return np.ones(len(x), dtype=bool)
    before = x[np.isfinite(x) & (x <= start)]
    anchor = float(before.max()) if len(before) else -math.inf
    return np.isfinite(x) & (x >= anchor)


__all__ = ["Member", "Stage", "branch_rows", "load_members", "stages"]
