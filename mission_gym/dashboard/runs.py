"""Reading a run directory's files for the dashboards, tolerant of runs that are still being written.

Any file may be missing, half-written or from an older version; what cannot be read is left out
rather than failing the page.
"""

from __future__ import annotations

import csv
import io
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from mission_gym.rundir.files import TIME_FORMAT, read_json

RUN_MARKERS: tuple[str, ...] = ("config.yaml", "metadata.json", "lineage.json", "progress.csv")
FRAMES_DIR = "frames"
POPULATION_FILE = "population.json"  # what makes a run directory a population run (launch/population.py writes it)
MEMBERS_DIR = "members"


@dataclass
class _CsvCache:
    header: str
    columns: list[str]
    offset: int
    rows: list[np.ndarray]  # parsed rows, one float array each
    tail: bytes = b""  # the bytes just before ``offset``, to notice a file rewritten in place


_CSV_CACHE: dict[str, _CsvCache] = {}


def _to_float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        if text.strip().lower() in ("true", "false"):
            return 1.0 if text.strip().lower() == "true" else 0.0
        return math.nan


def read_csv_columns(path: str | Path) -> dict[str, np.ndarray]:
    """Columns of a CSV file as float arrays (NaN where a cell is empty or not a number).

    Rows appended since the previous call are parsed incrementally (SB3's CSV logger appends, and
    rewrites the whole file only when a new key appears), so refreshing during training stays cheap.

    :param path: the CSV file
    :return: column name -> values; empty when the file is missing or empty
    """
    path = Path(path)
    key = str(path.resolve())
    try:
        with open(path, "rb") as f:
            header = f.readline()
            if not header.endswith(b"\n"):
                return {}
            cached = _current_cache(f, key, header)
            f.seek(cached.offset)
            new = f.read()
    except OSError:
        return {}
    _append_rows(cached, new)
    _CSV_CACHE[key] = cached
    if not cached.rows:
        return {c: np.zeros(0) for c in cached.columns}
    table = np.vstack(cached.rows)
    return {c: table[:, j] for j, c in enumerate(cached.columns)}


def _current_cache(f: BinaryIO, key: str, header: bytes) -> _CsvCache:
    """The cache of the open file ``f`` when the file has only grown since (same header, same bytes before the cached
    offset), else a fresh one that reads it from its first row."""
    cached = _CSV_CACHE.get(key)
    size = os.fstat(f.fileno()).st_size
    if cached is not None and size >= cached.offset and cached.tail:
        f.seek(cached.offset - len(cached.tail))
        if f.read(len(cached.tail)) != cached.tail:
            cached = None
    if cached is None or cached.header != header.decode("utf-8", "replace") or size < cached.offset:
        columns = next(csv.reader([header.decode("utf-8", "replace")]), [])
        cached = _CsvCache(header.decode("utf-8", "replace"), columns, len(header), [])
    return cached


def _append_rows(cached: _CsvCache, new: bytes) -> None:
    """Parse the complete rows of ``new`` (the bytes after the cached offset) into the cache and move its offset past
    them."""
    complete = new[: new.rfind(b"\n") + 1]  # a row still being written waits for the next call
    if not complete:
        return
    n_cols = len(cached.columns)
    for row in csv.reader(io.StringIO(complete.decode("utf-8", "replace"))):
        if row:
            values = np.full(n_cols, np.nan)
            for j, cell in enumerate(row[:n_cols]):
                if cell:
                    values[j] = _to_float(cell)
            cached.rows.append(values)
    cached.offset += len(complete)
    cached.tail = complete[-64:]


