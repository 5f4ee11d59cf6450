"""The README's resume command after ``make train``: a run that ``make train`` started and that stopped (here paused
with ``--stop-at``, as Ctrl-C leaves one with a checkpoint) continues with exactly the command the README gives."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESUME = re.compile(r'`(make train RUN_ARGS="--resume RUN")`')


def readme_resume_command() -> str:
    found = RESUME.findall((ROOT / "README.md").read_text())
    assert found, "the README gives no command that resumes what `make train` started"
    return found[0]


def test_the_readmes_resume_command_continues_a_run_make_train_started(tmp_path: Path) -> None:
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    # a set-up already done: the Makefile's venv is this interpreter, its stamp newer than the pyproject.toml it
    # is compared with (in the runs' directory, where make runs), so `make train` installs nothing
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    python.chmod(0o755)
    (tmp_path / "pyproject.toml").write_text("")
    os.utime(tmp_path / "pyproject.toml", (1_000_000_000, 1_000_000_000))
    (venv / ".installed").touch()
    drop = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")  # this test may itself run under `make test`
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)

    def run_make(command: str) -> subprocess.CompletedProcess[str]:
        words = shlex.split(command)
        assert words[:2] == ["make", "train"], command
        args = [make, "-f", str(ROOT / "Makefile"), *words[1:], f"VENV={venv}"]
        return subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)

    started = run_make('make train RUN_ARGS="--preset quick --timesteps 1024 --stop-at 512 --run-name p --no-progress"')
    assert started.returncode == 0, started.stdout + started.stderr
    meta = tmp_path / "runs" / "p" / "metadata.json"
    assert json.loads(meta.read_text())["status"] == "paused"

    command = readme_resume_command().replace("--resume RUN", "--resume runs/p")
    resumed = run_make(command)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "resuming runs/p from step" in resumed.stdout
    done = json.loads(meta.read_text())
    assert done["status"] == "finished" and done["timesteps"] >= 1024
