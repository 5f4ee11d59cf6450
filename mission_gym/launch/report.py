"""What the launcher shows: each job's record, the live status table (read from each run's progress.csv)
and the final summary (also written as ``summary.json`` next to the logs)."""

from __future__ import annotations

import io
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rich.console import Console
from rich.table import Table

from mission_gym.launch.jobs import Job
from mission_gym.rundir.directory import read_last_progress
from mission_gym.rundir.files import now

#: states a job can end in, and which count as success
FINAL_STATES = ("done", "failed", "interrupted", "killed", "skipped", "cancelled")
STATE_STYLE = {
    "pending": "dim",
    "submitted": "dim",
    "running": "cyan",
    "stopping": "yellow",
    "done": "green",
    "failed": "bold red",
    "interrupted": "yellow",
    "killed": "red",
    "skipped": "red",
    "cancelled": "dim",
}


@dataclass
class JobRecord:
    """A job and what became of it."""

    job: Job
    run_dir: Path
    log_path: Path
    state: str = "pending"
    returncode: int | None = None
    pid: int | None = None
    cores: list[int] = field(default_factory=list)
    device: str | None = None
    host_mb: float = 0.0
    gpu_mb: float = 0.0
    total_steps: int | None = None
    started: float | None = None
    ended: float | None = None
    reason: str = ""
    node: str = ""
    progress: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.job.name

    @property
    def finished(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def succeeded(self) -> bool:
        return self.state == "done"

    @property
    def elapsed(self) -> float | None:
        if self.started is None:
            return None
        return (self.ended or time.time()) - self.started

    def refresh_progress(self) -> None:
        row = read_last_progress(self.run_dir / "progress.csv")
        if row:
            self.progress = row

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "state": self.state,
            "returncode": self.returncode,
            "run_dir": str(self.run_dir),
            "log": str(self.log_path),
            "seed": self.job.seed,
            "group": self.job.group or None,
            "args": list(self.job.args),
            "cores": self.cores,
            "device": self.device,
            "estimate_host_mb": round(self.host_mb),
            "estimate_gpu_mb": round(self.gpu_mb),
            "node": self.node or None,
            "started": _stamp(self.started),
            "ended": _stamp(self.ended),
            "seconds": None if self.elapsed is None else round(self.elapsed, 1),
            "total_steps": self.total_steps,
            "reason": self.reason or None,
            "last_progress": self.progress or None,
        }


def _stamp(t: float | None) -> str | None:
    """A POSIX time as metadata.json writes times, for the launch's page."""
    return None if t is None else now(t)


def log_tail(path: Path, lines: int = 20) -> list[str]:
    """The last non-empty lines of a log file."""
    try:
        with open(path, "rb") as f:
            f.seek(0, io.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            text = f.read().decode(errors="replace")
    except OSError:
        return []
    return [ln.rstrip() for ln in text.replace("\r", "\n").split("\n") if ln.strip()][-lines:]


def failure_reason(path: Path) -> str:
    """The line of a failed job's log that says why: its ``error:`` line or the traceback's last line."""
    tail = log_tail(path, 40)
    for line in reversed(tail):
        if line.startswith("error:") or "Error" in line.split(":", 1)[0]:
            return line.strip()
    return tail[-1].strip() if tail else "(empty log)"


def _num(row: dict[str, str], key: str) -> float | None:
    try:
        return float(row[key])
    except (KeyError, ValueError):
        return None


def _fmt_int(x: float | None) -> str:
    return "" if x is None else f"{x:,.0f}"


def _fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return ""
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def _steps(r: JobRecord) -> str:
    steps = _num(r.progress, "time/total_timesteps")
    if steps is None:
        return ""
    return f"{steps:,.0f}" + (f"/{r.total_steps:,}" if r.total_steps else "")


def _win(r: JobRecord) -> str:
    win = _num(r.progress, "mission/win_rate")
    win = _num(r.progress, "eval/win_rate") if win is None else win
    if win is not None:
        return f"{100 * win:.0f}%"
    ret = _num(r.progress, "rollout/ep_rew_mean")
    return "" if ret is None else f"R {ret:.1f}"


def _state(r: JobRecord) -> str:
    text = r.state if r.returncode is None or r.state == "done" else f"{r.state} ({r.returncode})"
    return f"[{STATE_STYLE.get(r.state, '')}]{text}[/]"


def status_table(records: list[JobRecord], title: str | None = None) -> Table:
    """The live table: job, state, cores/node, steps, FPS, win rate (or mean return), GPU memory, time."""
    t = Table(title=title, title_justify="left", expand=False)
    columns: tuple[tuple[str, Literal["left", "right"]], ...] = (
        ("job", "left"),
        ("state", "left"),
        ("where", "left"),
        ("steps", "right"),
        ("FPS", "right"),
        ("win", "right"),
        ("GPU MB", "right"),
        ("time", "right"),
    )
    for col, just in columns:
        t.add_column(col, justify=just, no_wrap=col != "job", overflow="fold")
    for r in records:
        where = r.node or (",".join(map(str, r.cores)) if r.cores else "")
        if r.device and r.device.startswith("cuda"):
            where += f" {r.device}"
        t.add_row(
            r.name,
            _state(r),
            where.strip(),
            _steps(r),
            _fmt_int(_num(r.progress, "time/fps")),
            _win(r),
            _fmt_int(_num(r.progress, "gpu/mem_used_mb")),
            _fmt_time(r.elapsed),
        )
    return t


def status_line(records: list[JobRecord]) -> str:
    """One line of every running job's steps (for logs, where there is no live table)."""
    return "  " + "  ".join(f"{r.name} {_steps(r) or 0}" for r in records if r.state in ("running", "stopping"))


def print_summary(console: Console, records: list[JobRecord], launch_dir: Path) -> None:
    """The final table, one line per failure naming its log, a count, and ``summary.json``."""
    t = Table(title="launch summary", title_justify="left")
    for col in ("job", "result", "exit", "time", "steps", "win", "run dir"):
        t.add_column(col, overflow="fold")
    for r in records:
        t.add_row(
            r.name,
            _state(r),
            "" if r.returncode is None else str(r.returncode),
            _fmt_time(r.elapsed),
            _steps(r),
            _win(r),
            str(r.run_dir),
        )
    console.print(t)
    for r in records:
        if r.state in ("failed", "killed", "skipped"):
            code = "" if r.returncode is None else f" (exit {r.returncode})"
            console.print(f"[bold red]{r.state}[/]: {r.name}{code}: {r.reason}", markup=True, highlight=False)
            console.print(f"  log: {r.log_path}", highlight=False, soft_wrap=True)
    counts: dict[str, int] = {}
    for r in records:
        counts[r.state] = counts.get(r.state, 0) + 1
    tally = ", ".join(f"{n} {s}" for s, n in counts.items())
    console.print(f"{len(records)} job(s): {tally}; logs and summary.json in {launch_dir}", highlight=False, soft_wrap=True)
    write_summary(records, launch_dir)


def write_summary(records: list[JobRecord], launch_dir: Path) -> Path:
    path = launch_dir / "summary.json"
    data = {"jobs": [r.to_json() for r in records], "all_succeeded": all(r.succeeded for r in records)}
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path
