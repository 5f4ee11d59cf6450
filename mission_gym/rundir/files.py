"""Writing a run's files so that a killed or starved process never leaves half of one: every file is written to a
temporary name, flushed to disk and renamed over its path; a leftover temporary file of a writer that died is found
and deleted by :func:`remove_stale_temps`. JSON files are read forgivingly (a missing or half-written one is ``{}``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

TEMP_PATTERN = re.compile(r"^\..+\.tmp(\d+)$")


def temp_path(path: Path) -> Path:
    """Where a file is written before it is renamed over ``path``: a hidden name no reader looks for, with the
    writer's pid (so a leftover of a killed writer can be told from one being written)."""
    return path.with_name(f".{path.name}.tmp{os.getpid()}")


def _fsync_dir(path: Path) -> None:
    """Make a rename in ``path`` durable (a power cut after it then keeps the new file, not an empty name)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # the file is in place already; some filesystems cannot sync a directory
    finally:
        os.close(fd)


def _flush_to_disk(f: IO[Any], path: Path) -> None:
    """Flush a file being written for ``path`` to the disk; errors name ``path`` (a full disk often shows here)."""
    try:
        f.flush()
        os.fsync(f.fileno())
    except OSError as exc:
        if exc.filename is None:
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise


def atomic_save_all(files: Sequence[tuple[str | Path, Callable[[IO[Any]], None]]], mode: str = "wb") -> None:
    """Write several files atomically: each is written to a temporary name and flushed to disk, and only when all
    are there are they renamed over their paths (in order), so an error (a full disk) or a kill leaves every path
    as it was before. Nothing of a failed attempt is left behind.

    :param files: ``(path, write(file_object))`` pairs
    :param mode: ``wb`` (binary) or ``w`` (text)
    :raises OSError: the first error, naming the file it happened on
    """
    staged: list[tuple[Path, Path]] = []
    try:
        for target, write in files:
            path = Path(target)
            staged.append((temp_path(path), path))
            with open(staged[-1][0], mode) as f:
                write(f)
                _flush_to_disk(f, path)
        for tmp, path in staged:
            os.replace(tmp, path)
        for parent in dict.fromkeys(path.parent for _, path in staged):
            _fsync_dir(parent)
    finally:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "wb", encoding: str | None = None, durable: bool = True) -> Iterator[IO[Any]]:
    """Open a temporary file next to ``path``; on success it is renamed over ``path`` (on an error nothing changes
    and the temporary file is deleted).

    :param durable: flush the file and the rename to the disk first (a run's own files); a page that is rewritten
        every few seconds from them (a dashboard) is only renamed, so a reader never sees half of it
    """
    path = Path(path)
    tmp = temp_path(path)
    try:
        with open(tmp, mode, encoding=encoding) as f:
            yield f
            if durable:
                _flush_to_disk(f, path)
        os.replace(tmp, path)
        if durable:
            _fsync_dir(path.parent)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write_text(path: str | Path, text: str, durable: bool = True) -> None:
    """Write a UTF-8 text file atomically (a run's YAML and JSON files; the dashboards' pages, not ``durable``)."""
    with atomic_open(path, "w", encoding="utf-8", durable=durable) as f:
        f.write(text)


def atomic_copy(src: str | Path, dst: str | Path) -> None:
    """Copy a file atomically (its modification time too): ``dst`` is the old file or the whole new one."""
    import shutil

    with open(src, "rb") as source:
        atomic_save_all([(dst, lambda f: shutil.copyfileobj(source, f))])
    shutil.copystat(src, dst)


def remove_stale_temps(directory: Path) -> list[Path]:
    """Delete the temporary files (:func:`temp_path`) that writers killed mid-write left in ``directory``; files of
    a writer still alive are left alone. Returns the paths deleted."""
    import psutil

    removed: list[Path] = []
    if not directory.is_dir():
        return removed
    for p in directory.iterdir():
        match = TEMP_PATTERN.match(p.name)
        if match and not psutil.pid_exists(int(match.group(1))):
            p.unlink(missing_ok=True)
            removed.append(p)
    return removed


def write_json(path: str | Path, data: dict[str, Any]) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, default=str) + "\n")


def read_json(path: str | Path) -> dict[str, Any]:
    """A JSON object from ``path``; ``{}`` when missing or unreadable (e.g. written by an older version, or cut short
    by a full disk), ``{"value": data}`` for JSON that is not an object."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {"value": data}


#: how a run's files record times (``metadata.json``, the lock, a launch's summary)
TIME_FORMAT = "%Y-%m-%dT%H:%M:%S%z"


def now(seconds: float | None = None) -> str:
    """The local time (``seconds`` since the epoch, default now) as a run's files record it."""
    return time.strftime(TIME_FORMAT, time.localtime(seconds))
