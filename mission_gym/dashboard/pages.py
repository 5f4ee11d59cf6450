"""The HTML pages: ``runs/<run>/dashboard.html`` for one run and ``runs/index.html`` for all of them.

Pages are self-contained (inline CSS, inline SVG charts, PNG frames as data URLs, no scripts, no
network) and every text that comes from a user or a file is escaped with :func:`html.escape`.
"""

from __future__ import annotations

import base64
import math
import time
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from urllib.parse import quote

import numpy as np

from mission_gym.dashboard.charts import PALETTE, Series, fmt_num, line_chart, sparkline, stacked_chart
from mission_gym.dashboard.frames import FRAMES_DIR, frame_sets
from mission_gym.dashboard.launches import is_launch_dir, launches_table, list_launches, write_launch_page
from mission_gym.dashboard.layout import (
    AUTO_REFRESH_S,
    cards,
    charts_grid,
    esc,
    fmt,
    fmt_duration,
    kv_table,
    page,
    status_badge,
)
from mission_gym.dashboard.members import Member, load_members
from mission_gym.dashboard.population import fate_badge, members_section, population_cards, summary_line
from mission_gym.dashboard.population import member_tree as _member_tree
from mission_gym.dashboard.runs import (
    MEMBERS_DIR,
    RunData,
    col,
    eval_points,
    is_run_dir,
    list_runs,
    load_run,
    population_of,
    wall_seconds,
)
from mission_gym.rundir.files import atomic_write_text

DASHBOARD_FILE = "dashboard.html"
INDEX_FILE = "index.html"
MAX_FRAME_BYTES = 1_500_000  # per PNG; bigger files are linked rather than inlined
OUTCOME_COLORS = {"captured": "#16a34a", "timeout": "#f59e0b", "stalled": "#9ca3af", "all_disabled": "#dc2626"}


def run_charts(run: RunData) -> dict[str, list[str]]:
    """The run page's charts by section (sections with nothing logged are left out)."""
    p, x = run.progress, run.timesteps
    # the win rate and the outcome mix have their charts under Learning
    metrics = (k for k in p if k.startswith("mission/") and k != "mission/win_rate" and not k.startswith("mission/outcome_"))
    sections = {
        "Learning": _learning_charts(p, x, eval_points(run)),
        "Reward terms (episode sums)": _small_charts(p, x, (k for k in p if k.startswith("reward/"))),
        "Speed and hardware": _speed_charts(p, x),
        "Episode metrics (mean over episodes ended in each rollout)": _small_charts(p, x, metrics, color=PALETTE[2]),
        "PPO updates": _small_charts(p, x, (k for k in p if k.startswith("train/")), color=PALETTE[4]),
    }
    return {title: charts for title, charts in sections.items() if charts}


def _learning_charts(p: Mapping[str, np.ndarray], x: np.ndarray, ev: Mapping[str, np.ndarray]) -> list[str]:
    """Episode return and win rate (rollouts beside evaluations), the outcome mix and the episode length."""
    ex = ev.get("timesteps")
    learning: list[str] = []
    ret = [Series("rollout return (mean)", x, v) for v in [col(p, "rollout/ep_rew_mean")] if v is not None]
    if ex is not None and "mean_return" in ev:
        std = ev.get("std_return")
        lo = ev["mean_return"] - std if std is not None else None
        hi = ev["mean_return"] + std if std is not None else None
        ret.append(Series("evaluation (± std)", ex, ev["mean_return"], kind="points", lo=lo, hi=hi, color=PALETTE[1]))
    learning.append(line_chart(ret, "Episode return", chart_id="return"))
    win = [Series("rollout win rate", x, v) for v in [col(p, "mission/win_rate")] if v is not None]
    if ex is not None and col(ev, "win_rate") is not None:  # a Gymnasium task's evaluations.csv has the column, empty
        lo, hi = ev.get("win_ci_low"), ev.get("win_ci_high")  # the interval evaluations.csv records
        win.append(Series("evaluation (95% CI)", ex, ev["win_rate"], kind="points", lo=lo, hi=hi, color=PALETTE[1]))
    if win:
        learning.append(line_chart(win, "Win rate", y_range=(0.0, 1.0), y_fmt="percent", chart_id="win_rate"))
    outcomes = _outcome_chart(p, x)
    if outcomes is not None:
        learning.append(outcomes)
    if (v := col(p, "rollout/ep_len_mean")) is not None:
        learning.append(line_chart([Series("episode length (mean)", x, v)], "Episode length (steps)", chart_id="ep_len"))
    return learning


