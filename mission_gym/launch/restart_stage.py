"""A cut's draws that restart from the best member's won games (``population.cuts[].redraw_restarts``): the cut's
best scored model plays and records its won games (:func:`~mission_gym.extras.restarts.record_model_states`, once,
``RUN/restart_states_<step>.npz``), and each member drawn at the cut starts a share of its games from them until the
cut (:class:`~mission_gym.settings.schema.Restarts`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mission_gym.config.yaml_io import ConfigError
from mission_gym.rundir.evaluations import EvalRecord
from mission_gym.settings.starts import RestartStage


def restart_block(
    run_dir: Path, members_dir: Path, scores: list[dict[str, Any]], step: int, stage: RestartStage
) -> dict[str, Any] | None:
    """The ``restarts`` block of a member drawn at ``step``: the best score's model's won games, recorded once; None
    when it won none."""
    from mission_gym.extras.starts import record_model_states

    best = max(scores, key=lambda s: EvalRecord(**s["record"]).score())
    out = run_dir / f"restart_states_{step}.npz"
    if not out.is_file():
        tmp = out.with_name(f".{out.stem}.partial.npz")
        try:  # the run's own checkpoint (made by this run), so its pickles are trusted as a resume's are
            record_model_states(members_dir / best["member"] / best["model"], tmp, trust_pickle=True)
        except ConfigError as exc:
            print(f"population: no restarts for the draws: {exc}", flush=True)
            return None
        tmp.replace(out)
    return {**stage.model_dump(), "states": str(out.resolve()), "until": step}


def drawn_restarts(block: dict[str, Any], recipe: Any, step: int) -> dict[str, Any] | list[dict[str, Any]]:
    """A drawn member's ``restarts``: ``block`` (the best's won games, until the cut at ``step``) and the blocks of
    its recipe's ``restarts`` that begin at the cut or later, which it goes on to train through."""
    blocks = recipe if isinstance(recipe, list) else [recipe] if recipe else []
    later = [b for b in blocks if b.get("start", 0) >= step]
    return [block, *later] if later else block
