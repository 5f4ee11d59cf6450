"""The benchmark's results as tables, speed-up lines, a CSV file and a plot (``mission_gym.scripts.bench``)."""

from __future__ import annotations

import csv
from pathlib import Path


def speedups(rows: list[dict[str, object]]) -> list[str]:
    """``lean`` over ``sb3`` per configuration measured both ways, and each preset's rows over its ``sb3-defaults``
    baseline (per wall-clock and per CPU second), as lines."""
    from mission_gym.training.measure import SB3_DEFAULTS

    done = [r for r in rows if "error" not in r]
    by: dict[tuple[object, ...], dict[str, float]] = {}
    for r in done:
        by.setdefault((r["preset"], r["vec_env"], r["n_envs"], r["threads"]), {})[str(r["algo"])] = float(r["fps"])  # type: ignore[arg-type]
    out = []
    for (preset, kind, n, threads), fps in by.items():
        if "lean" in fps and "sb3" in fps:
            out.append(
                f"{preset} ({kind}, {n} envs, {threads} learner thread(s)): {fps['lean']:,.0f} steps/s with the trainer's "
                f"LeanPPO vs {fps['sb3']:,.0f} with SB3's PPO = {fps['lean'] / fps['sb3']:.2f}x"
            )
    base = {r["preset"]: r for r in done if r["algo"] == SB3_DEFAULTS}
    for r in done:
        ref = base.get(r["preset"])
        if ref is None or r is ref:
            continue
        line = (
            f"{r['preset']} ({r['algo']}, {r['vec_env']}, {r['n_envs']} envs) on {ref['env']}: {_num(r['fps']):,.0f} "
            f"steps/s vs SB3's defaults {_num(ref['fps']):,.0f} = {_num(r['fps']) / _num(ref['fps']):.2f}x"
        )
        if r.get("cpu_fps") and ref.get("cpu_fps"):
            mine, theirs = _num(r["cpu_fps"]), _num(ref["cpu_fps"])
            line += f"; per CPU second {mine:,.0f} vs {theirs:,.0f} = {mine / theirs:.2f}x"
        out.append(line)
    return out


def _num(value: object) -> float:
    return float(value)  # type: ignore[arg-type]


def print_train_table(rows: list[dict[str, object]], title: str) -> None:
    """Print the training sweep as a table."""
    from rich.console import Console
    from rich.table import Table

    cols = ["preset", "algo", "threads", "vec-env", "n_envs", "batch", "env steps/s", "train FPS", "per CPU s",
            "rollout share", "peak RSS", "workers", "est. host", "GPU max alloc", "GPU NVML peak", "est. GPU"]  # fmt: skip
    table = Table(title=title)
    for col in cols:
        table.add_column(col, justify="left" if col in ("preset", "algo", "vec-env") else "right")

    def mb(v: object) -> str:
        return f"{v:,.0f} MB" if isinstance(v, (int, float)) and v else "-"

    for r in rows:
        if "error" in r:
            table.add_row(str(r["preset"]), str(r["algo"]), "-", str(r["vec_env"]), str(r["n_envs"]), *["-"] * 10,
                          f"failed: {r['error']}"[:40])  # fmt: skip
            continue
        share = r["rollout_share"]
        table.add_row(
            str(r["preset"]), str(r["algo"]), str(r["threads"]), str(r["vec_env"]), str(r["n_envs"]), str(r["batch_size"]),
            f"{r['env_steps_per_s']:,.0f}",
            f"{r['fps']:,.0f}", "-" if not r.get("cpu_fps") else f"{r['cpu_fps']:,.0f}",
            "-" if share is None else f"{share:.0%}", mb(r["peak_rss_mb"]), mb(r["workers_mb"]),
            mb(r["est_host_mb"]), mb(r["gpu_max_allocated_mb"]), mb(r["gpu_nvml_peak_mb"]), mb(r["est_gpu_mb"]),
        )  # fmt: skip
    Console(width=200).print(table)


