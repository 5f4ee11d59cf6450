"""A population cut's distillation (``population.cuts[].distill``): the best scored model of each situation becomes
its teacher and the members that carry on learn from them (:class:`~mission_gym.settings.schema.Distill`).

A situation is a game's defenders' modes (``guard_objective+patrol``); every model scored at the cuts so far is a
candidate (the cuts' games, split by situation: ``EvalRecord.by_situation``), and a situation's teacher is the one
with the most wins there among those that played at least ``min_games`` of its games (ties: the better overall
score). Plans that different members found (a decoy against patrollers, a rush against guards) then meet in the
students, which train with PPO plus a KL term towards each game's teacher that falls to 0 over the stage's steps.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mission_gym.config.yaml_io import dump_yaml, read_yaml
from mission_gym.rundir.evaluations import EvalRecord
from mission_gym.rundir.files import atomic_write_text
from mission_gym.settings.game import DistillStage


def choose_teachers(cuts: list[dict[str, Any]], members_dir: Path, min_games: int) -> dict[str, dict[str, Any]]:
    """Each situation's teacher among every model scored at ``cuts`` whose file is still there: ``{situation:
    {"member", "model", "wins", "games"}}``."""
    best: dict[str, tuple[tuple[float, float, float], dict[str, Any]]] = {}
    for cut in cuts:
        for score in cut.get("scores", []):
            path = members_dir / score["member"] / score["model"]
            if not path.is_file():
                continue
            record = EvalRecord(**score["record"])
            for key, (wins, games) in record.by_situation.items():
                if games < min_games:
                    continue
                rank = (wins / games, *record.score())
                if key not in best or rank > best[key][0]:
                    best[key] = (rank, {"member": score["member"], "model": score["model"], "wins": wins, "games": games})
    return {key: chosen for key, (_, chosen) in sorted(best.items())}


def student_config(teachers: dict[str, dict[str, Any]], members_dir: Path, at: int, stage: DistillStage) -> dict[str, Any]:
    """The ``distill`` block of a student that starts at step ``at``: one teacher per chosen model, with its
    situations."""
    by_model: dict[str, list[str]] = {}
    for key, chosen in teachers.items():
        by_model.setdefault(str((members_dir / chosen["member"] / chosen["model"]).resolve()), []).append(key)
    return {
        "teachers": [{"model": model, "situations": sorted(keys)} for model, keys in by_model.items()],
        "kl_coef": stage.kl_coef,
        "start": at,
        "until": at + stage.steps,
    }


def make_students(members_dir: Path, names: list[str], distill: dict[str, Any]) -> None:
    """Write the ``distill`` block into each member's saved configuration (its resume builds the teachers)."""
    for name in names:
        path = members_dir / name / "config.yaml"
        atomic_write_text(path, dump_yaml({**read_yaml(path), "distill": distill}))


def describe(teachers: dict[str, dict[str, Any]]) -> list[str]:
    """One line per situation: its teacher and that teacher's wins there."""
    return [f"  {key:<33} {t['member']:>4} {t['model']:<32} {t['wins']}/{t['games']} won" for key, t in teachers.items()]


def distill_cut(members_dir: Path, cut: Any, cuts: list[dict[str, Any]], students: list[str]) -> dict[str, Any]:
    """A cut's distillation: the members that carry on (``students``) become students of each situation's best model
    scored at ``cuts`` so far (:func:`choose_teachers`); the teachers chosen (none: nobody learns from anyone)."""
    teachers = choose_teachers(cuts, members_dir, cut.distill.min_games)
    if teachers:
        make_students(members_dir, students, student_config(teachers, members_dir, cut.at, cut.distill))
        print(f"population: {', '.join(students)} learn from each situation's teacher until step "
              f"{cut.at + cut.distill.steps:,}:\n" + "\n".join(describe(teachers)), flush=True)  # fmt: skip
    return teachers
