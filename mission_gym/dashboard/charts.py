"""Inline SVG charts drawn in Python, so a dashboard needs no JavaScript library and no network.

Every text that reaches the SVG (titles, series names, numbers) goes through :func:`html.escape`.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

PALETTE: tuple[str, ...] = (
    "#2563eb",
    "#dc2626",
    "#16a34a",
    "#d97706",
    "#7c3aed",
    "#0891b2",
    "#db2777",
    "#65a30d",
    "#475569",
    "#ea580c",
    "#0d9488",
    "#111827",
    "#ca8a04",
    "#be123c",
    "#1d4ed8",
    "#15803d",
)
MAX_POINTS = 600  # per series; longer series are thinned so a page stays small


@dataclass
class Series:
    """One series of a chart.

    :param name: legend text
    :param x: x values (timesteps)
    :param y: y values; NaN marks a gap
    :param kind: ``"line"``, ``"points"`` (markers, e.g. evaluations) or ``"trace"`` (a line through markers)
    :param lo: lower end of each point's error bar (``points`` and ``trace``)
    :param hi: upper end of each point's error bar (``points`` and ``trace``)
    :param color: CSS colour; default from :data:`PALETTE` by position
    :param offset_px: shifts the markers sideways by this many pixels, so series scored at the same x stay visible
    """

    name: str
    x: Sequence[float] | np.ndarray
    y: Sequence[float] | np.ndarray
    kind: str = "line"
    lo: Sequence[float] | np.ndarray | None = None
    hi: Sequence[float] | np.ndarray | None = None
    color: str | None = None
    offset_px: float = 0.0


def fmt_num(v: float) -> str:
    """A short label for a number: ``1.2M``, ``35k``, ``0.25``, ``-3.1e-05``."""
    if not math.isfinite(v):
        return str(v)
    a = abs(v)
    if a >= 1e9:
        return f"{v / 1e9:.3g}G"
    if a >= 1e6:
        return f"{v / 1e6:.3g}M"
    if a >= 1e4:
        return f"{v / 1e3:.3g}k"
    if a >= 1e3:
        return f"{v:.0f}"
    if a == 0 or a >= 1e-3:
        return f"{v:.3g}"
    return f"{v:.2e}"


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About ``n`` round tick values (steps of 1, 2 or 5 times a power of ten) covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    if hi <= lo:
        hi = lo + (abs(lo) * 0.1 or 1.0)
    raw = (hi - lo) / max(1, n)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    ticks = []
    t = start
    while t <= hi + step * 1e-9:
        if t >= lo - step * 1e-9:
            ticks.append(round(t, 12))
        t += step
    return ticks


def thin(x: np.ndarray, *ys: np.ndarray, max_points: int = MAX_POINTS) -> tuple[np.ndarray, ...]:
    """Every k-th point (always keeping the last) so at most about ``max_points`` remain."""
    n = len(x)
    if n <= max_points:
        return (x, *ys)
    idx = np.unique(np.r_[np.linspace(0, n - 1, max_points).astype(np.int64), n - 1])
    return (x[idx], *(y[idx] for y in ys))


def _as_array(v: Sequence[float] | np.ndarray | None) -> np.ndarray:
    return np.asarray([] if v is None else v, dtype=np.float64)


class _Frame:
    """Plot geometry: the data range mapped onto the plot rectangle of a ``width`` x ``height`` SVG."""

    def __init__(
        self, x_range: tuple[float, float], y_range: tuple[float, float], width: int, height: int, bottom: int
    ) -> None:
        self.left, self.right, self.top = 58.0, width - 14.0, 30.0
        self.bottom = height - bottom
        self.x0, self.x1 = x_range
        self.y0, self.y1 = y_range

    def px(self, x: np.ndarray) -> np.ndarray:
        span = (self.x1 - self.x0) or 1.0
        return self.left + (x - self.x0) / span * (self.right - self.left)

    def py(self, y: np.ndarray) -> np.ndarray:
        span = (self.y1 - self.y0) or 1.0
        return self.bottom - (y - self.y0) / span * (self.bottom - self.top)


def _legend(names: Sequence[str], colors: Sequence[str], width: int, top: float) -> tuple[list[str], float]:
    """SVG legend items laid out left to right in rows; returns the items and the height used."""
    out: list[str] = []
    x, y, row_h = 58.0, top, 16.0
    for name, color in zip(names, colors):
        item_w = 22.0 + 6.2 * len(name) + 14.0
        if x + item_w > width - 8 and x > 58.0:
            x, y = 58.0, y + row_h
        out.append(
            f'<rect x="{x:.1f}" y="{y - 8:.1f}" width="14" height="8" rx="2" fill="{color}"/>'
            f'<text x="{x + 19:.1f}" y="{y:.1f}" class="legend">{html.escape(name)}</text>'
        )
        x += item_w
    return out, (y - top) + row_h if names else 0.0


def _legend_height(names: Sequence[str], width: int) -> float:
    return _legend(names, ["#000"] * len(names), width, 0.0)[1]


def _axes(frame: _Frame, x_ticks: list[float], y_ticks: list[float], x_label: str, y_fmt: str) -> list[str]:
    parts = [
        f'<rect x="{frame.left:.1f}" y="{frame.top:.1f}" width="{frame.right - frame.left:.1f}" '
        f'height="{frame.bottom - frame.top:.1f}" class="plot"/>'
    ]
    for t in y_ticks:
        y = float(frame.py(np.array(t)))
        label = f"{t * 100:.0f}%" if y_fmt == "percent" else fmt_num(t)
        parts.append(f'<line x1="{frame.left:.1f}" x2="{frame.right:.1f}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>')
        parts.append(
            f'<text x="{frame.left - 6:.1f}" y="{y + 3.5:.1f}" class="tick" text-anchor="end">{html.escape(label)}</text>'
        )
    for t in x_ticks:
        x = float(frame.px(np.array(t)))
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{frame.top:.1f}" y2="{frame.bottom:.1f}" class="grid"/>')
        parts.append(
            f'<text x="{x:.1f}" y="{frame.bottom + 14:.1f}" class="tick" text-anchor="middle">{html.escape(fmt_num(t))}</text>'
        )
    parts.append(
        f'<text x="{frame.right:.1f}" y="{frame.bottom + 28:.1f}" class="axis" text-anchor="end">{html.escape(x_label)}</text>'
    )
    return parts


def _svg(width: int, height: int, title: str, body: list[str], chart_id: str) -> str:
    return (
        f'<svg class="chart" data-chart="{html.escape(chart_id)}" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{html.escape(title)}">'
        f'<text x="12" y="19" class="title">{html.escape(title)}</text>' + "".join(body) + "</svg>"
    )


def empty_chart(title: str, message: str, chart_id: str = "", width: int = 560, height: int = 120) -> str:
    """A chart-sized box saying why there is nothing to draw."""
    body = [
        f'<text x="{width / 2:.0f}" y="{height / 2 + 8:.0f}" class="empty" text-anchor="middle">{html.escape(message)}</text>'
    ]
    return _svg(width, height, title, body, chart_id or "empty")


def line_chart(
    series: Sequence[Series],
    title: str,
    x_label: str = "timesteps",
    y_range: tuple[float | None, float | None] = (None, None),
    y_fmt: str = "num",
    chart_id: str = "",
    width: int = 560,
    height: int = 260,
    x_range: tuple[float | None, float | None] = (None, None),
    marks: Sequence[tuple[float, str]] = (),
) -> str:
    """An SVG line/point chart.

    :param series: the series to draw (lines break at NaN; ``points`` get markers, error bars and tooltips)
    :param title: chart title
    :param x_label: x axis label
    :param y_range: fixed y limits (``None`` = from the data)
    :param y_fmt: ``"num"`` or ``"percent"`` (values are fractions, labelled in %)
    :param chart_id: a ``data-chart`` attribute value, for tests and styling
    :param width: SVG width in px
    :param height: SVG height of the plot part in px (the legend adds rows below)
    :param x_range: x limits the axis covers at least (``None`` = from the data), so charts side by side share it
    :param marks: ``(x, label)`` of dashed vertical lines, e.g. a population's cuts
    :return: the ``<svg>`` element as text
    """
    prepared = []
    for i, s in enumerate(series):
        x, y = _as_array(s.x), _as_array(s.y)
        n = min(len(x), len(y))
        x, y = x[:n], y[:n]
        lo = _as_array(s.lo)[:n] if s.lo is not None else None
        hi = _as_array(s.hi)[:n] if s.hi is not None else None
        if not np.isfinite(y).any() or not np.isfinite(x).any():
            continue
        prepared.append((s, x, y, lo, hi, s.color or PALETTE[i % len(PALETTE)]))
    if not prepared:
        return empty_chart(title, "nothing logged yet", chart_id, width)
    mark_x = np.array([m[0] for m in marks], dtype=np.float64)
    xs = np.concatenate([p[1][np.isfinite(p[1])] for p in prepared] + [mark_x[np.isfinite(mark_x)]])
    ys = [p[2][np.isfinite(p[2])] for p in prepared]
    ys += [b[np.isfinite(b)] for p in prepared for b in (p[3], p[4]) if b is not None]
    y_all = np.concatenate(ys)
    y_lo = y_range[0] if y_range[0] is not None else float(y_all.min())
    y_hi = y_range[1] if y_range[1] is not None else float(y_all.max())
    if y_hi <= y_lo:
        pad = abs(y_lo) * 0.1 or 1.0
        y_lo, y_hi = y_lo - pad, y_hi + pad
    # a little headroom so lines do not run along the frame
    span = y_hi - y_lo
    y_lo = y_lo if y_range[0] is not None else y_lo - 0.04 * span
    y_hi = y_hi if y_range[1] is not None else y_hi + 0.04 * span
    y_ticks = nice_ticks(y_lo, y_hi)
    x_lo = min(float(xs.min()), x_range[0]) if x_range[0] is not None else float(xs.min())
    x_hi = max(float(xs.max()), x_range[1]) if x_range[1] is not None else float(xs.max())
    if x_hi <= x_lo:
        x_lo, x_hi = x_lo - 1.0, x_hi + 1.0
    names = [p[0].name for p in prepared]
    legend_h = _legend_height(names, width)
    frame = _Frame((x_lo, x_hi), (y_lo, y_hi), width, int(height + legend_h), bottom=int(34 + legend_h + 4))
    body = _axes(frame, nice_ticks(x_lo, x_hi), [t for t in y_ticks if y_lo <= t <= y_hi], x_label, y_fmt)
    body.extend(_marks(frame, marks))
    for s, x, y, lo, hi, color in prepared:
        body.extend(_draw_series(frame, s, x, y, lo, hi, color, y_fmt))
    legend, _ = _legend(names, [p[5] for p in prepared], width, frame.bottom + 46)
    body.extend(legend)
    return _svg(width, int(height + legend_h), title, body, chart_id or title)


def _marks(frame: _Frame, marks: Sequence[tuple[float, str]]) -> list[str]:
    """Dashed vertical lines with their labels at the top of the plot (a label that would run past the right edge
    is drawn to the left of its line; one that would overlap an earlier one goes a line lower)."""
    parts: list[str] = []
    row_ends: list[float] = []  # the right end of the last label on each line of labels
    for x, label in marks:
        if not (math.isfinite(x) and frame.x0 <= x <= frame.x1):
            continue
        px = float(frame.px(np.array(x)))
        tip = html.escape(f"{label} at {fmt_num(x)} steps")
        parts.append(
            f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{frame.top:.1f}" y2="{frame.bottom:.1f}" class="mark">'
            f"<title>{tip}</title></line>"
        )
        width = 5.6 * len(label)
        right = px + 4 + width > frame.right
        anchor, tx = ("end", px - 4) if right else ("start", px + 4)
        start, end = (tx - width, tx) if right else (tx, tx + width)
        row = next((i for i, e in enumerate(row_ends) if start > e + 4), len(row_ends))
        row_ends[row : row + 1] = [end]
        y = frame.top + 11 + 11 * row
        parts.append(f'<text x="{tx:.1f}" y="{y:.1f}" class="marklabel" text-anchor="{anchor}">{html.escape(label)}</text>')
    return parts


def _draw_series(
    frame: _Frame,
    s: Series,
    x: np.ndarray,
    y: np.ndarray,
    lo: np.ndarray | None,
    hi: np.ndarray | None,
    color: str,
    y_fmt: str,
) -> list[str]:
    parts: list[str] = []
    if s.kind == "trace":  # the line first (through the gaps), so the markers and their tooltips sit on top
        ok = np.isfinite(x) & np.isfinite(y)
        parts += _draw_series(frame, Series(s.name, x[ok], y[ok]), x[ok], y[ok], None, None, color, y_fmt)
    if s.kind in ("points", "trace"):
        for i in range(len(x)):
            if not (np.isfinite(x[i]) and np.isfinite(y[i])):
                continue
            cx, cy = float(frame.px(x[i])) + s.offset_px, float(frame.py(y[i]))
            if lo is not None and hi is not None and np.isfinite(lo[i]) and np.isfinite(hi[i]):
                y_a, y_b = float(frame.py(lo[i])), float(frame.py(hi[i]))
                parts.append(f'<line x1="{cx:.1f}" x2="{cx:.1f}" y1="{y_a:.1f}" y2="{y_b:.1f}" stroke="{color}" class="err"/>')
            value = f"{y[i] * 100:.1f}%" if y_fmt == "percent" else fmt_num(float(y[i]))
            tip = html.escape(f"{s.name}: {value} at {fmt_num(float(x[i]))} steps")
            parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="3.5" fill="{color}"><title>{tip}</title></circle>')
        return parts
    x, y = thin(x, y)
    ok = np.isfinite(x) & np.isfinite(y)
    # split into runs of finite points so gaps stay gaps
    breaks = np.flatnonzero(np.diff(ok.astype(np.int8)) != 0) + 1
    for seg in np.split(np.arange(len(x)), breaks):
        if len(seg) == 0 or not ok[seg[0]]:
            continue
        px, py = frame.px(x[seg]), frame.py(y[seg])
        if len(seg) == 1:
            parts.append(f'<circle cx="{px[0]:.1f}" cy="{py[0]:.1f}" r="2.5" fill="{color}"/>')
            continue
        pts = " ".join(f"{a:.1f},{b:.1f}" for a, b in zip(px, py))
        parts.append(f'<polyline points="{pts}" fill="none" stroke="{color}" class="line"/>')
    return parts


def stacked_chart(
    x: Sequence[float] | np.ndarray,
    layers: dict[str, Sequence[float] | np.ndarray],
    title: str,
    normalize: bool = True,
    x_label: str = "timesteps",
    chart_id: str = "",
    width: int = 560,
    height: int = 260,
    colors: dict[str, str] | None = None,
) -> str:
    """A stacked area chart, e.g. the share of each episode outcome per rollout.

    :param x: x values
    :param layers: name -> values (NaN counts as 0), stacked bottom-up in the given order
    :param title: chart title
    :param normalize: divide by the stack height so layers are shares (rows summing to 0 are dropped)
    :param x_label: x axis label
    :param chart_id: a ``data-chart`` attribute value
    :param width: SVG width in px
    :param height: SVG height of the plot part in px
    :param colors: CSS colour per layer name (others from :data:`PALETTE`)
    :return: the ``<svg>`` element as text
    """
    xv = _as_array(x)
    if not layers or len(xv) == 0:
        return empty_chart(title, "nothing logged yet", chart_id, width)
    names = list(layers)
    vals = np.stack([np.nan_to_num(_as_array(layers[n])[: len(xv)], nan=0.0) for n in names])  # (L, N)
    total = vals.sum(axis=0)
    keep = np.isfinite(xv) & ((total > 0) if normalize else np.ones_like(total, dtype=bool))
    xv, vals, total = xv[keep], vals[:, keep], total[keep]
    if len(xv) == 0:
        return empty_chart(title, "no episodes ended yet", chart_id, width)
    if normalize:
        vals = vals / total
    idx = thin(np.arange(len(xv), dtype=np.float64))[0].astype(np.int64)
    xv, vals = xv[idx], vals[:, idx]
    cum = np.vstack([np.zeros(len(xv)), np.cumsum(vals, axis=0)])
    y_hi = 1.0 if normalize else float(cum[-1].max()) or 1.0
    x_lo, x_hi = float(xv.min()), float(xv.max())
    if x_hi <= x_lo:
        x_lo, x_hi = x_lo - 1.0, x_hi + 1.0
    legend_h = _legend_height(names, width)
    frame = _Frame((x_lo, x_hi), (0.0, y_hi), width, int(height + legend_h), bottom=int(34 + legend_h + 4))
    y_ticks = nice_ticks(0.0, y_hi)
    body = _axes(frame, nice_ticks(x_lo, x_hi), [t for t in y_ticks if t <= y_hi], x_label, "percent" if normalize else "num")
    colors = [(colors or {}).get(n) or PALETTE[i % len(PALETTE)] for i, n in enumerate(names)]
    px = frame.px(xv)
    if len(xv) == 1:  # one rollout: draw a bar rather than a zero-width area
        px = np.array([px[0] - 4.0, px[0] + 4.0])
        cum = np.repeat(cum, 2, axis=1)
    for i, name in enumerate(names):
        lower, upper = frame.py(cum[i]), frame.py(cum[i + 1])
        pts = [f"{a:.1f},{b:.1f}" for a, b in zip(px, upper)] + [f"{a:.1f},{b:.1f}" for a, b in zip(px[::-1], lower[::-1])]
        share = float(vals[i, -1])
        tip = html.escape(f"{name}: {share * 100:.0f}% (latest)" if normalize else f"{name}: {fmt_num(share)} (latest)")
        body.append(f'<polygon points="{" ".join(pts)}" fill="{colors[i]}" class="area"><title>{tip}</title></polygon>')
    legend, _ = _legend(names, colors, width, frame.bottom + 46)
    body.extend(legend)
    return _svg(width, int(height + legend_h), title, body, chart_id or title)


def sparkline(y: Sequence[float] | np.ndarray, width: int = 120, height: int = 28, color: str = PALETTE[0]) -> str:
    """A tiny axis-less line for tables (empty string when there is nothing to draw)."""
    yv = _as_array(y)
    yv = yv[np.isfinite(yv)]
    if len(yv) < 2:
        return ""
    yv = thin(np.arange(len(yv), dtype=np.float64), yv, max_points=100)[1]
    lo, hi = float(yv.min()), float(yv.max())
    span = (hi - lo) or 1.0
    xs = np.linspace(2, width - 2, len(yv))
    ys = height - 2 - (yv - lo) / span * (height - 4)
    pts = " ".join(f"{a:.1f},{b:.1f}" for a, b in zip(xs, ys))
    return (
        f'<svg class="spark" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'xmlns="http://www.w3.org/2000/svg"><polyline points="{pts}" fill="none" stroke="{color}" stroke-width="1.5"/></svg>'
    )
