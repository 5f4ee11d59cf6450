"""What every dashboard page shares: the stylesheet, the page frame, escaping, number and duration formats, cards,
badges and tables. Pages are self-contained (inline CSS, inline SVG, no scripts, no network)."""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from mission_gym.dashboard.charts import fmt_num

AUTO_REFRESH_S = 30  # pages of running runs reload themselves this often

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
h3 { font-size:14px; margin:18px 0 6px; }
.cards { display:flex; flex-wrap:wrap; gap:10px; }
.card { background:var(--card); border:1px solid var(--line); border-radius:8px; padding:10px 14px; min-width:140px; }
.card .k { color:var(--muted); font-size:12px; } .card .v { font-size:20px; font-weight:600; }
.card .n { color:var(--muted); font-size:12px; }
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
svg.chart .mark { stroke:#6b7280; stroke-width:1.2; stroke-dasharray:5 4; }
svg.chart .marklabel { font-size:10.5px; fill:#4b5563; }
table { border-collapse:collapse; background:var(--card); border:1px solid var(--line); width:100%; }
th, td { text-align:left; padding:6px 10px; border-bottom:1px solid var(--line); vertical-align:middle; }
th { background:#f9fafb; font-weight:600; font-size:12px; color:#374151; }
td.num { text-align:right; font-variant-numeric:tabular-nums; }
tr.member td { font-size:13px; background:#fafafa; } tr.member td:first-child { padding-left:28px; }
tr.best td { background:#f0fdf4; }
pre {
  background:#0f172a; color:#e2e8f0; padding:12px 14px; border-radius:8px; overflow:auto; font-size:12.5px;
  max-height:640px;
}
.badge {
  display:inline-block; padding:1px 8px; border-radius:999px; font-size:12px; font-weight:600;
  background:#e5e7eb; color:#374151;
}
.badge.running { background:#dbeafe; color:#1d4ed8; }
.badge.finished, .badge.completed, .badge.done, .badge.kept, .badge.winner { background:#dcfce7; color:#15803d; }
.badge.failed, .badge.crashed, .badge.error, .badge.killed, .badge.skipped { background:#fee2e2; color:#b91c1c; }
.badge.interrupted, .badge.stopped, .badge.paused { background:#fef3c7; color:#b45309; }
.badge.cloned, .badge.clone, .badge.population { background:#ede9fe; color:#6d28d9; }
.swatch { display:inline-block; width:11px; height:11px; border-radius:3px; margin-right:6px; vertical-align:-1px; }
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


def page(title: str, header: str, body: str, refresh_s: int | None = None) -> str:
    """A whole HTML document: the dark header, the body and a footer saying when it was generated.

    :param refresh_s: reload the page this often (pages of work still under way)
    """
    refresh = f'<meta http-equiv="refresh" content="{int(refresh_s)}">' if refresh_s else ""
    stamp = datetime.now(timezone.utc).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">'
        f"{refresh}<title>{esc(title)}</title><style>{CSS}</style></head>"
        f"<body><header>{header}</header><main>{body}"
        f"<footer>Generated by mission_gym.dashboard at {esc(stamp)}.</footer></main></body></html>\n"
    )


def fmt(v: float | None, percent: bool = False) -> str:
    """A table or card number (``–`` when there is none)."""
    if v is None or not math.isfinite(v):
        return "–"
    return f"{v * 100:.1f}%" if percent else fmt_num(v)


def fmt_steps(v: float | None) -> str:
    """An exact step count, ``40,960`` (``–`` when there is none): a cut's step is read, not eyeballed."""
    return f"{v:,.0f}" if v is not None and math.isfinite(v) else "–"


def fmt_duration(seconds: float | None) -> str:
    """``12m 05s`` or ``3h 07m`` (``–`` when unknown)."""
    if seconds is None or not math.isfinite(seconds):
        return "–"
    s = int(seconds)
    return f"{s // 3600}h {s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m {s % 60:02d}s"


def status_badge(status: str) -> str:
    """A coloured pill; its class is the status, so new statuses look plain rather than broken."""
    cls = "".join(ch for ch in status.lower() if ch.isalnum() or ch == "_")
    return f'<span class="badge {esc(cls)}">{esc(status)}</span>'


def swatch(color: str) -> str:
    """A small square of a series' colour, to tie a table row to its line in the charts."""
    return f'<span class="swatch" style="background:{esc(color)}"></span>'


def cards(items: Sequence[tuple[str, str] | tuple[str, str, str]]) -> str:
    """A row of cards: ``(label, value)`` or ``(label, value, note)``."""
    out = []
    for item in items:
        note = f"<div class='n'>{esc(item[2])}</div>" if len(item) > 2 and item[2] else ""
        out.append(f"<div class='card'><div class='k'>{esc(item[0])}</div><div class='v'>{esc(item[1])}</div>{note}</div>")
    return "<div class='cards'>" + "".join(out) + "</div>"


def charts_grid(charts: Iterable[str], small: bool = False) -> str:
    """Charts in a responsive grid of figures."""
    return f"<div class='grid{' small' if small else ''}'>" + "".join(f"<figure>{c}</figure>" for c in charts) + "</div>"


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


def kv_table(data: Mapping[str, Any]) -> str:
    """A two-column table of a (nested) mapping, nested keys dotted."""
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(_cell(v))}</td></tr>" for k, v in _flatten(data))
    return f"<table>{rows}</table>" if rows else '<p class="muted">none recorded</p>'