def _outcome_chart(p: Mapping[str, np.ndarray], x: np.ndarray) -> str | None:
    """The share of each outcome among each rollout's episodes, stacked; None when the run logged none."""
    found = {k.split("mission/outcome_", 1)[1]: v for k, v in p.items() if k.startswith("mission/outcome_")}
    # wins at the bottom, then the known failure reasons, then anything newer
    order = [o for o in OUTCOME_COLORS if o in found] + sorted(o for o in found if o not in OUTCOME_COLORS)
    outcomes = {o: found[o] for o in order}
    if not any(np.isfinite(v).any() for v in outcomes.values()):
        return None
    title = "Outcome mix (share of episodes per rollout)"
    return stacked_chart(x, outcomes, title, chart_id="outcomes", colors=OUTCOME_COLORS)


def _speed_charts(p: Mapping[str, np.ndarray], x: np.ndarray) -> list[str]:
    """Throughput, seconds per iteration by phase, utilisation and memory, each when the run logged it."""
    speed: list[str] = []
    if (v := col(p, "time/fps")) is not None:
        speed.append(line_chart([Series("env steps / s", x, v)], "Training throughput (FPS)", chart_id="fps"))
    phases = {name: p[k] for k, name in (("time/rollout_s", "rollout"), ("time/train_s", "update")) if col(p, k) is not None}
    if phases:
        speed.append(stacked_chart(x, phases, "Seconds per iteration: rollout vs update", normalize=False, chart_id="phases"))
    util = [
        Series(label, x, p[k])
        for k, label in (("gpu/util_mean", "GPU util mean"), ("gpu/util_max", "GPU util max"), ("sys/cpu_percent", "CPU"))
        if col(p, k) is not None
    ]
    if util:
        speed.append(line_chart(util, "Utilisation (%)", y_range=(0.0, None), chart_id="util"))
    mem = [
        Series(label, x, p[k])
        for k, label in (("gpu/mem_used_mb", "GPU memory"), ("sys/rss_mb", "process RSS"))
        if col(p, k) is not None
    ]
    if mem:
        speed.append(line_chart(mem, "Memory (MB)", y_range=(0.0, None), chart_id="memory"))
    return speed


def _small_charts(p: Mapping[str, np.ndarray], x: np.ndarray, keys: Iterable[str], color: str | None = None) -> list[str]:
    """One small chart per column in ``keys`` that has a value, in name order, titled by its name after the prefix."""
    return [
        line_chart([Series(k.split("/", 1)[1], x, p[k], color=color)], k.split("/", 1)[1], chart_id=k, width=320, height=180)
        for k in sorted(k for k in keys if col(p, k) is not None)
    ]


def _data_url(path: Path) -> str | None:
    try:
        if path.stat().st_size > MAX_FRAME_BYTES:
            return None
        return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")
    except OSError:
        return None


def _frames_html(run: RunData) -> str:
    sets = frame_sets(run.path / FRAMES_DIR)
    if sets:
        step = max(sets)
        files, caption = sets[step], f"Evaluation episode at {fmt_num(step)} timesteps"
    else:
        files, caption = run.frames[-12:], "Frames"
    items = []
    for i, path in enumerate(files):
        url = _data_url(path)
        if url is None:
            continue
        items.append(f'<figure><img src="{url}" alt="{esc(path.name)}"><figcaption>{i + 1}/{len(files)}</figcaption></figure>')
    if not items:
        return ""
    older = ", ".join(fmt_num(s) for s in sorted(sets)[:-1])
    note = f' <span class="muted">(older sets on disk: {esc(older)})</span>' if older else ""
    return f"<h2>{esc(caption)}{note}</h2><div class='film'>{''.join(items)}</div>"


