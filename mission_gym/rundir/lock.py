"""One writer per run: whatever writes a run directory (training, resuming, a branch's new run, a population and
each of its members, a launcher's job) holds an exclusive lock on its ``.lock`` file first.

The lock is ``flock`` on ``RUN/.lock``, so the kernel drops it when its holder ends however it ends (``kill -9``
included) and a stale lock never blocks a run. The file holds JSON naming the holder (pid, host, command, since
when), for the message that refuses a second writer; a holder that ends cleanly empties it, so finding it filled
when the lock is free means its holder died, which the taker reports. Read-only commands (``evaluate``, the
dashboards, ``record_video``) never take it. The file is never deleted or replaced: a process that opened the old
file and one that made a new one could then both hold "the" lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path
from typing import IO, Any

from mission_gym.config.yaml_io import ConfigError
from mission_gym.rundir.files import now

LOCK_FILE = ".lock"
#: how long a refused process waits for a holder that has the lock but has not written its name yet
_NAME_WAIT_S = 1.0


class RunLocked(ConfigError):
    """The run is being written by another process (the message names it)."""


def describe_holder(holder: dict[str, Any]) -> str:
    """``pid 123 on host since 2024-05-01T10:00:00+0000 (python -m ...)`` for a lock file's record."""
    command = str(holder.get("command") or "?").replace("\n", " ")
    return f"pid {holder.get('pid', '?')} on {holder.get('host', '?')} since {holder.get('since', '?')} ({command})"


def _read_record(f: IO[str]) -> dict[str, Any]:
    f.seek(0)
    try:
        data = json.loads(f.read() or "{}")
    except ValueError:  # cut short by a kill while it was written, or being written now
        return {}
    return data if isinstance(data, dict) else {}


class RunLock:
    """The exclusive lock of one run directory, held from :meth:`acquire` until :meth:`release` or the end of the
    process.

    :param run_dir: the run directory (it must exist)
    :param command: what the holder runs, for the message another process gets (default: this process's argv)
    """

    def __init__(self, run_dir: str | Path, command: str | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_FILE
        self.command = command or shlex.join(sys.argv)
        self._file: IO[str] | None = None

    @property
    def held(self) -> bool:
        return self._file is not None

    def acquire(self) -> str | None:
        """Take the lock; returns a line describing the holder it took over from (one that died holding it), else
        None.

        :raises RunLocked: when another process holds it, naming that process
        """
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        f = os.fdopen(fd, "r+")
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_record(f)
            deadline = time.monotonic() + _NAME_WAIT_S
            while not holder and time.monotonic() < deadline:  # it has just taken the lock: its name follows
                time.sleep(0.05)
                holder = _read_record(f)
            f.close()
            who = describe_holder(holder) if holder else "another process"
            raise RunLocked(
                f"run {str(self.run_dir)!r} is being written by {who}; wait for it to end or stop it "
                f"(kill {holder.get('pid', 'PID')}), then try again"
            ) from None
        except BaseException:
            f.close()
            raise
        previous = _read_record(f)
        record = {"pid": os.getpid(), "host": platform.node(), "command": self.command, "since": now()}
        try:
            f.seek(0)
            f.truncate()
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())
        except BaseException:
            f.close()
            raise
        self._file = f
        if previous and (previous.get("pid"), previous.get("host")) != (record["pid"], record["host"]):
            return f"{self.run_dir} was locked by {describe_holder(previous)}, which no longer holds it; taking it over"
        return None

    def release(self) -> None:
        """Empty the lock file (a clean end) and unlock it; nothing when not held."""
        f, self._file = self._file, None
        if f is None:
            return
        with contextlib.suppress(OSError):  # a full disk must not keep the lock: closing drops it anyway
            f.seek(0)
            f.truncate()
            f.flush()
        f.close()

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def lock_run(run_dir: str | Path, command: str | None = None) -> RunLock:
    """Take a run directory's lock (see :class:`RunLock`), printing a line when it takes over a dead holder's.

    :raises RunLocked: when another process holds it
    """
    lock = RunLock(run_dir, command)
    note = lock.acquire()
    if note:
        print(f"note: {note}", flush=True)
    return lock
