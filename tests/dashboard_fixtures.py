"""Small fabricated run directories for the dashboard tests (the trainer's file layout, made-up numbers)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

OUTCOMES = ("captured", "all_disabled", "timeout", "stalled")
REWARD_TERMS = ("capture_progress", "win_bonus", "distance_potential", "time", "collision")


def make_run(
    runs_dir: Path,
    name: str,
    rows: int = 40,
    parent: str | None = None,
    notes: str = "",
    gpu: bool = True,
    status: str = "finished",
    seed: int = 0,
) -> Path:
    """Write a run directory with config.yaml, metadata.json, lineage.json, progress.csv and evaluations.csv.

    :param runs_dir: where the run directory goes
    :param name: run (directory) name
    :param rows: progress.csv rows (one per rollout of 4096 steps)
    :param parent: the parent run's name, for a branched run
    :param notes: free text stored in lineage.json
    :param gpu: log the ``gpu/*`` columns
    :param status: metadata status
    :param seed: for the made-up numbers
    """
    rng = np.random.default_rng(seed)
    run = runs_dir / name
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(
        f"run_name: {name}\nenv_id: MissionGym-v0\npreset: fast\nppo:\n  learning_rate: 0.0003\n  n_steps: 256\n"
        f"notes: {json.dumps(notes)}\n",
        encoding="utf-8",
    )
    (run / "metadata.json").write_text(
        json.dumps(
            {"status": status, "env_id": "MissionGym-v0", "total_timesteps": rows * 4096, "versions": {"python": "3.11"}}
        )
    )
    (run / "lineage.json").write_text(
        json.dumps(
            {
                "parent": f"{runs_dir}/{parent}/checkpoints/ckpt_4096.zip" if parent else None,
                "root": parent or name,
                "branch": "lr-sweep" if parent else None,
                "notes": notes,
            }
        )
    )
    steps = (np.arange(rows) + 1) * 4096
    t = np.linspace(0, 1, rows)
    cols: dict[str, np.ndarray] = {
        "time/total_timesteps": steps,
        "rollout/ep_rew_mean": -50 + 250 * t + rng.normal(0, 8, rows),
        "rollout/ep_len_mean": 900 - 500 * t,
        "mission/win_rate": np.clip(t * 0.8 + rng.normal(0, 0.05, rows), 0, 1),
        "mission/time_in_zone": 10 * t,
        "time/fps": 3000 + rng.normal(0, 100, rows),
        "time/rollout_s": 1.0 + rng.normal(0, 0.05, rows),
        "time/train_s": 0.5 + rng.normal(0, 0.05, rows),
        "time/time_elapsed": steps / 3000,
        "sys/cpu_percent": 150 + rng.normal(0, 10, rows),
        "sys/rss_mb": 900 + 100 * t,
        "train/approx_kl": 0.01 + rng.normal(0, 0.002, rows),
        "train/entropy_loss": -4 + t,
    }
    shares = np.stack([t, 0.3 * (1 - t), 0.5 * (1 - t), 0.2 * (1 - t)])
    for o, s in zip(OUTCOMES, shares):
        cols[f"mission/outcome_{o}"] = s
    for i, term in enumerate(REWARD_TERMS):
        cols[f"reward/{term}"] = (i + 1) * 10 * t + rng.normal(0, 1, rows)
    if gpu:
        cols["gpu/util_mean"] = 60 + rng.normal(0, 5, rows)
        cols["gpu/mem_used_mb"] = 2000 + 10 * t
    names = sorted(cols)
    with open(run / "progress.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(names)
        for i in range(rows):
            w.writerow([f"{cols[c][i]:.6g}" if not (c == "train/approx_kl" and i == 0) else "" for c in names])
    with open(run / "evaluations.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["timesteps", "win_rate", "mean_return", "std_return", "mean_ep_length", "n_episodes"])
        for i in range(4, rows, 5):
            w.writerow([int(steps[i]), round(min(1.0, t[i] * 0.9), 3), 200 * t[i] - 30, 20.0, 800 - 400 * t[i], 20])
    return run
