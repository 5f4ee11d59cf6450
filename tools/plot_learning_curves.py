"""Learning curves of Mission Gym runs from their ``progress.csv``.

    python tools/plot_learning_curves.py RUN_DIR [RUN_DIR ...] --out docs/img/learning_curves.png

One line per run in three panels against wall-clock minutes of training (summed over a resumed run's
sessions): the training win rate (``mission/win_rate``, the share of episodes finished in each rollout that were
captures), the in-training evaluation win rate
(``eval/win_rate``, fixed evaluation seeds) and the mean episode return (``rollout/ep_rew_mean``).
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

try:
    import matplotlib
except ImportError:
    print("error: plotting needs matplotlib, which is not installed: pip install 'mission_gym[plot]'", file=sys.stderr)
    sys.exit(2)
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _series(rows: list[dict[str, str]], key: str) -> tuple[list[float], list[float]]:
    """``(minutes, values)`` of ``key``; a resumed run's clock (SB3 restarts ``time_elapsed`` each session)
    continues from where the previous session's stopped."""
    xs, ys = [], []
    offset, last = 0.0, 0.0
    for r in rows:
        v, t = r.get(key, ""), r.get("time/time_elapsed", "")
        if t in ("", None):
            continue
        if float(t) + offset < last:  # a new session
            offset = last
        last = float(t) + offset
        if v not in ("", None):
            xs.append(last / 60.0)
            ys.append(float(v))
    return xs, ys


def _smooth(ys: list[float], k: int) -> list[float]:
    out, acc = [], []
    for y in ys:
        acc.append(y)
        if len(acc) > k:
            acc.pop(0)
        out.append(sum(acc) / len(acc))
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", type=Path, help="run directories (each with a progress.csv)")
    p.add_argument("--out", type=Path, default=Path("docs/img/learning_curves.png"))
    p.add_argument("--smooth", type=int, default=10, help="moving-average window, in log rows, for the training curves")
    p.add_argument("--title", default="Mission Gym, default scenario (2 defenders), cpu preset, 2-core CPU")
    args = p.parse_args(argv)

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6), dpi=80)
    panels = [
        ("mission/win_rate", "training win rate", True),
        ("eval/win_rate", "eval win rate (fixed seeds)", False),
        ("rollout/ep_rew_mean", "mean episode return", True),
    ]
    for run in args.runs:
        with open(run / "progress.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        for ax, (key, label, smooth) in zip(axes, panels):
            xs, ys = _series(rows, key)
            if smooth:
                ys = _smooth(ys, args.smooth)
            ax.plot(xs, ys, label=run.name, marker=None if smooth else "o", markersize=3, linewidth=1.2)
            ax.set_title(label, fontsize=10)
            ax.set_xlabel("wall-clock minutes")
            ax.grid(alpha=0.3)
    for ax in axes[:2]:
        ax.set_ylim(-0.02, 1.02)
    axes[0].legend(fontsize=8, loc="upper left")
    fig.suptitle(args.title, fontsize=10)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out)
    print(f"wrote {args.out} ({args.out.stat().st_size // 1024} KB)")


if __name__ == "__main__":
    main()
