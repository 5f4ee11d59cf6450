"""A page per launch of the launcher (``runs/_launches/<date-time>/index.html``): every job's curves side by side on
shared axes, and the launch's summary table.

The launcher writes ``summary.json`` next to its jobs' logs when the launch ends (``mission_gym.launch.report``);
each job's curves come from its run directory. ``scripts/launch.py`` writes the page then, and
``python -m mission_gym.scripts.dashboard`` rewrites it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np

from mission_gym.dashboard.charts import PALETTE, Series, fmt_num, line_chart
from mission_gym.dashboard.layout import cards, charts_grid, esc, fmt, fmt_duration, page, status_badge, swatch
from mission_gym.dashboard.runs import RunData, col, eval_points, is_run_dir, load_run, parse_time
from mission_gym.rundir.files import atomic_write_text, read_json

LAUNCHES_DIR = "_launches"
SUMMARY_FILE = "summary.json"
LAUNCH_PAGE = "index.html"
DASHBOARD_FILE = "dashboard.html"


def is_launch_dir(path: str | Path) -> bool:
    """Whether ``path`` is a launch's directory with its ``summary.json``."""
    return (Path(path) / SUMMARY_FILE).is_file()


def list_launches(runs_dir: str | Path) -> list[Path]:
    """The launches under ``runs_dir/_launches`` that have ended (written their summary), oldest first."""
    root = Path(runs_dir) / LAUNCHES_DIR
    if not root.is_dir():
        return []
    return sorted((p for p in root.iterdir() if is_launch_dir(p)), key=lambda p: p.name)


@dataclass
class LaunchJob:
    """One job of a launch: its ``summary.json`` entry, and its run when the directory is there."""

    info: Mapping[str, Any]
    color: str
    run: RunData | None

    @property
    def name(self) -> str:
        return str(self.info.get("name") or "?")

    @property
    def env(self) -> str:
        meta = self.run.metadata if self.run is not None else {}
        return str(meta.get("env_id") or meta.get("env") or "")

    def progress(self, column: str) -> float:
        """A column's last value: from the run's progress.csv, else what the launcher saw last."""
        if self.run is not None and math.isfinite(v := self.run.last(column)):
            return v
        last = self.info.get("last_progress") or {}
        try:
            return float(last.get(column, "nan"))
        except (TypeError, ValueError):
            return math.nan


def _run_dir(launch_dir: Path, info: Mapping[str, Any]) -> Path | None:
    """A job's run directory: where the summary says, else under the runs directory the launch is in (a copied or
    moved ``runs/``)."""
    recorded = Path(str(info.get("run_dir") or ""))
    for candidate in (recorded, launch_dir.parent.parent / str(info.get("name") or "")):
        if str(candidate) not in ("", ".") and is_run_dir(candidate):
            return candidate
    return None


def load_launch(launch_dir: str | Path) -> tuple[dict[str, Any], list[LaunchJob]]:
    """The launch's summary and its jobs, each with its run's data."""
    launch_dir = Path(launch_dir)
    summary = read_json(launch_dir / SUMMARY_FILE)
    jobs = []
    for k, info in enumerate(j for j in summary.get("jobs") or [] if isinstance(j, Mapping)):
        path = _run_dir(launch_dir, info)
        jobs.append(LaunchJob(info, PALETTE[k % len(PALETTE)], load_run(path, with_frames=False) if path else None))
    return summary, jobs


def _rel(target: Path, start: Path) -> str:
    return quote(Path(os.path.relpath(target, start)).as_posix())


def _job_link(job: LaunchJob, launch_dir: Path) -> str:
    if job.run is not None and (job.run.path / DASHBOARD_FILE).is_file():
        return f'<a href="{esc(_rel(job.run.path / DASHBOARD_FILE, launch_dir))}">{esc(job.name)}</a>'
    return esc(job.name)


def launch_wall_s(jobs: Sequence[LaunchJob]) -> float:
    """From the first job's start to the last one's end (the longest job when the summary has no times)."""
    starts = [t for j in jobs if (t := parse_time(j.info.get("started"))) is not None]
    ends = [t for j in jobs if (t := parse_time(j.info.get("ended"))) is not None]
    if starts and ends:
        return max(ends) - min(starts)
    seconds = [float(s) for j in jobs if isinstance(s := j.info.get("seconds"), int | float)]
    return max(seconds) if seconds else math.nan


