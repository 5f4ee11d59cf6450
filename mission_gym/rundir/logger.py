"""SB3's logger writing a run's ``progress.csv`` and ``tb/``, continuing both cleanly when a run resumes.

A resumed run restarts from its newest checkpoint, which is older than the last rows a killed process wrote:
those rows are dropped from ``progress.csv`` and hidden in TensorBoard (``purge_step``), so both step axes
continue from the checkpoint with no reset and no overlap.

``progress.csv`` has one row per step count, and a row holds its rollout, the update made of it and the evaluation
that followed that update: SB3 logs those values (``train/*``, the trainer's ``time/train_s``, ``eval/*``) with the
next rollout's, a row late, and the last ones only in a row of their own at the same step; the CSV writer puts them
in the row of the rollout they trained on, so an evaluation sits at the step ``evaluations.csv`` gives it.
TensorBoard keeps SB3's steps.
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path
from typing import IO, Any

from stable_baselines3.common.logger import (
    Figure,
    FormatUnsupportedError,
    HParam,
    Image,
    KVWriter,
    Logger,
    TensorBoardOutputFormat,
    Video,
    filter_excluded_keys,
)

from mission_gym.rundir.files import atomic_write_text

STEP_COLUMN = "time/total_timesteps"
#: what is logged after an update (SB3's train/*, the trainer's timing of it, the evaluation that follows it): it
#: belongs to the rollout the update trained on
UPDATE_KEYS = ("train/", "time/train_s", "eval/")


def _cell(value: Any) -> str:
    if isinstance(value, Video | Figure | Image | HParam):
        raise FormatUnsupportedError(["csv"], type(value).__name__.lower())
    return "" if value is None else str(value)


def _line(cells: list[str]) -> bytes:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerow(cells)
    return out.getvalue().encode()


class ResumableCSVOutputFormat(KVWriter):
    """SB3's CSV writer made safe to kill and to resume, with one row per step (see the module doc).

    Rows are appended whole (one write each); an update's values are written into the row before (its end rewritten
    in place), a wider header (a new key) by replacing the file atomically; an existing file keeps its rows up to
    ``keep_until`` steps (all are dropped when None), without a row a kill cut short.

    :param filename: the CSV file
    :param keep_until: the step the run resumes from
    """

    def __init__(self, filename: str, keep_until: int | None = None) -> None:
        self.path = Path(filename)
        self.keys: list[str] = []
        self.file: IO[bytes] | None = None
        self._last: dict[str, str] | None = None  # the newest row: an update's values and a same-step row join it
        self._last_start = 0  # where it starts in the file
        rows: list[list[str]] = []
        if keep_until is not None and self.path.is_file():
            self.keys, rows = _read_rows(self.path)
            rows = [r for r in rows if _step(r, self.keys, keep_until) <= keep_until]
        self._rewrite(rows)

    def write(self, key_values: dict[str, Any], key_excluded: dict[str, tuple[str, ...]], step: int = 0) -> None:
        values = {k: _cell(v) for k, v in filter_excluded_keys(key_values, key_excluded, "csv").items()}
        values = {k: v for k, v in values.items() if v != ""}
        last = self._last
        if last is None:
            self._append(values)
            return
        joined = {k: v for k, v in values.items() if k.startswith(UPDATE_KEYS)}
        rest = {k: v for k, v in values.items() if k not in joined}
        if rest.get(STEP_COLUMN) is not None and rest.get(STEP_COLUMN) == last.get(STEP_COLUMN):
            joined.update(rest)  # more values of the same step (a session's final evaluation)
            rest = {}
        if joined:
            self._replace_last({**last, **joined})
        if rest:
            self._append(rest)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None

    # --- the file ---------------------------------------------------------------------------------------------------
    def _row(self, values: dict[str, str]) -> list[str]:
        return [values.get(k, "") for k in self.keys]

    def _rewrite(self, rows: list[list[str]]) -> None:
        """Replace the file (header and ``rows``, padded to the header) atomically and reopen it for appending."""
        self.close()
        padded = [r + [""] * (len(self.keys) - len(r)) for r in rows]
        lines = [_line(r) for r in padded]
        text = (_line(self.keys) if self.keys else b"") + b"".join(lines)
        atomic_write_text(self.path, text.decode())
        self.file = open(self.path, "ab")
        self._last_start = len(text) - (len(lines[-1]) if lines else 0)
        self._last = dict(zip(self.keys, padded[-1])) if padded else None

    def _append(self, values: dict[str, str]) -> None:
        extra = [k for k in values if k not in self.keys]
        if extra or self.file is None:
            self.keys += extra
            self._rewrite([*_read_rows(self.path)[1], self._row(values)])
            return
        self.file.flush()
        self._last_start = os.fstat(self.file.fileno()).st_size
        self.file.write(_line(self._row(values)))  # a whole line in one write: a kill cuts at most this row short
        self.file.flush()
        self._last = dict(values)

    def _replace_last(self, values: dict[str, str]) -> None:
        extra = [k for k in values if k not in self.keys]
        if extra or self.file is None:
            self.keys += extra
            self._rewrite([*_read_rows(self.path)[1][:-1], self._row(values)])
            return
        self.file.flush()
        self.file.truncate(self._last_start)  # append mode: the next write lands here
        self.file.write(_line(self._row(values)))
        self.file.flush()
        self._last = dict(values)


def _read_rows(path: Path) -> tuple[list[str], list[list[str]]]:
    """The header and rows of a CSV file, without a last line that a kill cut short (no newline at its end)."""
    text = path.read_text()
    if text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    lines = list(csv.reader(io.StringIO(text)))
    if not lines:
        return [], []
    header = lines[0]
    return header, [r for r in lines[1:] if r and len(r) <= len(header)]


def _step(row: list[str], keys: list[str], default: float) -> float:
    """A row's step count (``default`` for a row without one)."""
    try:
        return float(row[keys.index(STEP_COLUMN)])
    except (ValueError, IndexError):
        return default


class ResumableTensorBoardOutputFormat(TensorBoardOutputFormat):
    """SB3's TensorBoard writer that hides events at or after ``purge_step`` written by an earlier process."""

    def __init__(self, folder: str, purge_step: int | None = None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        # a queue of 10 (the default) made a population's learner wait on the writer thread at every dump (each member
        # logs dozens of scalars per iteration: 3% of a 16-member batch's time on an H200); events wait at most 30 s
        self.writer = SummaryWriter(log_dir=folder, purge_step=purge_step, max_queue=1000, flush_secs=30)
        self._is_closed = False


def make_logger(run_path: Path, tensorboard: bool = True, resume_step: int | None = None) -> Logger:
    """The logger of a run: ``progress.csv`` and (unless switched off) TensorBoard events under ``tb/``.

    :param run_path: the run directory
    :param tensorboard: write TensorBoard events
    :param resume_step: the step a resumed run continues from (None for a new run)
    """
    formats: list[KVWriter] = [ResumableCSVOutputFormat(str(run_path / "progress.csv"), resume_step)]
    if tensorboard:
        purge = resume_step + 1 if resume_step is not None else None
        formats.append(ResumableTensorBoardOutputFormat(str(run_path / "tb"), purge))
    return Logger(str(run_path), formats)
