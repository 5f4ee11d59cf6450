"""The install: every command has a console script, each optional package missing is one line naming the extra to
install (exit 2), a reader that stops reading ends a command quietly, and (slow) a fresh virtual environment with only
``pip install -e .`` trains and evaluates."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from mission_gym.scripts import bench, record_video, train_ppo
from mission_gym.scripts.cli import BROKEN_PIPE_STATUS

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
COMMANDS = ["mission-train", "mission-evaluate", "mission-launch", "mission-memory", "mission-bench", "mission-dashboard",
            "mission-video", "mission-play", "mission-enjoy", "mission-search", "mission-hub"]  # fmt: skip


def test_every_command_has_a_console_script_documented_in_the_readme() -> None:
    scripts = PYPROJECT["project"]["scripts"]
    assert sorted(scripts) == sorted(COMMANDS)
    readme = (ROOT / "README.md").read_text()
    for name, target in scripts.items():
        module, _, attr = target.partition(":")
        assert callable(getattr(importlib.import_module(module), attr)), target
        assert f"`{name}`" in readme, f"{name} is not in the README's commands table"
    assert (ROOT / "mission_gym" / "py.typed").is_file()
    assert "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"]["mission_gym"]


def test_core_dependencies_leave_the_optional_parts_to_extras() -> None:
    core = " ".join(PYPROJECT["project"]["dependencies"])
    for heavy in ("mujoco", "imageio", "matplotlib", "ray", "pygame", "wandb", "optuna", "huggingface"):
        assert heavy not in core, heavy
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert {"mujoco", "video", "plot", "ray", "play", "track", "hub", "search", "dev"} <= set(extras)


def test_missing_extras_are_one_line_with_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)
    assert record_video.main(["--policy", "greedy", "--out", "a.mp4", "--max-steps", "2"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: an mp4 video needs imageio-ffmpeg, which is not installed: pip install 'mission_gym[video]'"
    )
    assert record_video.main(["--policy", "greedy", "--out", "a.gif", "--max-steps", "2"]) == 0  # gifs need no extra
    capsys.readouterr()
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(Exception, match=r"--plot needs matplotlib, which is not installed: pip install 'mission_gym\[plot\]'"):
        bench.plot_train([], tmp_path / "x.png")
    for module in [m for m in sys.modules if m == "mujoco" or m.startswith(("mujoco.", "gymnasium.envs.mujoco"))]:
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.setitem(sys.modules, "mujoco", None)
    assert train_ppo.main(["--preset", "mujoco", "--env", "Hopper-v5"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "error: --env Hopper-v5 needs MuJoCo, which is not installed: pip install 'mission_gym[mujoco]'"


def test_a_reader_that_stops_reading_ends_a_command_quietly() -> None:
    """``evaluate RUN | head``: the command stops with SIGPIPE's shell status and no traceback."""
    code = ("import sys; from mission_gym.scripts.cli import command_main\n"
            "def main(argv):\n    for _ in range(10_000):\n        print('x' * 1_000)\n    return 0\n"
            "sys.exit(command_main(main)(None))")  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.read(10) == b"x" * 10
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == BROKEN_PIPE_STATUS and err == ""
    # another pipe breaking (a worker's) is a failure, not the reader leaving
    code = ("import sys; from mission_gym.scripts.cli import command_main\n"
            "def main(argv):\n    raise BrokenPipeError('a worker went away')\n"
            "sys.exit(command_main(main)(None))")  # fmt: skip
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert other.returncode == 1 and "BrokenPipeError: a worker went away" in other.stderr


def test_a_command_leaves_its_heap_out_of_the_exit_collections_and_a_caller_in_its_process_keeps_its_own() -> None:
    """The interpreter's exit skips collecting what a command loaded (``gc.freeze`` at exit); until then a caller
    that ran the command in its own process (a test, a notebook) keeps every object collectable."""
    code = ("import atexit, gc, sys; from mission_gym.scripts.cli import command_main\n"
            "atexit.register(lambda: print('at exit', gc.get_freeze_count() > 0))\n"  # runs after the command's
            "for _ in range(2):\n    command_main(lambda argv: 0)(None)\n"
            "print('after', gc.get_freeze_count())")  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.split("\n")[:2] == ["after 0", "at exit True"], proc.stdout + proc.stderr


@pytest.mark.slow
def test_a_fresh_core_install_trains_the_quick_preset_and_evaluates_it(tmp_path: Path) -> None:
    """``pip install -e .`` (no extras; torch installed first, as the Makefile does) in a new virtual environment."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    bin_dir = venv / "bin"
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    pip = [str(bin_dir / "python"), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, f"torch=={__import__('torch').__version__.split('+')[0]}"], check=True, env=clean, timeout=900)
    subprocess.run([*pip, "-e", str(ROOT)], check=True, env=clean, timeout=1200)
    missing = subprocess.run(
        [str(bin_dir / "python"), "-c", "import importlib.util as u; print([m for m in "
         "('mujoco', 'imageio', 'pygame', 'ray', 'wandb', 'optuna', 'huggingface_hub') if u.find_spec(m)])"],
        env=clean, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert missing == "[]", f"the core install pulled optional packages: {missing}"
    run = subprocess.run(
        [str(bin_dir / "mission-train"), "--preset", "quick", "--run-name", "q", "--no-progress"],
        cwd=tmp_path, env=clean, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "finished: 2,048 / 2,048 steps" in run.stdout and (tmp_path / "runs" / "q" / "dashboard.html").is_file()
    evaluation = subprocess.run(
        [str(bin_dir / "mission-evaluate"), "q", "--episodes", "5"], cwd=tmp_path, env=clean, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert evaluation.returncode == 0, evaluation.stderr
    assert "win rate" in evaluation.stdout
    enjoy = subprocess.run([str(bin_dir / "mission-enjoy"), "q"], cwd=tmp_path, env=clean, capture_output=True, text=True)
    assert enjoy.returncode == 2
    assert enjoy.stderr.strip() == "error: mission-enjoy needs pygame, which is not installed: pip install 'mission_gym[play]'"