def job_charts(jobs: Sequence[LaunchJob]) -> list[str]:
    """The jobs' curves on shared axes, one colour each: evaluations, rollout return and win rate, throughput."""
    runs = [(j, j.run) for j in jobs if j.run is not None]
    targets = [float(t) for j in jobs if isinstance(t := j.info.get("total_steps"), int | float)]
    shared: dict[str, Any] = {"x_range": (0.0, max(targets) if targets else None)}
    pct: dict[str, Any] = {"y_range": (0.0, 1.0), "y_fmt": "percent"}
    wins = any(col(eval_points(r), "win_rate") is not None or col(r.progress, "mission/win_rate") is not None for _, r in runs)
    key = "win_rate" if wins else "mean_return"
    evals = []
    for j, r in runs:
        ev = eval_points(r)
        if "timesteps" in ev and key in ev:
            evals.append(Series(j.name, ev["timesteps"], ev[key], kind="trace", color=j.color))
    title = "In-training evaluation win rate" if wins else "In-training evaluation return"
    charts = [line_chart(evals, title, chart_id="jobs_eval", **shared, **(pct if wins else {}))]
    for column, title, chart_id, extra in (
        ("rollout/ep_rew_mean", "Rollout return (mean)", "jobs_return", {}),
        ("mission/win_rate", "Rollout win rate", "jobs_win_rate", pct),
        ("time/fps", "Training throughput (FPS)", "jobs_fps", {}),
    ):
        if column == "mission/win_rate" and not wins:
            continue
        series = [Series(j.name, r.timesteps, v, color=j.color) for j, r in runs if (v := col(r.progress, column)) is not None]
        charts.append(line_chart(series, title, chart_id=chart_id, **shared, **extra))
    return charts


def _best_eval(job: LaunchJob, key: str) -> float:
    ev = eval_points(job.run) if job.run is not None else {}
    values = ev.get(key, np.zeros(0))
    return float(np.nanmax(values)) if np.isfinite(values).any() else math.nan


def jobs_table(jobs: Sequence[LaunchJob], launch_dir: Path) -> str:
    """The launch's summary table: state, exit, steps, win rate, time, cores or node and device, the reason for a
    failure and each job's log."""
    groups = any(j.info.get("group") for j in jobs)
    rows = []
    for j in jobs:
        info = j.info
        steps, total = j.progress("time/total_timesteps"), info.get("total_steps")
        steps_text = fmt(steps) + (f" / {fmt_num(float(total))}" if isinstance(total, int | float) else "")
        where = info.get("node") or ",".join(map(str, info.get("cores") or []))
        if info.get("device"):
            where = f"{where} {info['device']}".strip()
        code = info.get("returncode")
        log = Path(str(info.get("log") or launch_dir / f"{j.name}.log"))
        log_cell = f'<a href="{esc(quote(log.name))}">{esc(log.name)}</a>' if (launch_dir / log.name).is_file() else ""
        seconds = info.get("seconds")
        rows.append(
            f"<tr><td>{swatch(j.color)}{_job_link(j, launch_dir)}</td>"
            + (f"<td>{esc(info.get('group') or '')}</td>" if groups else "")
            + f"<td class='num'>{esc('' if info.get('seed') is None else info['seed'])}</td>"
            f"<td>{status_badge(str(info.get('state') or 'unknown'))}</td>"
            f"<td class='num'>{esc('' if code is None else code)}</td><td class='num'>{esc(steps_text)}</td>"
            f"<td class='num'>{esc(fmt(j.progress('mission/win_rate'), percent=True))}</td>"
            f"<td class='num'>{esc(fmt(_best_eval(j, 'win_rate'), percent=True))}</td>"
            f"<td class='num'>{esc(fmt(j.progress('rollout/ep_rew_mean')))}</td>"
            f"<td class='num'>{esc(fmt(j.progress('time/fps')))}</td>"
            f"<td class='num'>{esc(fmt_duration(float(seconds)) if isinstance(seconds, int | float) else '–')}</td>"
            f"<td>{esc(where)}</td><td>{log_cell}</td><td>{esc(info.get('reason') or '')}</td></tr>"
        )
    return (
        "<table><tr><th>job</th>" + ("<th>group</th>" if groups else "") + "<th>seed</th><th>state</th><th>exit</th>"
        "<th>timesteps</th><th>win rate</th><th>best eval</th><th>return</th><th>FPS</th><th>time</th>"
        "<th>cores / device</th><th>log</th><th>reason</th></tr>" + "".join(rows) + "</table>"
    )


