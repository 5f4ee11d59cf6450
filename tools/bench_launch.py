"""Aggregate training throughput of 1, 2, ... concurrent train_ppo jobs through the launcher.

python tools/bench_launch.py [--preset cpu] [--timesteps 40000] [--parallel 1 2] [--runs-dir /tmp/bench-launch]

For each level N it launches N jobs of the preset at once (N cores split among them, as the launcher does)
and reports each job's training FPS (SB3's ``time/fps``: steps over time inside ``learn``, so start-up is
left out), their sum (the aggregate) and the ratio to one job, all measured in the same invocation.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run_level(n: int, preset: str, timesteps: int, runs_dir: Path, extra: list[str], cpus: int | None = None) -> dict:
    name = f"bench-p{n}-{time.strftime('%H%M%S')}"
    cmd = [sys.executable, "-m", "mission_gym.scripts.launch", "--no-live", "--jobs", str(n), "--preset", preset,
           "--name", name, "--max-parallel", str(n), "--runs-dir", str(runs_dir),
           *(["--cpus-per-job", str(cpus)] if cpus else []), "--",
           "--timesteps", str(timesteps), "--no-tensorboard", *extra]  # fmt: skip
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"level {n} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    launch_dir = sorted((runs_dir / "_launches").iterdir())[-1]
    jobs = json.loads((launch_dir / "summary.json").read_text())["jobs"]
    fps = [float(j["last_progress"]["time/fps"]) for j in jobs]
    return {"n": n, "fps": fps, "aggregate": sum(fps), "wall": wall, "steps": timesteps * n}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="cpu")
    p.add_argument("--timesteps", type=int, default=40_000, help="per job")
    p.add_argument("--parallel", type=int, nargs="+", default=[1, 2])
    p.add_argument("--runs-dir", type=Path, default=None)
    p.add_argument("--cpus-per-job", type=int, default=None, help="cores per job (default: the launcher's even share)")
    args, extra = p.parse_known_args()
    runs_dir = args.runs_dir or Path(tempfile.mkdtemp(prefix="bench-launch-"))
    rows = [run_level(n, args.preset, args.timesteps, runs_dir, extra, args.cpus_per_job) for n in args.parallel]
    base = rows[0]["aggregate"]
    print(f"preset {args.preset}, {args.timesteps} timesteps per job, runs in {runs_dir}")
    print(f"{'jobs':>4} {'per-job FPS':>22} {'aggregate FPS':>14} {'vs first':>9} {'wall s':>7} {'steps/wall s':>13}")
    for r in rows:
        per = ", ".join(f"{f:.0f}" for f in r["fps"])
        print(f"{r['n']:>4} {per:>22} {r['aggregate']:>14.0f} {r['aggregate'] / base:>8.2f}x {r['wall']:>7.1f} "
              f"{r['steps'] / r['wall']:>13.0f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
