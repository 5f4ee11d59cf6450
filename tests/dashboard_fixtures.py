"""Small fabricated run directories for the dashboard tests (the trainer's file layout, made-up numbers)."""

from __future__ import annotations

import csv
import json
import shutil
import time
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
    mission: bool = True,
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
    :param mission: log Mission Gym's columns (win rates, outcomes, reward terms); False for a Gymnasium task
    """
    rng = np.random.default_rng(seed)
    run = runs_dir / name
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(
        f"run_name: {name}\nenv_id: MissionGym-v0\npreset: fast\nppo:\n  learning_rate: 0.0003\n  n_steps: 256\n"
        f"notes: {json.dumps(notes)}\n",
        encoding="utf-8",
    )
    env_id = "MissionGym-v0" if mission else "CartPole-v1"
    (run / "metadata.json").write_text(
        json.dumps({"status": status, "env_id": env_id, "total_timesteps": rows * 4096, "versions": {"python": "3.11"}})
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
    if not mission:
        cols = {k: v for k, v in cols.items() if not k.startswith(("mission/", "reward/"))}
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
            win = round(float(np.clip(t[i] * 0.9 + 0.04 * (seed % 5) - 0.08, 0, 1)), 3) if mission else ""
            w.writerow([int(steps[i]), win, 200 * t[i] - 30, 20.0, 800 - 400 * t[i], 20])
    return run


def _read_rows(path: Path) -> tuple[list[str], list[list[str]]]:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:]


def _splice(source: Path, own: Path, step: int) -> None:
    """Make ``own`` (a CSV with a ``timesteps``-like first-step column) the source's rows up to ``step`` followed by
    its own rows after it: what a clone's files hold once it trained on from its source's checkpoint."""
    header, src_rows = _read_rows(source)
    own_header, own_rows = _read_rows(own)
    assert header == own_header
    key = header.index("time/total_timesteps") if "time/total_timesteps" in header else header.index("timesteps")
    rows = [r for r in src_rows if float(r[key]) <= step] + [r for r in own_rows if float(r[key]) > step]
    with open(own, "w", newline="") as f:
        csv.writer(f).writerows([header, *rows])


def score(member: str, model: str, steps: int, win: float | None, ret: float, n: int = 40) -> dict:
    """A ``population.json`` score entry (an ``EvalRecord``), with a made-up interval around ``win``."""
    record = {
        "timesteps": steps,
        "mean_return": ret,
        "std_return": 12.5,
        "mean_ep_length": 420.0,
        "n_episodes": n,
        "win_rate": win,
        "win_ci_low": None if win is None else max(0.0, win - 0.15),
        "win_ci_high": None if win is None else min(1.0, win + 0.15),
        "eval_s": 3.0,
        "outcomes": {} if win is None else {"captured": round(win * n), "timeout": n - round(win * n)},
    }
    return {"member": member, "model": model, "record": record}


def make_population(
    runs_dir: Path, name: str = "pop", rows: int = 30, cut_row: int = 10, status: str = "finished", mission: bool = True
) -> Path:
    """A population run of 3 members with one cut that keeps 2 and clones the best once (the shape
    ``population={size: 3, cuts: [{at: STEP, keep: 2, clones: 1}]}`` gives): m0 is cut, m1 is kept and cloned as m3,
    m2 is kept; at the end m1's best model wins. Its two sessions took 20 and 10 minutes; the winner's copied
    progress.csv says far less (``time/time_elapsed`` of one session of one member).

    :param rows: progress rows of a member trained to the end (4096 steps each)
    :param cut_row: the cut falls after this many rows
    :param status: the run's status; ``running`` leaves out the end (no winner yet) and has its second session under
        way for five minutes (20 minutes before it)
    :param mission: Mission Gym (win rates) or a Gymnasium task (returns only)
    """
    run = runs_dir / name
    members = run / "members"
    members.mkdir(parents=True)
    cut, end = cut_row * 4096, rows * 4096
    live = "running" if status == "running" else "finished"
    for k in range(3):
        make_run(members, f"m{k}", rows=rows if k else cut_row, seed=k, mission=mission, status=live if k else "paused")
    make_run(members, "m3", rows=rows, seed=3, mission=mission, status=live)
    for csv_name in ("progress.csv", "evaluations.csv"):
        _splice(members / "m1" / csv_name, members / "m3" / csv_name, cut)
    (members / "m3" / "lineage.json").write_text(json.dumps({"run": "m3", "clone_of": {"member": "m1", "step": cut}}))
    win = (lambda w: w) if mission else (lambda w: None)
    cuts: list[dict] = [
        {
            "step": cut,
            "scores": [
                score("m0", "checkpoints/ckpt_40960_steps.zip", cut, win(0.2), -20.0),
                score("m1", "checkpoints/ckpt_40960_steps.zip", cut, win(0.45), 31.5),
                score("m2", "checkpoints/ckpt_40960_steps.zip", cut, win(0.3), 12.0),
            ],
            "kept": ["m1", "m2", "m3"],
            "failed": [],
            "clones": ["m3"],
        }
    ]
    cuts[0]["best"] = cuts[0]["scores"][1]
    metadata = {
        "run": name,
        "env_id": "MissionGym-v0" if mission else "CartPole-v1",
        "status": status,
        "target_timesteps": end,
        "population": {"size": 3, "seeds": [0, 11, 22]},
        "started": "2025-01-02T10:00:00+0000",
        "ended": "2025-01-02T11:10:00+0000",
        "sessions": [
            {
                "started": "2025-01-02T10:00:00+0000",
                "ended": "2025-01-02T10:20:00+0000",
                "status": "interrupted",
                "wall_s": 1200.0,
            },
            {"started": "2025-01-02T11:00:00+0000", "ended": "2025-01-02T11:10:00+0000", "status": status, "wall_s": 600.0},
        ],
    }
    if status != "running":
        end_scores = [
            score("m1", "best_model.zip", end - 8192, win(0.8), 150.0),
            score("m1", "final_model.zip", end, win(0.7), 140.0),
            score("m2", "best_model.zip", end, win(0.6), 120.0),
            score("m2", "final_model.zip", end, win(0.6), 118.0),
            score("m3", "best_model.zip", end, win(0.75), 145.0),
            score("m3", "final_model.zip", end, win(0.7), 139.0),
        ]
        cuts.append({"step": end, "scores": end_scores, "kept": ["m1"], "failed": [], "best": end_scores[0]})
        metadata["winner"] = {"member": "m1", "model": "best_model.zip", "evaluation": end_scores[0]["record"]}
        for csv_name in ("progress.csv", "evaluations.csv"):  # the winner's curves, as PopulationRun._adopt copies them
            shutil.copy2(members / "m1" / csv_name, run / csv_name)
    else:
        # the second session is under way: started five minutes ago, not listed in "sessions" until it ends
        del metadata["ended"]
        metadata["session_started"] = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(time.time() - 300))
        metadata["sessions"] = metadata["sessions"][:1]
    state = {
        "members": [
            {"name": "m0", "seed": 0},
            {"name": "m1", "seed": 11},
            {"name": "m2", "seed": 22},
            {"name": "m3", "seed": 33, "clone_of": "m1", "step": cut},
        ],
        "cuts": cuts,
    }
    (run / "population.json").write_text(json.dumps(state))
    (run / "metadata.json").write_text(json.dumps(metadata))
    (run / "lineage.json").write_text(json.dumps({"run": name, "parent": None, "root": name}))
    (run / "config.yaml").write_text(
        f"run_name: {name}\nenv: {metadata['env_id']}\ntimesteps: {end}\npopulation:\n  size: 3\n"
        f"  cuts:\n  - {{at: {cut}, keep: 2, clones: 1}}\n  episodes: 40\n",
        encoding="utf-8",
    )
    return run


def make_launch(runs_dir: Path, stamp: str = "20250102-100000") -> Path:
    """A launch of three jobs (two seeds of ``ok``, one ``bad`` that failed at once) with its ``summary.json``, as
    ``python -m mission_gym.scripts.launch`` leaves it; the jobs' run directories are under ``runs_dir``."""
    launch = runs_dir / "_launches" / stamp
    launch.mkdir(parents=True)
    jobs = []
    for k, (job, state, code) in enumerate((("ok-s0", "done", 0), ("ok-s1", "done", 0), ("bad", "failed", 2))):
        if state == "done":
            make_run(runs_dir, job, rows=20 + 5 * k, seed=10 + k)
        (launch / f"{job}.log").write_text(f"$ python -m mission_gym.scripts.train_ppo --run-name {job}\n")
        jobs.append(
            {
                "name": job,
                "state": state,
                "returncode": code,
                "run_dir": str(runs_dir / job),
                "log": str(launch / f"{job}.log"),
                "seed": k if state == "done" else None,
                "group": "ok" if state == "done" else "bad",
                "args": ["--preset", "quick"],
                "cores": [k],
                "device": None,
                "node": None,
                "started": "2025-01-02T10:00:00+0000",
                "ended": "2025-01-02T10:12:30+0000" if state == "done" else "2025-01-02T10:00:04+0000",
                "seconds": 750.0 if state == "done" else 4.0,
                "total_steps": 122880,
                "reason": "error: unknown env NoSuchEnv-v0" if state == "failed" else None,
                "last_progress": None,
            }
        )
    (launch / "summary.json").write_text(json.dumps({"jobs": jobs, "all_succeeded": False}, indent=2))
    return launch
