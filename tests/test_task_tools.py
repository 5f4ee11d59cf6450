"""The tools take the user's task (``--env ID``): memory_helper composes, explains and measures a preset for it,
bench steps it and trains its recipe, launch passes it to every job; a bad id is one line and exit status 2."""

from __future__ import annotations

import csv
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from mission_gym.launch.jobs import jobs_from_flags
from mission_gym.scripts import bench, launch, memory_helper

CliHere = Callable[..., tuple[int, str, str]]


def run(module: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """A command in a new interpreter: each CLI's smoke test starts it as a process, and a peak RSS is a process's
    whole life (a fork of a warm process would start with its imports)."""
    cmd = [sys.executable, "-m", f"mission_gym.scripts.{module}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=cwd)


def figures(line: str) -> list[float]:
    """The MB figures of a table row."""
    return [float(x.replace(",", "")) for x in re.findall(r"([\d,]+) MB", line)]


# --- memory_helper ------------------------------------------------------------------------------------------------
def test_memory_helper_explains_a_tier_for_the_task(cli_here: CliHere) -> None:
    code, out, err = cli_here(memory_helper.main, ["--env", "CartPole-v1", "--preset", "cpu", "--cores", "2"])
    assert code == 0, err
    assert "preset cpu for CartPole-v1:" in out
    assert "recipe " in out and "size: tier cpu" in out  # which recipe, which size and why
    assert "vec_env=" in out and "host RAM:" in out and "total" in out


def test_memory_helper_compares_the_tiers_for_the_task(cli_here: CliHere) -> None:
    code, out, err = cli_here(memory_helper.main, ["--env", "CartPole-v1", "--cores", "2"])
    assert code == 0, err
    assert "for CartPole-v1 on 2 cores" in out
    for tier in ("cpu", "fast", "heavy", "beast"):
        assert re.search(rf"│ {tier}\s+│", out), tier
    assert "the task's" in out  # the task's recipe as written, beside the tiers that size it


def test_memory_helper_says_what_heavy_is_for_hopper_on_a_12_gib_card(cli_here: CliHere) -> None:
    pytest.importorskip("mujoco")
    args = ["--env", "Hopper-v5", "--preset", "heavy", "--memory", "12", "--ram", "32"]
    code, out, err = cli_here(memory_helper.main, [*args, "--cores", "2"])
    assert code == 0, err
    assert "heavy for Hopper-v5 on a 12 GiB GPU with 2 cores" in out
    assert "4 seeds side by side" in out and "learner on the CPU" in out
    assert "GPU memory: none (its learners train on the CPU)" in out
    assert "fits this machine: no: wants 8 cores, 2 here" in out
    assert "auto trains Hopper-v5 on the CPU" in out and "--env Hopper-v5 --preset cpu" in out
    code, out, err = cli_here(memory_helper.main, [*args, "--cores", "8"])
    assert code == 0, err
    assert "fits this machine: yes" in out and "(all 4 seeds at once)" in out
    assert "Largest preset that fits: heavy" in out


def test_memory_helper_measures_a_subproc_run_of_the_task_within_30_percent() -> None:
    out = run("memory_helper", "--env", "CartPole-v1", "--measure", "--vec-env", "subproc", "--device", "cpu",
              "--rollouts", "1")  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "Estimate vs measured: quick on CartPole-v1" in out.stdout
    lines = out.stdout.splitlines()
    (workers,) = [line for line in lines if "env workers + forkserver" in line]
    assert figures(workers)[1] > 50  # the workers and their forkserver were measured, not left out
    # private memory (RSS less the libraries' mapped files, which count as many pages as the page cache holds), of
    # the training process and of its workers: the rows after each total
    private = [lines[i + 1] for i, line in enumerate(lines) if "peak RSS of the training" in line or line == workers]
    assert len(private) == 2 and all("private" in line for line in private), private
    for line in private:
        estimated, measured = figures(line)
        assert abs(estimated / measured - 1) < 0.30, line
    assert "warning" not in (out.stdout + out.stderr).lower()


def test_memory_helper_measures_a_pixel_run_of_the_task_within_30_percent(tmp_path: Path) -> None:
    """A CNN over stacked frames, as the cpu tier sizes the pixels recipe for an image task."""
    import shutil

    shutil.copy(Path(__file__).with_name("task_envs.py"), tmp_path / "task_envs.py")
    out = run("memory_helper", "--env", "task_envs:ImageTarget-v0", "--preset", "cpu", "--measure", "--rollouts", "1",
              cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "recipe pixels" in out.stdout and "params=129,187" in out.stdout  # NatureCNN and its heads, counted
    lines = out.stdout.splitlines()
    (private,) = [lines[i + 1] for i, line in enumerate(lines) if "peak RSS of the training process" in line]
    assert "private (less mapped files)" in private  # the row the page cache does not move
    estimated, measured = figures(private)
    assert abs(estimated / measured - 1) < 0.30, private


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--env", "NoSuch-v0"], "--env 'NoSuch-v0' is not a registered Gymnasium id"),
        (["--env", "CartPole-v1", "--cores", "0"], "--cores must be >= 1"),
        (["--env", "CartPole-v1", "--compare", "--preset", "cpu"], "--compare shows every tier"),
    ],
)
def test_memory_helper_bad_input_is_one_line_exit_2(args: list[str], needle: str, cli_here: CliHere) -> None:
    code, _, err = cli_here(memory_helper.main, args)
    assert code == 2 and needle in err
    assert len(err.strip().splitlines()) == 1


# --- bench --------------------------------------------------------------------------------------------------------
def test_bench_steps_the_task_and_measures_its_memory(tmp_path: Path) -> None:
    out = run("bench", "--env", "CartPole-v1", "--n-envs", "1", "4", "--vec-env", "dummy", "subproc", "--seconds", "0.2",
              "--csv", str(tmp_path / "t.csv"))  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "CartPole-v1 env steps/s and memory" in out.stdout
    rows = list(csv.DictReader((tmp_path / "t.csv").open()))
    assert [(r["vec_env"], r["n_envs"]) for r in rows] == [("dummy", "1"), ("dummy", "4"), ("subproc", "1"), ("subproc", "4")]
    assert all(float(r["steps_per_s"]) > 0 and float(r["main_rss_growth_mb"]) >= 0 for r in rows)
    assert float(rows[0]["vs_one_env"]) == 1.0
    dummy, subproc = rows[1], rows[3]
    assert float(dummy["workers_mb"]) == 0 and float(subproc["workers_mb"]) > 50  # four workers and their forkserver


def test_bench_trains_the_tasks_recipe(tmp_path: Path) -> None:
    out = run("bench", "--mode", "train", "--env", "CartPole-v1", "--rollouts", "1", "--seconds", "0.1", "--device", "cpu",
              "--csv", str(tmp_path / "t.csv"))  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "PPO training of CartPole-v1 on cpu" in out.stdout
    (row,) = list(csv.DictReader((tmp_path / "t.csv").open()))
    assert (row["preset"], row["env"]) == ("cpu", "CartPole-v1")  # the cpu tier's size of the task's recipe
    assert float(row["fps"]) > 0 and float(row["env_steps_per_s"]) > 0


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--env", "NoSuch-v0"], "--env 'NoSuch-v0' is not a registered Gymnasium id"),
        (["--env", "Pendulum-v1", "--vec-env", "native"], "Pendulum-v1 has no batched env of its own"),
        (["--env", "CartPole-v1", "--vec-env", "single"], "--vec-env 'single' is not valid with --env"),
        (["--env", "CartPole-v1", "--mode", "population"], "--env goes with --mode env or --mode train"),
        (["--mode", "train", "--env", "NoSuch-v0"], "'NoSuch-v0'"),
    ],
)
def test_bench_bad_input_is_one_line_exit_2(args: list[str], needle: str, cli_here: CliHere) -> None:
    code, _, err = cli_here(bench.main, args)
    assert code == 2 and needle in err
    assert len(err.strip().splitlines()) == 1