def _summary_cards(run: RunData) -> str:
    ev = eval_points(run)
    best = float(np.nanmax(ev["win_rate"])) if "win_rate" in ev and np.isfinite(ev["win_rate"]).any() else math.nan
    total = run.metadata.get("total_timesteps") or run.metadata.get("target_timesteps")
    steps = run.last("time/total_timesteps")
    steps_text = fmt(steps) + (f" / {fmt_num(float(total))}" if isinstance(total, int | float) else "")
    wall, sessions = wall_seconds(run)
    return cards(
        [
            ("timesteps", steps_text),
            ("return (rollout)", fmt(run.last("rollout/ep_rew_mean"))),
            ("win rate (rollout)", fmt(run.last("mission/win_rate"), percent=True)),
            ("best eval win rate", fmt(best, percent=True)),
            ("FPS", fmt(run.last("time/fps"))),
            ("wall time", fmt_duration(wall), f"{sessions} sessions" if sessions > 1 else ""),
        ]
    )


def parent_run(run: RunData, names: Iterable[str]) -> str | None:
    """The name of the run this one branched from, when it is one of ``names``.

    ``lineage.json``'s ``parent`` (or ``parent_run``) may be a run name, a run directory or a
    checkpoint path inside one; a dict with a ``run``/``name`` key is understood too. A population member
    cloned from another (``clone_of``) has that member as its parent.
    """
    known = set(names)
    for key in ("parent_run", "parent", "clone_of"):
        value = run.lineage.get(key)
        if isinstance(value, Mapping):
            value = value.get("run") or value.get("name") or value.get("member") or value.get("path")
        if not value:
            continue
        text = str(value)
        if text in known and text != run.name:
            return text
        for part in reversed(Path(text).parts):
            if part in known and part != run.name:
                return part
    return None


def _header_links(run: RunData) -> list[str]:
    """Where a run came from: its parent run, or the population it is a member of."""
    bits = []
    population = population_of(run.path)
    if population is not None:
        bits.append(f'member of population <a href="../../{DASHBOARD_FILE}">{esc(population.name)}</a>')
        bits.append(f'<a href="../../../{INDEX_FILE}">all runs</a>')
        return bits
    parent = parent_run(run, [p.name for p in list_runs(run.path.parent)])
    if parent:
        bits.append(f'from <a href="../{esc(quote(parent))}/{DASHBOARD_FILE}">{esc(parent)}</a>')
    bits.append(f'<a href="../{INDEX_FILE}">all runs</a>')
    return bits


