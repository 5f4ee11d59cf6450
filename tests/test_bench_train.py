"""bench --mode train: one tiny configuration end to end (table, CSV, PNG); bad input is one line, exit 2."""

from __future__ import annotations

import csv
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import warm_cli

from mission_gym.scripts.bench import main

CliHere = Callable[..., tuple[int, str, str]]


def run_bench(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "mission_gym.scripts.bench", "--mode", "train", *args]
    return warm_cli.run(cmd)


def test_train_sweep_writes_table_csv_and_plot(tmp_path: Path) -> None:
    out = run_bench("--preset", "quick", "--n-envs", "2", "--vec-env", "native", "--rollouts", "1", "--seconds", "0.1",
                    "--device", "cpu", "--algo", "lean", "sb3", "--csv", str(tmp_path / "t.csv"),
                    "--plot", str(tmp_path / "t.png"))  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "PPO training on cpu" in out.stdout
    rows = list(csv.DictReader((tmp_path / "t.csv").open()))
    assert [r["algo"] for r in rows] == ["lean", "sb3"] and all(r["threads"] == "1" for r in rows)
    row = rows[0]
    assert (row["preset"], row["vec_env"], row["n_envs"], row["timesteps"]) == ("quick", "native", "2", "128")
    assert "with the trainer's LeanPPO vs" in out.stdout  # the side-by-side speed-up line
    assert float(row["fps"]) > 0 and 0 < float(row["rollout_share"]) < 1
    assert float(row["peak_rss_mb"]) > 100 and float(row["est_host_mb"]) > 100
    assert (tmp_path / "t.png").stat().st_size > 1000


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--preset", "qick"], "did you mean 'quick'"),
        (["--preset", "auto"], "not a run preset"),
        (["--preset", "no/such.yaml"], "does not exist"),
        (["--vec-env", "single"], "not valid for --mode train"),
        (["--device", "tpu"], "--device 'tpu' is not valid"),
    ],
)
def test_train_sweep_bad_input(args: list[str], needle: str, cli_here: CliHere) -> None:
    code, _, err = cli_here(main, ["--mode", "train", *args])
    assert code == 2 and needle in err
    assert len(err.strip().splitlines()) == 1


def test_a_preset_file_is_measured_as_train_ppo_takes_it(tmp_path: Path, cli_here: CliHere) -> None:
    """--preset FILE: a variant of a preset measured without adding it to the shipped ones; a broken one is one line."""
    variant = tmp_path / "quick_small.yaml"
    variant.write_text("base: quick\nn_envs: 2\nn_steps: 16\n")
    out = run_bench("--preset", str(variant), "--rollouts", "1", "--device", "cpu", "--csv", str(tmp_path / "t.csv"))
    assert out.returncode == 0, out.stderr
    (row,) = list(csv.DictReader((tmp_path / "t.csv").open()))
    assert (row["preset"], row["n_envs"], row["timesteps"]) == (str(variant), "2", "32")
    variant.write_text("base: quick\nn_envs: lots\n")
    code, _, err = cli_here(main, ["--mode", "train", "--preset", str(variant), "--rollouts", "1"])
    assert code == 2 and "n_envs" in err and len(err.strip().splitlines()) == 1


def test_env_sweep_measures_the_native_env_on_each_thread_count(tmp_path: Path, cli_here: CliHere) -> None:
    cmd = [sys.executable, "-m", "mission_gym.scripts.bench", "--mode", "env", "--vec-env", "single", "native",
           "--n-envs", "16", "--threads", "1", "2", "--seconds", "0.2", "--csv", str(tmp_path / "e.csv")]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    rows = list(csv.DictReader((tmp_path / "e.csv").open()))
    assert [(r["vec_env"], r["threads"], r["n_envs"]) for r in rows] == [("single", "1", "1"), ("native", "1", "16"),
                                                                       ("native", "2", "16")]  # fmt: skip
    assert all(float(r["steps_per_s"]) > 0 and float(r["vs_single"]) > 0 for r in rows)
    code, _, err = cli_here(main, ["--mode", "env", "--threads", "0"])
    assert code == 2 and "--threads" in err and len(err.strip().splitlines()) == 1


def test_baseline_times_sb3_defaults_on_the_presets_env(tmp_path: Path) -> None:
    """--baseline sb3-defaults: SB3's PPO as it comes (1 env, 2,048 steps, minibatches of 64) on the preset's env,
    timed right after the preset, and the preset's speed-up over it printed."""
    pytest.importorskip("mujoco")
    out = run_bench("--preset", "hopper", "--rollouts", "1", "--seconds", "0.1", "--device", "cpu",
                    "--baseline", "sb3-defaults", "--csv", str(tmp_path / "b.csv"))  # fmt: skip
    assert out.returncode == 0, out.stderr
    rows = list(csv.DictReader((tmp_path / "b.csv").open()))
    assert [r["algo"] for r in rows] == ["lean", "sb3-defaults"]
    preset, base = rows
    assert {r["env"] for r in rows} == {"Hopper-v5"}
    assert (preset["vec_env"], preset["n_envs"]) == ("native", "8")  # the preset's own batching
    assert (base["vec_env"], base["n_envs"], base["batch_size"], base["timesteps"]) == ("dummy", "1", "64", "2048")
    assert all(float(r["fps"]) > 0 and float(r["cpu_fps"]) > 0 and float(r["env_steps_per_s"]) > 0 for r in rows)
    ratio = float(preset["fps"]) / float(base["fps"])
    assert "hopper (lean, native, 8 envs) on Hopper-v5: " in out.stdout and f"= {ratio:.2f}x" in out.stdout
    assert "per CPU second" in out.stdout


def test_placement_runs_members_side_by_side(tmp_path: Path, cli_here: CliHere) -> None:
    cmd = [sys.executable, "-m", "mission_gym.scripts.bench", "--mode", "placement", "--preset", "quick",
           "--placements", "1x1", "2x1", "--rollouts", "1", "--csv", str(tmp_path / "p.csv")]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    rows = list(csv.DictReader((tmp_path / "p.csv").open()))
    assert [(r["members"], r["threads"]) for r in rows] == [("1", "1"), ("2", "1")]
    two = rows[1]
    assert float(two["total_steps_per_s"]) == pytest.approx(2 * float(two["member_steps_per_s"]))
    code, _, err = cli_here(main, ["--mode", "placement", "--preset", "quick", "--placements", "2y1"])
    assert code == 2 and "MEMBERSxTHREADS" in err