def read_text(path: str | Path, limit: int = 200_000) -> str | None:
    """The first ``limit`` characters of a text file, or ``None`` when it is missing."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(limit)
    except OSError:
        return None


def is_run_dir(path: str | Path) -> bool:
    """Whether ``path`` looks like a run directory (has any of :data:`RUN_MARKERS`)."""
    p = Path(path)
    return p.is_dir() and any((p / m).exists() for m in RUN_MARKERS)


def list_runs(runs_dir: str | Path) -> list[Path]:
    """Run directories directly under ``runs_dir``, sorted by name."""
    root = Path(runs_dir)
    if not root.is_dir():
        return []
    return sorted((p for p in root.iterdir() if is_run_dir(p)), key=lambda p: p.name)


@dataclass
class RunData:
    """What a dashboard shows of one run.

    :param name: the run's directory name
    :param path: the run directory
    """

    name: str
    path: Path
    config_text: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    lineage: dict[str, Any] = field(default_factory=dict)
    progress: dict[str, np.ndarray] = field(default_factory=dict)
    evaluations: dict[str, np.ndarray] = field(default_factory=dict)
    frames: list[Path] = field(default_factory=list)
    population: dict[str, Any] = field(default_factory=dict)  # population.json; empty for other runs

    @property
    def is_population(self) -> bool:
        """Whether this is a population run (its members under ``members/``)."""
        return bool(self.population.get("members"))

    @property
    def status(self) -> str:
        return str(self.metadata.get("status") or ("running" if self.progress else "unknown"))

    @property
    def timesteps(self) -> np.ndarray:
        """The x axis of progress.csv (``time/total_timesteps``, else the row number)."""
        steps = self.progress.get("time/total_timesteps")
        if steps is not None:
            return steps
        n = len(next(iter(self.progress.values()))) if self.progress else 0
        return np.arange(n, dtype=np.float64)

    def last(self, column: str) -> float:
        """The last finite value of a progress column (NaN if none)."""
        values = self.progress.get(column)
        if values is None:
            return math.nan
        finite = values[np.isfinite(values)]
        return float(finite[-1]) if len(finite) else math.nan


def load_run(path: str | Path, with_frames: bool = True) -> RunData:
    """Read everything the dashboards need from a run directory.

    :param path: the run directory
    :param with_frames: list the evaluation frames under ``frames/``
    """
    p = Path(path)
    run = RunData(name=p.name, path=p)
    run.config_text = read_text(p / "config.yaml")
    run.metadata = read_json(p / "metadata.json")
    run.lineage = read_json(p / "lineage.json")
    run.progress = read_csv_columns(p / "progress.csv")
    run.evaluations = read_csv_columns(p / "evaluations.csv")
    if (p / POPULATION_FILE).is_file():
        run.population = read_json(p / POPULATION_FILE)
    if with_frames and (p / FRAMES_DIR).is_dir():
        run.frames = sorted((p / FRAMES_DIR).glob("*.png"))
    return run


def col(data: Mapping[str, np.ndarray], name: str) -> np.ndarray | None:
    """A column with at least one finite value, else ``None``."""
    v = data.get(name)
    return v if v is not None and np.isfinite(v).any() else None


def eval_points(run: RunData) -> dict[str, np.ndarray]:
    """Evaluation results from evaluations.csv, else from the ``eval/*`` columns of progress.csv."""
    ev = run.evaluations
    if col(ev, "timesteps") is not None:
        keep = ("timesteps", "win_rate", "win_ci_low", "win_ci_high", "mean_return", "std_return", "n_episodes")
        return {k: v for k, v in ev.items() if k in keep}
    out = {}
    for src, dst in (("eval/win_rate", "win_rate"), ("eval/mean_return", "mean_return")):
        if (v := col(run.progress, src)) is not None:
            out["timesteps"], out[dst] = run.timesteps, v
    return out


def population_of(run_dir: str | Path) -> Path | None:
    """The population run a member's directory (``RUN/members/mK``) belongs to, or ``None`` for any other run."""
    p = Path(run_dir)
    parent = p.parent.parent
    return parent if p.parent.name == MEMBERS_DIR and (parent / POPULATION_FILE).is_file() else None


def parse_time(text: Any) -> float | None:
    """A metadata.json time as a POSIX timestamp (``None`` when missing or unreadable)."""
    if not isinstance(text, str):
        return None
    try:
        return datetime.strptime(text, TIME_FORMAT).timestamp()
    except ValueError:
        return None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) else None


def wall_seconds(run: RunData, now: float | None = None) -> tuple[float, int]:
    """How long the run has trained: ``(seconds, sessions)``, summed over its sessions in metadata.json.

    A session's ``wall_s`` when it has one (population runs), else its ``ended - started``. The session still under
    way is not listed until it ends: a population run records its start as ``session_started``; a single run's SB3
    ``time/time_elapsed`` counts from its session's start, so its last value is added when progress.csv has gone
    past the last listed session. Runs without sessions (older ones) fall back to ``time/time_elapsed``.

    :param now: the time a running session is measured up to (default: now)
    """
    meta = run.metadata
    sessions = [s for s in meta.get("sessions") or [] if isinstance(s, Mapping)]
    total, counted, last_end, last_steps = 0.0, 0, None, 0.0
    for s in sessions:
        start, end = parse_time(s.get("started")), parse_time(s.get("ended"))
        wall = _number(s.get("wall_s"))
        if wall is None and start is not None and end is not None:
            wall = max(0.0, end - start)
        if wall is not None:
            total, counted = total + wall, counted + 1
        last_end = end if end is not None else last_end
        last_steps = _number(s.get("end_timesteps")) or last_steps
    if run.status == "running":
        current = parse_time(meta.get("session_started"))
        if current is None and not sessions:
            current = parse_time(meta.get("started")) if run.is_population else None
        if current is not None and (last_end is None or current >= last_end):
            return total + max(0.0, (time.time() if now is None else now) - current), counted + 1
        steps = run.last("time/total_timesteps")
        elapsed = run.last("time/time_elapsed")
        if math.isfinite(steps) and steps > last_steps and math.isfinite(elapsed):
            return total + elapsed, counted + 1
    if counted:
        return total, counted
    start, end = parse_time(meta.get("started")), parse_time(meta.get("ended"))
    if run.is_population and start is not None and end is not None:  # the winner's time/time_elapsed is not the run's
        return max(0.0, end - start), 1
    elapsed = run.last("time/time_elapsed")
    return (elapsed, 1) if math.isfinite(elapsed) else (math.nan, 0)