def launch_page(launch_dir: str | Path) -> str:
    """The HTML of one launch's page."""
    launch_dir = Path(launch_dir)
    summary, jobs = load_launch(launch_dir)
    states: dict[str, int] = {}
    for j in jobs:
        states[str(j.info.get("state"))] = states.get(str(j.info.get("state")), 0) + 1
    tally = ", ".join(f"{n} {s}" for s, n in states.items())
    verdict = "all succeeded" if summary.get("all_succeeded") else "not all succeeded"
    header = (
        f"<h1>Launch {esc(launch_dir.name)}</h1><div class='sub'>{len(jobs)} job{'s' if len(jobs) != 1 else ''}: "
        f'{esc(tally or "none")} · {esc(verdict)} · <a href="../../index.html">all runs</a></div>'
    )
    seconds = [float(s) for j in jobs if isinstance(s := j.info.get("seconds"), int | float)]
    steps = sum(v for j in jobs if math.isfinite(v := j.progress("time/total_timesteps")))
    body = [
        cards(
            [
                ("jobs", str(len(jobs)), tally),
                ("wall time", fmt_duration(launch_wall_s(jobs)), "first start to last end"),
                ("job time", fmt_duration(sum(seconds)) if seconds else "–", "summed over the jobs"),
                ("env steps, all jobs", fmt(steps), ""),
            ]
        )
    ]
    envs = sorted({j.env for j in jobs if j.run is not None})
    for env in envs:  # returns of different envs are not comparable: one set of charts per env
        title = "Side by side" + (f" · {env}" if len(envs) > 1 and env else "")
        body.append(
            f"<h2>{esc(title)}</h2>" + charts_grid(job_charts([j for j in jobs if j.run is not None and j.env == env]))
        )
    if not envs:
        body.append("<p class='muted'>None of the jobs' run directories is there.</p>")
    body.append("<h2>Summary</h2>" + jobs_table(jobs, launch_dir))
    return page(f"Launch {launch_dir.name} · Mission Gym", header, "".join(body))


def write_launch_page(launch_dir: str | Path) -> Path:
    """Write ``<launch_dir>/index.html``.

    :raises FileNotFoundError: when the launch has no ``summary.json`` (it has not ended)
    """
    launch_dir = Path(launch_dir)
    if not is_launch_dir(launch_dir):
        raise FileNotFoundError(f"{str(launch_dir)!r} holds no {SUMMARY_FILE}: not a launch that has ended")
    out = launch_dir / LAUNCH_PAGE
    atomic_write_text(out, launch_page(launch_dir), durable=False)
    return out


def _tally_badges(states: Mapping[str, int]) -> str:
    """``2 done`` and ``1 failed`` as badges coloured by state."""
    return " ".join(f'<span class="badge {esc(s)}">{n} {esc(s)}</span>' for s, n in states.items())


def launches_table(runs_dir: str | Path) -> str:
    """The runs index's list of launches, newest first (empty when there are none)."""
    runs_dir = Path(runs_dir)
    rows = []
    for launch in reversed(list_launches(runs_dir)):
        summary = read_json(launch / SUMMARY_FILE)
        jobs = [j for j in summary.get("jobs") or [] if isinstance(j, Mapping)]
        states: dict[str, int] = {}
        for j in jobs:
            states[str(j.get("state"))] = states.get(str(j.get("state")), 0) + 1
        href = f"{LAUNCHES_DIR}/{quote(launch.name)}/{LAUNCH_PAGE}"
        name = f'<a href="{esc(href)}">{esc(launch.name)}</a>' if (launch / LAUNCH_PAGE).is_file() else esc(launch.name)
        wall = launch_wall_s([LaunchJob(j, "", None) for j in jobs])
        names = ", ".join(str(j.get("name")) for j in jobs)
        rows.append(
            f"<tr><td>{name}</td><td class='num'>{len(jobs)}</td>"
            f"<td>{_tally_badges(states)}</td>"
            f"<td class='num'>{esc(fmt_duration(wall))}</td><td>{esc(names)}</td></tr>"
        )
    if not rows:
        return ""
    return (
        "<table><tr><th>launch</th><th>jobs</th><th>states</th><th>wall time</th><th>runs</th></tr>"
        + "".join(rows)
        + "</table>"
    )
