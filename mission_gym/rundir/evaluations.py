"""``evaluations.csv``: one row per in-training evaluation of a run (:class:`EvalRecord`), appended as it is made;
read back by a resumed run (its best so far), a population's cuts and the dashboards.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mission_gym.rundir.files import atomic_open

#: the file's name in a run directory
EVALUATIONS = "evaluations.csv"
#: its columns, in order
EVAL_COLUMNS = (
    "timesteps",
    "win_rate",
    "mean_return",
    "std_return",
    "mean_ep_length",
    "n_episodes",
    "win_ci_low",
    "win_ci_high",
    "eval_s",
)


@dataclass
class EvalRecord:
    """One evaluation, as written to ``evaluations.csv``."""

    timesteps: int
    mean_return: float
    std_return: float
    mean_ep_length: float
    n_episodes: int
    win_rate: float | None = None
    win_ci_low: float | None = None
    win_ci_high: float | None = None
    eval_s: float = 0.0
    outcomes: dict[str, int] = field(default_factory=dict)
    #: wins and games by the defenders' modes (``guard_objective+patrol``: [wins, games]); not a column of the file
    by_situation: dict[str, list[int]] = field(default_factory=dict)

    def row(self) -> dict[str, Any]:
        return {k: ("" if getattr(self, k) is None else getattr(self, k)) for k in EVAL_COLUMNS}

    def win_text(self, decimals: int = 0) -> str:
        """The win rate and its 95% interval as a summary line says them (``win rate 13% (0.09-0.18)``, two spaces
        after); empty for an env without a win rate.

        :param decimals: of the percentage
        """
        if self.win_rate is None:
            return ""
        return f"win rate {100 * self.win_rate:.{decimals}f}% ({self.win_ci_low:.2f}-{self.win_ci_high:.2f})  "

    def score(self) -> tuple[float, float]:
        """What "best" means: win rate first (Mission Gym), then mean return."""
        return (self.win_rate if self.win_rate is not None else -math.inf, self.mean_return)


def read_eval_records(path: Path) -> list[dict[str, str]]:
    """The rows of ``evaluations.csv``, without a last row that a kill cut short (no newline at its end)."""
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        text = f.read()
    if text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    return list(csv.DictReader(io.StringIO(text, newline="")))


def append_record(path: Path, rec: EvalRecord) -> None:
    """Append an evaluation's row (the header first, to a new file)."""
    new_file = not path.is_file()
    with open(path, "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=EVAL_COLUMNS)
        if new_file:
            writer.writeheader()
        writer.writerow(rec.row())


def best_score(path: Path) -> tuple[float, float] | None:
    """The best :meth:`EvalRecord.score` among the file's rows (None without a readable one)."""
    best = None
    for row in read_eval_records(path):
        try:
            win = float(row["win_rate"]) if row.get("win_rate") else -math.inf
            score = (win, float(row["mean_return"]))
        except (KeyError, ValueError):
            continue
        best = score if best is None else max(best, score)
    return best


def drop_rows_after(path: Path, step: int) -> None:
    """Rows a killed process wrote after the checkpoint a run resumes from are dropped, so its curves continue; so
    is a last row a kill cut short. The file is replaced atomically."""
    if not path.is_file():
        return
    rows = [r for r in read_eval_records(path) if _int(r.get("timesteps")) <= step]
    with atomic_open(path, "w") as f:
        writer = csv.DictWriter(f, fieldnames=EVAL_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def _int(value: Any) -> int:
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return 0