def run_page(run: RunData) -> str:
    """The HTML of one run's dashboard; a population run's shows its members side by side and its cuts first."""
    meta, lin = run.metadata, run.lineage
    env_id = meta.get("env_id") or meta.get("env") or ""
    bits = [status_badge(run.status)]
    members: list[Member] = load_members(run) if run.is_population else []
    if members:
        bits.append(esc(summary_line(run, members)))
    if env_id:
        bits.append(esc(env_id))
    if lin.get("branch"):
        bits.append(f"branch {esc(lin['branch'])}")
    header = f'<h1>{esc(run.name)}</h1><div class="sub">{" · ".join(bits + _header_links(run))}</div>'
    body = [cards(population_cards(run, members)) if members else _summary_cards(run)]
    if lin.get("notes") or meta.get("notes"):
        body.append(f"<p><b>Notes:</b> {esc(lin.get('notes') or meta.get('notes'))}</p>")
    winner = ""
    if members:
        body.append(members_section(run, members))
        won = meta.get("winner") if isinstance(meta.get("winner"), Mapping) else {}
        winner = f"Winner {won['member']} · " if won.get("member") else ""
    # a population run holds its winner's curves once the winner is chosen; before that there is nothing of its own
    if not members or run.progress:
        for section, charts in run_charts(run).items():
            small = section.startswith(("Reward", "Episode metrics", "PPO"))
            body.append(f"<h2>{esc(winner + section)}</h2>" + charts_grid(charts, small=small))
        body.append(_frames_html(run))
    files = [
        f
        for f in ("best_model.zip", "final_model.zip", "config.yaml", "progress.csv", "evaluations.csv")
        if (run.path / f).exists()
    ]
    n_ckpt = len(list((run.path / "checkpoints").glob("*.zip"))) if (run.path / "checkpoints").is_dir() else 0
    if files or n_ckpt:
        links = " · ".join(f'<a href="{esc(quote(f))}">{esc(f)}</a>' for f in files)
        body.append(
            f"<h2>Files</h2><p>{links}{' · ' if links and n_ckpt else ''}{n_ckpt and f'{n_ckpt} checkpoints' or ''}</p>"
        )
    body.append("<h2>Lineage</h2>" + kv_table(lin))
    if run.config_text is not None:
        body.append(f"<h2>Resolved configuration</h2><pre>{esc(run.config_text)}</pre>")
    body.append("<details><summary>Metadata</summary>" + kv_table(meta) + "</details>")
    refresh = AUTO_REFRESH_S if run.status == "running" else None
    return page(f"{run.name} · Mission Gym run", header, "".join(body), refresh)


def _tree_html(runs: list[RunData], members: Mapping[str, list[Member]]) -> str:
    names = [r.name for r in runs]
    parents = {r.name: parent_run(r, names) for r in runs}
    children: dict[str | None, list[RunData]] = {}
    for r in runs:
        children.setdefault(parents[r.name], []).append(r)

    def item(r: RunData, seen: frozenset[str]) -> str:
        note = r.lineage.get("notes") or r.metadata.get("notes")
        branch = r.lineage.get("branch")
        label = f'<a href="{esc(quote(r.name))}/{DASHBOARD_FILE}">{esc(r.name)}</a> {status_badge(r.status)}'
        if branch:
            label += f' <span class="muted">branch {esc(branch)}</span>'
        if r.name in members:
            label += f' <span class="badge population">{esc(summary_line(r, members[r.name]))}</span>'
        if note:
            label += f' <span class="note">— {esc(note)}</span>'
        kids = [c for c in children.get(r.name, []) if c.name not in seen]
        sub = "<ul>" + "".join(item(c, seen | {c.name}) for c in kids) + "</ul>" if kids else ""
        if r.name in members:
            sub = _member_tree(members[r.name], f"{quote(r.name)}/") + sub
        return f"<li>{label}{sub}</li>"

    roots = children.get(None, [])
    # runs caught in a parent cycle have no root: show them at the top level too
    reachable: set[str] = set()
    stack = [r.name for r in roots]
    while stack:
        n = stack.pop()
        reachable.add(n)
        stack.extend(c.name for c in children.get(n, []) if c.name not in reachable)
    roots += [r for r in runs if r.name not in reachable]
    return "<ul class='tree'>" + "".join(item(r, frozenset({r.name})) for r in roots) + "</ul>"


