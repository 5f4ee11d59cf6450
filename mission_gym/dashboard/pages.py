"""The HTML pages: ``runs/<run>/dashboard.html`` for one run and ``runs/index.html`` for all of them.

Pages are self-contained (inline CSS, inline SVG charts, PNG frames as data URLs, no scripts, no
network) and every text that comes from a user or a file is escaped with :func:`html.escape`.
"""

from __future__ import annotations

import base64
import html
import math
import os
import time
import warnings
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np

from mission_gym.dashboard.charts import PALETTE, Series, fmt_num, line_chart, sparkline, stacked_chart
from mission_gym.dashboard.frames import FRAMES_DIR, frame_sets
from mission_gym.dashboard.runs import RunData, list_runs, load_run

DASHBOARD_FILE = "dashboard.html"
INDEX_FILE = "index.html"
MAX_FRAME_BYTES = 1_500_000  # per PNG; bigger files are linked rather than inlined
AUTO_REFRESH_S = 30  # pages of running runs reload themselves this often
OUTCOME_COLORS = {"captured": "#16a34a", "timeout": "#f59e0b", "stalled": "#9ca3af", "all_disabled": "#dc2626"}

CSS = """
:root { --fg:#111827; --muted:#6b7280; --line:#e5e7eb; --card:#ffffff; --bg:#f3f4f6; --accent:#2563eb; }
* { box-sizing: border-box; }
body {
  margin:0; font:14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color:var(--fg);
  background:var(--bg);
}
header { background:#1f2937; color:#f9fafb; padding:14px 24px; }
header h1 { margin:0; font-size:20px; font-weight:600; word-break:break-all; }
header .sub { color:#d1d5db; font-size:13px; margin-top:2px; }
header a { color:#93c5fd; }
main { padding:16px 24px 40px; max-width:1800px; }
h2 { font-size:16px; margin:26px 0 10px; }
.cards { display:flex; flex-wrap:wrap; gap:10px; }
.card { background:var(--card); border:1px solid var(--line); border-radius:8px; padding:10px 14px; min-width:140px; }
.card .k { color:var(--muted); font-size:12px; } .card .v { font-size:20px; font-weight:600; }
.grid { display:grid; grid-template-columns:repeat(auto-fill, minmax(540px, 1fr)); gap:12px; }
.grid.small { grid-template-columns:repeat(auto-fill, minmax(300px, 1fr)); }
figure { margin:0; background:var(--card); border:1px solid var(--line); border-radius:8px; padding:6px; }
svg.chart { width:100%; height:auto; display:block; }
svg.chart text { font-family:system-ui, sans-serif; fill:#374151; }
svg.chart .title { font-size:14px; font-weight:600; fill:#111827; }
svg.chart .tick { font-size:11px; fill:#6b7280; } svg.chart .axis { font-size:11px; fill:#6b7280; }
svg.chart .legend { font-size:11.5px; } svg.chart .empty { font-size:13px; fill:#9ca3af; }
svg.chart .plot { fill:#fcfcfd; stroke:#d1d5db; } svg.chart .grid { stroke:#eef0f3; }
svg.chart .line { stroke-width:1.8; stroke-linejoin:round; } svg.chart .err { stroke-width:1.5; opacity:.6; }
svg.chart .area { opacity:.85; }
table { border-collapse:collapse; background:var(--card); border:1px solid var(--line); width:100%; }
th, td { text-align:left; padding:6px 10px; border-bottom:1px solid var(--line); vertical-align:middle; }
th { background:#f9fafb; font-weight:600; font-size:12px; color:#374151; }
td.num { text-align:right; font-variant-numeric:tabular-nums; }
pre {
  background:#0f172a; color:#e2e8f0; padding:12px 14px; border-radius:8px; overflow:auto; font-size:12.5px;
  max-height:640px;
}
.badge {
  display:inline-block; padding:1px 8px; border-radius:999px; font-size:12px; font-weight:600;
  background:#e5e7eb; color:#374151;
}
.badge.running { background:#dbeafe; color:#1d4ed8; }
.badge.finished, .badge.completed, .badge.done { background:#dcfce7; color:#15803d; }
.badge.failed, .badge.crashed, .badge.error { background:#fee2e2; color:#b91c1c; }
.badge.interrupted, .badge.stopped { background:#fef3c7; color:#b45309; }
.film { display:flex; flex-wrap:wrap; gap:8px; }
.film figure { padding:4px; }
.film img { display:block; max-width:260px; height:auto; }
.film figcaption { font-size:11px; color:var(--muted); text-align:center; }
ul.tree, ul.tree ul { list-style:none; padding-left:20px; margin:4px 0; } ul.tree { padding-left:0; }
ul.tree li { margin:3px 0; } ul.tree .note { color:var(--muted); font-size:12px; }
.muted { color:var(--muted); } footer { color:var(--muted); font-size:12px; margin-top:30px; }
details summary { cursor:pointer; font-weight:600; margin:8px 0; }
"""


