"""Reading a run directory's files for the dashboards, tolerant of runs that are still being written.

Any file may be missing, half-written or from an older version; what cannot be read is left out
rather than failing the page.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

RUN_MARKERS: tuple[str, ...] = ("config.yaml", "metadata.json", "lineage.json", "progress.csv")
FRAMES_DIR = "frames"


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
            cached = _CSV_CACHE.get(key)
            size = os.fstat(f.fileno()).st_size
            if cached is not None and size >= cached.offset and cached.tail:
                f.seek(cached.offset - len(cached.tail))
                if f.read(len(cached.tail)) != cached.tail:
                    cached = None
            if cached is None or cached.header != header.decode("utf-8", "replace") or size < cached.offset:
                columns = next(csv.reader([header.decode("utf-8", "replace")]), [])
                cached = _CsvCache(header.decode("utf-8", "replace"), columns, len(header), [])
            f.seek(cached.offset)
            new = f.read()
    except OSError:
        return {}
    complete = new[: new.rfind(b"\n") + 1]  # a row still being written waits for the next call
    n_cols = len(cached.columns)
    if complete:
        for row in csv.reader(io.StringIO(complete.decode("utf-8", "replace"))):
            if row:
                values = np.full(n_cols, np.nan)
                for j, cell in enumerate(row[:n_cols]):
                    if cell:
                        values[j] = _to_float(cell)
                cached.rows.append(values)
        cached.offset += len(complete)
        cached.tail = complete[-64:]
    _CSV_CACHE[key] = cached
    if not cached.rows:
        return {c: np.zeros(0) for c in cached.columns}
    table = np.vstack(cached.rows)
    return {c: table[:, j] for j, c in enumerate(cached.columns)}


def read_json(path: str | Path) -> dict[str, Any]:
    """A JSON object from ``path``; ``{}`` when missing or unreadable (e.g. mid-write)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {"value": data}


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
    if with_frames and (p / FRAMES_DIR).is_dir():
        run.frames = sorted((p / FRAMES_DIR).glob("*.png"))
    return run