def plot_train(rows: list[dict[str, object]], path: Path) -> None:
    """Training FPS and peak memory against n_envs, one line per (preset, vec-env kind)."""
    from mission_gym.optional import require

    matplotlib = require("matplotlib", "--plot")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_fps, ax_mem) = plt.subplots(1, 2, figsize=(11, 4.2))
    series: dict[tuple[str, str], list[dict[str, object]]] = {}
    for r in rows:
        if "error" not in r:
            series.setdefault((str(r["preset"]), str(r["vec_env"])), []).append(r)
    for (preset, kind), pts in sorted(series.items()):
        pts.sort(key=lambda r: r["n_envs"])
        xs = [r["n_envs"] for r in pts]
        ax_fps.plot(xs, [r["fps"] for r in pts], marker="o", label=f"{preset} / {kind}")
        ax_mem.plot(xs, [r["peak_rss_mb"] + r["workers_mb"] for r in pts], marker="o", label=f"{preset} / {kind}")
        ax_mem.plot(xs, [r["est_host_mb"] for r in pts], linestyle="--", color=ax_mem.lines[-1].get_color())
    ticks = sorted({int(r["n_envs"]) for pts in series.values() for r in pts})
    for ax in (ax_fps, ax_mem):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.minorticks_off()
    ax_fps.set(xlabel="n_envs", ylabel="training FPS (env steps/s end to end)", title="Throughput")
    ax_mem.set(xlabel="n_envs", ylabel="host MB incl. workers (dashed: estimate)", title="Peak host memory")
    ax_fps.legend(fontsize=8)
    ax_fps.grid(alpha=0.3)
    ax_mem.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def print_table(rows: list[dict[str, object]], title: str) -> None:
    """Print the sweep as a table."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for col in ("vec-env", "threads", "n_envs", "env steps/s", "× single MissionEnv", "note"):
        table.add_column(col, justify="right" if col != "note" else "left")
    for r in rows:
        sps = r["steps_per_s"]
        table.add_row(
            str(r["vec_env"]),
            str(r["threads"]),
            str(r["n_envs"]),
            "-" if sps is None else f"{sps:,.0f}",
            "-" if r["vs_single"] is None else f"{r['vs_single']:.1f}",
            str(r["note"]),
        )
    Console(width=120).print(table)


def print_task_table(rows: list[dict[str, object]], title: str) -> None:
    """Print a task's sweep (``bench --env ID``) as a table: steps/s, the ratio to one env in this process, and the
    memory of each configuration."""
    from rich.console import Console
    from rich.table import Table

    def mb(value: object) -> str:
        return "-" if value is None else f"{value:,.1f} MB"

    table = Table(title=title)
    columns = ("vec-env", "n_envs", "env steps/s", "× 1 env (dummy)", "main RSS growth", "workers (PSS)", "total", "note")
    for col in columns:
        table.add_column(col, justify="left" if col in ("vec-env", "note") else "right")
    for r in rows:
        sps, grown, workers = r["steps_per_s"], r["main_rss_growth_mb"], r["workers_mb"]
        total = None if grown is None or workers is None else float(grown) + float(workers)  # type: ignore[arg-type]
        table.add_row(
            str(r["vec_env"]), str(r["n_envs"]), "-" if sps is None else f"{sps:,.0f}",
            "-" if r["vs_one_env"] is None else f"{r['vs_one_env']:.2f}", mb(grown),
            "-" if r["vec_env"] != "subproc" else mb(workers), mb(total), str(r["note"]),
        )  # fmt: skip
    Console(width=140).print(table)


def write_csv(rows: list[dict[str, object]], path: Path) -> None:
    """Write the rows as CSV (the columns of every row, in the order they first appear)."""
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for row in rows for k in row)))
        writer.writeheader()
        writer.writerows(rows)