def esc(value: Any) -> str:
    """HTML-escaped text of any value (quotes included, so it is safe in attributes too)."""
    return html.escape(str(value), quote=True)


def _page(title: str, header: str, body: str, refresh_s: int | None = None) -> str:
    refresh = f'<meta http-equiv="refresh" content="{int(refresh_s)}">' if refresh_s else ""
    stamp = datetime.now(timezone.utc).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">'
        f"{refresh}<title>{esc(title)}</title><style>{CSS}</style></head>"
        f"<body><header>{header}</header><main>{body}"
        f"<footer>Generated by mission_gym.dashboard at {esc(stamp)}.</footer></main></body></html>\n"
    )


def _fmt(v: float, percent: bool = False) -> str:
    if not math.isfinite(v):
        return "–"
    return f"{v * 100:.1f}%" if percent else fmt_num(v)


def _flatten(data: Mapping[str, Any], prefix: str = "") -> Iterable[tuple[str, Any]]:
    for k, v in data.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            yield from _flatten(v, key + ".")
        else:
            yield key, v


def _cell(value: Any) -> str:
    if value is None or value == "":
        return "–"
    return ", ".join(map(str, value)) if isinstance(value, list | tuple) else str(value)


def _kv_table(data: Mapping[str, Any]) -> str:
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(_cell(v))}</td></tr>" for k, v in _flatten(data))
    return f"<table>{rows}</table>" if rows else '<p class="muted">none recorded</p>'