def _index_row(r: RunData, href: str, parent: str, notes: str, member: bool = False) -> str:
    """One row of the runs table (a population's members get indented rows under it)."""
    ev = eval_points(r)
    best = float(np.nanmax(ev["win_rate"])) if "win_rate" in ev and np.isfinite(ev["win_rate"]).any() else math.nan
    ret = r.progress.get("rollout/ep_rew_mean", np.zeros(0))
    env_id = r.metadata.get("env_id") or r.metadata.get("env") or ""
    wall = wall_seconds(r)[0]
    return (
        f"<tr{' class=member' if member else ''}>"
        f'<td>{"↳ " if member else ""}<a href="{esc(href)}">{esc(r.name)}</a></td>'
        f"<td>{status_badge(r.status)}</td><td>{esc(env_id)}</td>"
        f"<td>{esc(parent)}</td>"
        f"<td class='num'>{esc(fmt(r.last('time/total_timesteps')))}</td>"
        f"<td>{sparkline(ret)}</td><td class='num'>{esc(fmt(r.last('rollout/ep_rew_mean')))}</td>"
        f"<td class='num'>{esc(fmt(r.last('mission/win_rate'), percent=True))}</td>"
        f"<td class='num'>{esc(fmt(best, percent=True))}</td>"
        f"<td class='num'>{esc(fmt(r.last('time/fps')))}</td>"
        f"<td class='num'>{esc(fmt_duration(wall))}</td>"
        f"<td>{notes}</td></tr>"
    )


def index_page(runs_dir: str | Path, runs: list[RunData] | None = None) -> str:
    """The HTML of the runs index: a table of every run (a population run with its members under it), comparison
    charts, the lineage tree and the launcher's launches."""
    runs_dir = Path(runs_dir)
    runs = [load_run(p, with_frames=False) for p in list_runs(runs_dir)] if runs is None else runs
    header = f"<h1>Mission Gym runs</h1><div class='sub'>{esc(runs_dir.resolve())} · {len(runs)} runs</div>"
    launches = launches_table(runs_dir)
    launches_html = f"<h2>Launches</h2>{launches}" if launches else ""
    if not runs:
        return page("Mission Gym runs", header, "<p class='muted'>No runs yet.</p>" + launches_html)
    rows = []
    names = [r.name for r in runs]
    members = {r.name: load_members(r) for r in runs if r.is_population}
    for r in runs:
        notes = esc(r.lineage.get("notes") or r.metadata.get("notes") or "")
        if r.name in members:
            notes = f'<span class="badge population">{esc(summary_line(r, members[r.name]))}</span> {notes}'
        rows.append(_index_row(r, f"{quote(r.name)}/{DASHBOARD_FILE}", parent_run(r, names) or "", notes))
        for m in members.get(r.name, []):
            if m.run is not None:
                href = f"{quote(r.name)}/{MEMBERS_DIR}/{quote(m.name)}/{DASHBOARD_FILE}"
                origin = f"clone of {m.clone_of}" if m.clone_of else ""
                rows.append(_index_row(m.run, href, origin, fate_badge(m.fate), member=True))
    table = (
        "<table><tr><th>run</th><th>status</th><th>env</th><th>parent</th><th>timesteps</th><th>return</th><th></th>"
        "<th>win rate</th><th>best eval</th><th>FPS</th><th>wall time</th><th>notes</th></tr>" + "".join(rows) + "</table>"
    )
    charts = []
    for column, title, kw in (
        ("rollout/ep_rew_mean", "Episode return, all runs", {}),
        ("mission/win_rate", "Win rate, all runs", {"y_range": (0.0, 1.0), "y_fmt": "percent"}),
    ):
        series = [Series(r.name, r.timesteps, r.progress[column]) for r in runs if col(r.progress, column) is not None]
        if series:
            charts.append(line_chart(series[: len(PALETTE)], title, chart_id="all_" + column, **kw))
    body = f"<h2>Runs</h2>{table}"
    if charts:
        body += "<h2>Compare</h2>" + charts_grid(charts)
    body += "<h2>Lineage</h2>" + _tree_html(runs, members) + launches_html
    refresh = AUTO_REFRESH_S if any(r.status == "running" for r in runs) else None
    return page("Mission Gym runs", header, body, refresh)