# --- launch -------------------------------------------------------------------------------------------------------
def test_launch_passes_the_task_to_every_job(tmp_path: Path, cli_here: CliHere) -> None:
    code, out, err = cli_here(launch.main, ["--env", "CartPole-v1", "--seeds", "0", "1", "--runs-dir", str(tmp_path),
                                            "--dry-run", "--no-live"])  # fmt: skip
    assert code == 0, err
    lines = [line for line in out.splitlines() if "train_ppo " in line]
    assert len(lines) == 2 and all("--env CartPole-v1" in line for line in lines)
    assert "--seed 0" in lines[0] and "--seed 1" in lines[1]
    assert "CartPole-v1-auto-" in lines[0]  # the run names say the task and the preset (train_ppo's auto)
    assert not any(tmp_path.iterdir())
    jobs = jobs_from_flags(None, "cpu", [3], name="x", env="my_pkg:Task-v0")
    assert jobs[0].args == ("--preset", "cpu", "--env", "my_pkg:Task-v0", "--seed", "3")
    assert jobs_from_flags(None, None, [0], env="my_pkg:Task-v0")[0].name.startswith("Task-v0-auto-")


def test_launch_refuses_an_unknown_task_in_one_line(tmp_path: Path, cli_here: CliHere) -> None:
    code, _, err = cli_here(launch.main, ["--env", "NoSuch-v0", "--seeds", "0", "--runs-dir", str(tmp_path), "--dry-run"])
    assert code == 2 and "--env 'NoSuch-v0'" in err and len(err.strip().splitlines()) == 1
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("jobs:\n  - name: a\n")
    code, _, err = cli_here(launch.main, [str(jobs), "--env", "CartPole-v1", "--runs-dir", str(tmp_path)])
    assert code == 2 and "--env build jobs from flags" in err