def wilson_interval(p: np.ndarray, n: np.ndarray, z: float = 1.96) -> tuple[np.ndarray, np.ndarray]:
    """The Wilson score interval of win rates ``p`` over ``n`` episodes (NaN where n is not positive)."""
    p, n = np.asarray(p, dtype=np.float64), np.asarray(n, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        denom = 1 + z**2 / n
        centre = (p + z**2 / (2 * n)) / denom
        half = z * np.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / denom
    bad = ~(n > 0)
    lo, hi = np.clip(centre - half, 0, 1), np.clip(centre + half, 0, 1)
    lo[bad], hi[bad] = np.nan, np.nan
    return lo, hi


def _col(data: Mapping[str, np.ndarray], name: str) -> np.ndarray | None:
    v = data.get(name)
    return v if v is not None and np.isfinite(v).any() else None


def _eval_points(run: RunData) -> dict[str, np.ndarray]:
    """Evaluation results from evaluations.csv, else from the ``eval/*`` columns of progress.csv."""
    ev = run.evaluations
    if _col(ev, "timesteps") is not None:
        return {k: v for k, v in ev.items() if k in ("timesteps", "win_rate", "mean_return", "std_return", "n_episodes")}
    out = {}
    for src, dst in (("eval/win_rate", "win_rate"), ("eval/mean_return", "mean_return")):
        if (v := _col(run.progress, src)) is not None:
            out["timesteps"], out[dst] = run.timesteps, v
    return out


def run_charts(run: RunData) -> dict[str, list[str]]:
    """The run page's charts by section (sections with nothing logged are left out)."""
    p, x = run.progress, run.timesteps
    ev = _eval_points(run)
    ex = ev.get("timesteps")
    sections: dict[str, list[str]] = {}

    learning: list[str] = []
    ret = [Series("rollout return (mean)", x, v) for v in [_col(p, "rollout/ep_rew_mean")] if v is not None]
    if ex is not None and "mean_return" in ev:
        std = ev.get("std_return")
        lo = ev["mean_return"] - std if std is not None else None
        hi = ev["mean_return"] + std if std is not None else None
        ret.append(Series("evaluation (± std)", ex, ev["mean_return"], kind="points", lo=lo, hi=hi, color=PALETTE[1]))
    learning.append(line_chart(ret, "Episode return", chart_id="return"))
    win = [Series("rollout win rate", x, v) for v in [_col(p, "mission/win_rate")] if v is not None]
    if ex is not None and "win_rate" in ev:
        lo = hi = None
        if (n := ev.get("n_episodes")) is not None:
            lo, hi = wilson_interval(ev["win_rate"], n)
        win.append(Series("evaluation (95% CI)", ex, ev["win_rate"], kind="points", lo=lo, hi=hi, color=PALETTE[1]))
    if win:
        learning.append(line_chart(win, "Win rate", y_range=(0.0, 1.0), y_fmt="percent", chart_id="win_rate"))
    found = {k.split("mission/outcome_", 1)[1]: v for k, v in p.items() if k.startswith("mission/outcome_")}
    # wins at the bottom, then the known failure reasons, then anything newer
    order = [o for o in OUTCOME_COLORS if o in found] + sorted(o for o in found if o not in OUTCOME_COLORS)
    outcomes = {o: found[o] for o in order}
    if any(np.isfinite(v).any() for v in outcomes.values()):
        title = "Outcome mix (share of episodes per rollout)"
        learning.append(stacked_chart(x, outcomes, title, chart_id="outcomes", colors=OUTCOME_COLORS))
    if (v := _col(p, "rollout/ep_len_mean")) is not None:
        learning.append(line_chart([Series("episode length (mean)", x, v)], "Episode length (steps)", chart_id="ep_len"))
    sections["Learning"] = learning

    terms = sorted(k for k in p if k.startswith("reward/") and _col(p, k) is not None)
    if terms:
        sections["Reward terms (episode sums)"] = [
            line_chart([Series(k.split("/", 1)[1], x, p[k])], k.split("/", 1)[1], chart_id=k, width=320, height=180)
            for k in terms
        ]

    speed: list[str] = []
    if (v := _col(p, "time/fps")) is not None:
        speed.append(line_chart([Series("env steps / s", x, v)], "Training throughput (FPS)", chart_id="fps"))
    phases = {name: p[k] for k, name in (("time/rollout_s", "rollout"), ("time/train_s", "update")) if _col(p, k) is not None}
    if phases:
        speed.append(stacked_chart(x, phases, "Seconds per iteration: rollout vs update", normalize=False, chart_id="phases"))
    util = [
        Series(label, x, p[k])
        for k, label in (("gpu/util_mean", "GPU util mean"), ("gpu/util_max", "GPU util max"), ("sys/cpu_percent", "CPU"))
        if _col(p, k) is not None
    ]
    if util:
        speed.append(line_chart(util, "Utilisation (%)", y_range=(0.0, None), chart_id="util"))
    mem = [
        Series(label, x, p[k])
        for k, label in (("gpu/mem_used_mb", "GPU memory"), ("sys/rss_mb", "process RSS"))
        if _col(p, k) is not None
    ]
    if mem:
        speed.append(line_chart(mem, "Memory (MB)", y_range=(0.0, None), chart_id="memory"))
    if speed:
        sections["Speed and hardware"] = speed

    skip = {"mission/win_rate"}
    metrics = sorted(
        k
        for k in p
        if k.startswith("mission/") and k not in skip and not k.startswith("mission/outcome_") and _col(p, k) is not None
    )
    if metrics:
        sections["Episode metrics (mean over episodes ended in each rollout)"] = [
            line_chart(
                [Series(k.split("/", 1)[1], x, p[k], color=PALETTE[2])], k.split("/", 1)[1], chart_id=k, width=320, height=180
            )
            for k in metrics
        ]
    ppo = sorted(k for k in p if k.startswith("train/") and _col(p, k) is not None)
    if ppo:
        sections["PPO updates"] = [
            line_chart(
                [Series(k.split("/", 1)[1], x, p[k], color=PALETTE[4])], k.split("/", 1)[1], chart_id=k, width=320, height=180
            )
            for k in ppo
        ]
    return sections


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


def _status_badge(status: str) -> str:
    cls = "".join(ch for ch in status.lower() if ch.isalnum() or ch == "_")
    return f'<span class="badge {esc(cls)}">{esc(status)}</span>'


def _summary_cards(run: RunData) -> str:
    ev = _eval_points(run)
    best = float(np.nanmax(ev["win_rate"])) if "win_rate" in ev and np.isfinite(ev["win_rate"]).any() else math.nan
    total = run.metadata.get("total_timesteps") or run.metadata.get("target_timesteps")
    steps = run.last("time/total_timesteps")
    steps_text = _fmt(steps) + (f" / {fmt_num(float(total))}" if isinstance(total, int | float) else "")
    cards = [
        ("timesteps", steps_text),
        ("return (rollout)", _fmt(run.last("rollout/ep_rew_mean"))),
        ("win rate (rollout)", _fmt(run.last("mission/win_rate"), percent=True)),
        ("best eval win rate", _fmt(best, percent=True)),
        ("FPS", _fmt(run.last("time/fps"))),
        ("elapsed", _fmt_duration(run.last("time/time_elapsed"))),
    ]
    return (
        "<div class='cards'>"
        + "".join(f"<div class='card'><div class='k'>{esc(k)}</div><div class='v'>{esc(v)}</div></div>" for k, v in cards)
        + "</div>"
    )


def _fmt_duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "–"
    s = int(seconds)
    return f"{s // 3600}h {s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m {s % 60:02d}s"


def parent_run(run: RunData, names: Iterable[str]) -> str | None:
    """The name of the run this one branched from, when it is one of ``names``.

    ``lineage.json``'s ``parent`` (or ``parent_run``) may be a run name, a run directory or a
    checkpoint path inside one; a dict with a ``run``/``name`` key is understood too.
    """
    known = set(names)
    for key in ("parent_run", "parent"):
        value = run.lineage.get(key)
        if isinstance(value, Mapping):
            value = value.get("run") or value.get("name") or value.get("path")
        if not value:
            continue
        text = str(value)
        if text in known and text != run.name:
            return text
        for part in reversed(Path(text).parts):
            if part in known and part != run.name:
                return part
    return None


def run_page(run: RunData) -> str:
    """The HTML of one run's dashboard."""
    meta, lin = run.metadata, run.lineage
    env_id = meta.get("env_id") or meta.get("env") or ""
    bits = [_status_badge(run.status)]
    if env_id:
        bits.append(esc(env_id))
    if lin.get("branch"):
        bits.append(f"branch {esc(lin['branch'])}")
    parent = parent_run(run, [p.name for p in list_runs(run.path.parent)])
    if parent:
        bits.append(f'from <a href="../{esc(quote(parent))}/{DASHBOARD_FILE}">{esc(parent)}</a>')
    header = f'<h1>{esc(run.name)}</h1><div class="sub">{" · ".join(bits)} · <a href="../{INDEX_FILE}">all runs</a></div>'
    body = [_summary_cards(run)]
    if lin.get("notes") or meta.get("notes"):
        body.append(f"<p><b>Notes:</b> {esc(lin.get('notes') or meta.get('notes'))}</p>")
    for section, charts in run_charts(run).items():
        cls = "grid small" if section.startswith(("Reward", "Episode metrics", "PPO")) else "grid"
        body.append(
            f"<h2>{esc(section)}</h2><div class='{cls}'>" + "".join(f"<figure>{c}</figure>" for c in charts) + "</div>"
        )
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
    body.append("<h2>Lineage</h2>" + _kv_table(lin))
    if run.config_text is not None:
        body.append(f"<h2>Resolved configuration</h2><pre>{esc(run.config_text)}</pre>")
    body.append("<details><summary>Metadata</summary>" + _kv_table(meta) + "</details>")
    refresh = AUTO_REFRESH_S if run.status == "running" else None
    return _page(f"{run.name} · Mission Gym run", header, "".join(body), refresh)


def _tree_html(runs: list[RunData]) -> str:
    names = [r.name for r in runs]
    parents = {r.name: parent_run(r, names) for r in runs}
    children: dict[str | None, list[RunData]] = {}
    for r in runs:
        children.setdefault(parents[r.name], []).append(r)

    def item(r: RunData, seen: frozenset[str]) -> str:
        note = r.lineage.get("notes") or r.metadata.get("notes")
        branch = r.lineage.get("branch")
        label = f'<a href="{esc(quote(r.name))}/{DASHBOARD_FILE}">{esc(r.name)}</a> {_status_badge(r.status)}'
        if branch:
            label += f' <span class="muted">branch {esc(branch)}</span>'
        if note:
            label += f' <span class="note">— {esc(note)}</span>'
        kids = [c for c in children.get(r.name, []) if c.name not in seen]
        sub = "<ul>" + "".join(item(c, seen | {c.name}) for c in kids) + "</ul>" if kids else ""
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


def index_page(runs_dir: str | Path, runs: list[RunData] | None = None) -> str:
    """The HTML of the runs index: a table of every run, comparison charts and the lineage tree."""
    runs_dir = Path(runs_dir)
    runs = [load_run(p, with_frames=False) for p in list_runs(runs_dir)] if runs is None else runs
    header = f"<h1>Mission Gym runs</h1><div class='sub'>{esc(runs_dir.resolve())} · {len(runs)} runs</div>"
    if not runs:
        return _page("Mission Gym runs", header, "<p class='muted'>No runs yet.</p>")
    rows = []
    names = [r.name for r in runs]
    for r in runs:
        ev = _eval_points(r)
        best = float(np.nanmax(ev["win_rate"])) if "win_rate" in ev and np.isfinite(ev["win_rate"]).any() else math.nan
        ret = r.progress.get("rollout/ep_rew_mean", np.zeros(0))
        parent = parent_run(r, names)
        env_id = r.metadata.get("env_id") or r.metadata.get("env") or ""
        notes = r.lineage.get("notes") or r.metadata.get("notes") or ""
        rows.append(
            "<tr>"
            f'<td><a href="{esc(quote(r.name))}/{DASHBOARD_FILE}">{esc(r.name)}</a></td>'
            f"<td>{_status_badge(r.status)}</td><td>{esc(env_id)}</td>"
            f"<td>{esc(parent or '')}</td>"
            f"<td class='num'>{esc(_fmt(r.last('time/total_timesteps')))}</td>"
            f"<td>{sparkline(ret)}</td><td class='num'>{esc(_fmt(r.last('rollout/ep_rew_mean')))}</td>"
            f"<td class='num'>{esc(_fmt(r.last('mission/win_rate'), percent=True))}</td>"
            f"<td class='num'>{esc(_fmt(best, percent=True))}</td>"
            f"<td class='num'>{esc(_fmt(r.last('time/fps')))}</td>"
            f"<td>{esc(notes)}</td></tr>"
        )
    table = (
        "<table><tr><th>run</th><th>status</th><th>env</th><th>parent</th><th>timesteps</th><th>return</th><th></th>"
        "<th>win rate</th><th>best eval</th><th>FPS</th><th>notes</th></tr>" + "".join(rows) + "</table>"
    )
    charts = []
    for col, title, kw in (
        ("rollout/ep_rew_mean", "Episode return, all runs", {}),
        ("mission/win_rate", "Win rate, all runs", {"y_range": (0.0, 1.0), "y_fmt": "percent"}),
    ):
        series = [Series(r.name, r.timesteps, r.progress[col]) for r in runs if _col(r.progress, col) is not None]
        if series:
            charts.append(line_chart(series[: len(PALETTE)], title, chart_id="all_" + col, **kw))
    body = f"<h2>Runs</h2>{table}"
    if charts:
        body += "<h2>Compare</h2><div class='grid'>" + "".join(f"<figure>{c}</figure>" for c in charts) + "</div>"
    body += "<h2>Lineage</h2>" + _tree_html(runs)
    refresh = AUTO_REFRESH_S if any(r.status == "running" for r in runs) else None
    return _page("Mission Gym runs", header, body, refresh)


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file, so a reader never sees half a page."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_run_dashboard(run_dir: str | Path) -> Path:
    """Write ``<run_dir>/dashboard.html``.

    :param run_dir: the run directory
    :return: the page's path
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run directory {str(run_dir)!r} does not exist")
    out = run_dir / DASHBOARD_FILE
    atomic_write(out, run_page(load_run(run_dir)))
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
    atomic_write(out, index_page(runs_dir))
    return out


def write_dashboards(runs_dir: str | Path, run: str | Path | None = None) -> list[Path]:
    """Write the dashboard of one run (or of every run when ``run`` is None) and the index.

    :param runs_dir: the directory holding run directories
    :param run: a run name under ``runs_dir`` or a run directory path
    :return: the pages written, index last
    """
    runs_dir = Path(runs_dir)
    targets = list_runs(runs_dir) if run is None else [Path(run) if Path(run).is_dir() else runs_dir / str(run)]
    pages = [write_run_dashboard(t) for t in targets]
    pages.append(write_index(runs_dir))
    return pages


_LAST_REFRESH: dict[str, float] = {}


def refresh_dashboards(run_dir: str | Path, min_interval_s: float = 5.0, force: bool = False) -> bool:
    """Rewrite a run's dashboard and its runs index, at most once every ``min_interval_s`` seconds.

    Cheap enough to call after every rollout: calls within the interval return at once, CSVs are
    parsed incrementally, and a failure is reported as a warning rather than stopping training.

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
    return True


__all__ = [
    "DASHBOARD_FILE",
    "INDEX_FILE",
    "index_page",
    "refresh_dashboards",
    "run_charts",
    "run_page",
    "write_dashboards",
    "write_index",
    "write_run_dashboard",
]