def write_run_dashboard(run_dir: str | Path) -> Path:
    """Write ``<run_dir>/dashboard.html``.

    :param run_dir: the run directory
    :return: the page's path
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run directory {str(run_dir)!r} does not exist")
    out = run_dir / DASHBOARD_FILE
    atomic_write_text(out, run_page(load_run(run_dir)), durable=False)
    return out


def write_index(runs_dir: str | Path) -> Path:
    """Write ``<runs_dir>/index.html`` listing every run under ``runs_dir``.

    :param runs_dir: the directory holding run directories
    :return: the page's path
    """
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        raise FileNotFoundError(f"runs directory {str(runs_dir)!r} does not exist")
    out = runs_dir / INDEX_FILE
    atomic_write_text(out, index_page(runs_dir), durable=False)
    return out


def write_dashboards(runs_dir: str | Path, run: str | Path | None = None) -> list[Path]:
    """Write the dashboard of one run (or of every run and every launch when ``run`` is None) and the index.

    A population run's members get their pages (and their ``members/index.html``) too; ``run`` may also be a
    launch's directory (``runs/_launches/<date-time>``), whose page is written.

    :param runs_dir: the directory holding run directories
    :param run: a run name under ``runs_dir``, a run directory path or a launch directory
    :return: the pages written, index last
    """
    runs_dir = Path(runs_dir)
    targets = list_runs(runs_dir) if run is None else [Path(run) if Path(run).is_dir() else runs_dir / str(run)]
    if run is not None and is_launch_dir(targets[0]) and not is_run_dir(targets[0]):
        return write_launch_pages(targets[0], runs_dir)
    pages = []
    for target in targets:
        members = list_runs(target / MEMBERS_DIR) if (target / MEMBERS_DIR).is_dir() else []
        pages += [write_run_dashboard(m) for m in members]
        if members:
            pages.append(write_index(target / MEMBERS_DIR))
        pages.append(write_run_dashboard(target))
    if run is None:
        pages += [write_launch_page(launch) for launch in list_launches(runs_dir)]
    pages.append(write_index(runs_dir))
    return pages


_LAST_REFRESH: dict[str, float] = {}


def refresh_dashboards(run_dir: str | Path, min_interval_s: float = 5.0, force: bool = False) -> bool:
    """Rewrite a run's dashboard and its runs index, at most once every ``min_interval_s`` seconds.

    Cheap enough to call after every rollout: calls within the interval return at once, CSVs are
    parsed incrementally, and a failure is reported as a warning rather than stopping training. A population
    member's refresh refreshes its population's page too (under the same limit), so that page follows its members.

    :param run_dir: the run directory (its parent is the runs directory that gets ``index.html``)
    :param min_interval_s: the least time between two refreshes of the same run
    :param force: refresh now whatever the interval (e.g. at the end of training)
    :return: whether the pages were written
    """
    run_dir = Path(run_dir)
    key = str(run_dir.resolve())
    now = time.monotonic()
    if not force and now - _LAST_REFRESH.get(key, -math.inf) < min_interval_s:
        return False
    _LAST_REFRESH[key] = now
    try:
        write_run_dashboard(run_dir)
        write_index(run_dir.parent)
    except Exception as exc:  # a dashboard must never take a training run down with it
        warnings.warn(f"dashboard refresh for {str(run_dir)!r} failed: {exc!r}", RuntimeWarning, stacklevel=2)
        return False
    population = population_of(run_dir)
    if population is not None:
        refresh_dashboards(population, min_interval_s=min_interval_s, force=force)
    return True


def write_launch_pages(launch_dir: str | Path, runs_dir: str | Path) -> list[Path]:
    """Write a launch's page and the runs index (which lists the launch); what the launcher calls when it ends.

    :return: the pages written, index last
    """
    return [write_launch_page(launch_dir), write_index(runs_dir)]


__all__ = [
    "DASHBOARD_FILE",
    "INDEX_FILE",
    "index_page",
    "refresh_dashboards",
    "run_charts",
    "run_page",
    "write_dashboards",
    "write_index",
    "write_launch_pages",
    "write_run_dashboard",
]
