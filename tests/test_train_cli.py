"""``python -m mission_gym.scripts.train_ppo`` end to end: a quick Mission Gym run, bad input, signals,
resume after SIGKILL, and a crashing env worker. Each test runs the CLI in a subprocess."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import warm_cli

from mission_gym.rundir.directory import RunDir
from mission_gym.scripts.train_ppo import main

CLI = [sys.executable, "-m", "mission_gym.scripts.train_ppo"]
# A CartPole run that keeps going until stopped; checkpoints every rollout (2 envs x 64 steps).
LONG_CARTPOLE = [
    "--preset", "quick", "--env", "CartPole-v1", "--vec-env", "dummy", "--n-envs", "2", "--n-steps", "64",
    "--timesteps", "1000000", "--save-freq", "128", "--eval-freq", "0", "--no-progress",
]  # fmt: skip
CRASHY_ENV = '''
import gymnasium as gym
from gymnasium.envs.classic_control import CartPoleEnv

class Crashy(CartPoleEnv):
    """CartPole whose step raises after 150 calls."""
    calls = 0

    def step(self, action):
        Crashy.calls += 1
        if Crashy.calls > 150:
            raise RuntimeError("boom from the env worker")
        return super().step(action)

gym.register("Crashy-v0", entry_point=Crashy, max_episode_steps=500)
'''


def run_cli(
    args: list[str], cwd: Path, timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return warm_cli.run(CLI + args, cwd, timeout, env=env)


def start_cli(args: list[str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(CLI + args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_checkpoints(run: Path, n: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while len(RunDir(run).checkpoints()) < n or RunDir(run).latest_checkpoint()[0] < 128 * n:
        if proc.poll() is not None:
            raise AssertionError(f"trainer exited early ({proc.returncode}): {proc.stderr.read()}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("no checkpoint in time")
        time.sleep(0.1)


def progress_steps(run: Path) -> list[int]:
    with open(run / "progress.csv") as f:
        return [int(float(r["time/total_timesteps"])) for r in csv.DictReader(f) if r.get("time/total_timesteps")]


def test_help_lists_every_flag(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    flags = (
        "--preset --env --timesteps --n-envs --n-steps --batch-size --n-epochs --network-arch --vec-env --device --seed "
        "--run-name --runs-dir --eval-freq --eval-episodes --save-freq --keep-checkpoints --resume --parent-checkpoint "
        "--branch-name --notes --hyperparams --env-kwargs --num-threads --no-tensorboard --no-progress --stop-at "
        "--no-memory-check"
    )
    for flag in flags.split():
        assert flag in out, flag


def test_quick_preset_leaves_a_complete_run(tmp_path):
    proc = run_cli(["--preset", "quick", "--run-name", "q", "--no-progress"], tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    run = tmp_path / "runs" / "q"
    expected = ["config.yaml", "command.txt", "metadata.json", "lineage.json", "best_model.zip", "final_model.zip"]
    expected += ["progress.csv", "evaluations.csv"]
    for name in expected:
        assert (run / name).is_file(), name
    assert RunDir(run).checkpoints() and list((run / "tb").iterdir())
    assert json.loads((run / "metadata.json").read_text())["status"] == "finished"
    assert "finished: 2,048 / 2,048 steps" in proc.stdout and "steps/s" in proc.stdout and "win rate" in proc.stdout
    assert proc.stdout.count("n_epochs: 2") == 1  # the resolved configuration, printed once
    # where to look next: the run's page and the held-out evaluation, a command that works as printed
    assert f"dashboard {Path('runs') / 'q' / 'dashboard.html'}" in proc.stdout
    assert f"python -m mission_gym.scripts.evaluate {Path('runs') / 'q'} --episodes 1000" in proc.stdout
    with open(run / "progress.csv") as f:
        header = next(csv.reader(f))
    for tag in ("mission/win_rate", "mission/outcome_timeout", "reward/win_bonus", "time/rollout_s", "time/train_s"):
        assert tag in header, tag
    assert "mission_gym.scripts.train_ppo --preset quick" in (run / "command.txt").read_text()


def test_a_run_that_reaches_stop_return_finishes_there_with_its_evaluated_model(tmp_path):
    # CartPole-v1 scores at least 5 an episode (its pole falls in no fewer steps): the first evaluation (at 256 steps)
    # reaches 5 whatever the policy
    args = ["--env", "CartPole-v1", "--timesteps", "100000", "--n-envs", "2", "--n-steps", "128", "--eval-freq", "256",
            "--eval-episodes", "2", "--hyperparams", "stop_return=5", "--run-name", "s", "--no-progress"]  # fmt: skip
    proc = run_cli(args, tmp_path)
    assert proc.returncode == 0, proc.stderr
    run = tmp_path / "runs" / "s"
    assert json.loads((run / "metadata.json").read_text())["status"] == "finished"
    assert "finished: 258 / 100,000 steps" in proc.stdout  # the evaluated model and one step of the next rollout
    assert "finished early: the evaluation at 256 steps scored" in proc.stdout and "stop_return 5" in proc.stdout
    with open(run / "evaluations.csv") as f:
        assert [int(r["timesteps"]) for r in csv.DictReader(f)] == [256]  # no other evaluation at the end
    assert (run / "final_model.zip").is_file() and (run / "best_model.zip").is_file()


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--preset", "fsat"], "unknown preset 'fsat' (did you mean 'fast'?)"),
        (["--env", "Hoper-v5"], "did you mean 'Hopper-v5'?"),
        (["--vec-env", "nativ"], "did you mean 'native'?"),
        (["--batch-size", "100"], "nearest valid: 32, 64, 128, 256 (or auto)"),
        (["--batch-size", "lots"], "expected a positive integer or 'auto'"),
        (["--n-envs", "0"], "n_envs"),
        (["--network-arch", "64,big"], "network_arch"),
        (["--hyperparams", "learnin_rate=1e-3"], "did you mean 'learning_rate'?"),
        (["--hyperparams", "gamma"], "expected key=value"),
        (["--env-kwargs", "rewrd.win_bonus=1"], "did you mean 'reward'?"),
        (["--env-kwargs", "reward.win_bonnus=1"], "win_bonnus"),
        (["--env", "MountainCar-v0", "--vec-env", "native"], "native"),
        (["--device", "cuda:7"], "cuda:7"),
        (["--parent-checkpoint", "nowhere.zip", "--branch-name", "b"], "nowhere.zip"),
        (["--parent-checkpoint", "nowhere.zip"], "--branch-name"),
        (["--resume", "nosuchrun"], "no run 'nosuchrun'"),
        (["--run-name", "a/b"], "--run-name"),
        (
            ["--hyperparams", "curriculum=[{setting: engagement.capture.time_to_captur, value: 5, until: 1024}]"],
            "did you mean 'time_to_capture'?",
        ),
        (
            ["--hyperparams", "curriculum=[{setting: engagement.capture.time_to_capture, value: -5, until: 1024}]"],
            "time_to_capture -5 at the start is not valid",
        ),
        (["--hyperparams", "curriculum=[{setting: engagement.capture.contested, value: 1, until: 1024}]"], "not a number"),
        (["--hyperparams", "phases=[{start: 4096, learning_rate: 1e-4}]"], "step 4,096 is not inside the run's 2,048"),
        (
            ["--hyperparams", "phases=[{start: 0.5, learning_rate: 1e-4}]"],
            "schedule positions are env steps, got the fraction",
        ),
        (["--hyperparams", "curriculum=[{setting: world.observation.lidar_rays, value: 4, until: 1024}]"], "obs_dim"),
        (["--env", "CartPole-v1", "--hyperparams", "curriculum=[{setting: a.b, value: 1, until: 1024}]"], "CartPole-v1"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_no_run_dir(tmp_path, cli_here, args, expected):
    full = ["--preset", "quick", "--no-progress", *args] if "--preset" not in args and "--resume" not in args else args
    code, _, err = cli_here(main, full)
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert expected in err, err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_bad_preset_file_in_subprocess(tmp_path):
    (tmp_path / "mine.yaml").write_text("n_envs: 4\nlearning_rate: fast\n")
    proc = run_cli(["--preset", "mine.yaml"], tmp_path, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "mine.yaml: learning_rate" in proc.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_saves_a_checkpoint(tmp_path, sig, code):
    proc = start_cli([*LONG_CARTPOLE, "--run-name", "s"], tmp_path)
    run = tmp_path / "runs" / "s"
    wait_for_checkpoints(run, 1, proc)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    meta = json.loads((run / "metadata.json").read_text())
    assert meta["status"] == "interrupted"
    last = RunDir(run).latest_checkpoint()
    assert last is not None and last[0] == meta["timesteps"] > 0  # saved at the step it stopped
    assert "interrupted" in out and f"continue: python -m mission_gym.scripts.train_ppo --resume {Path('runs') / 's'}" in out


def test_resume_after_sigkill_continues_steps_and_curves(tmp_path):
    proc = start_cli([*LONG_CARTPOLE, "--run-name", "k"], tmp_path)
    run = tmp_path / "runs" / "k"
    wait_for_checkpoints(run, 2, proc)
    time.sleep(0.3)  # let it log past the checkpoint
    proc.kill()
    proc.wait(timeout=30)
    ckpt_step = RunDir(run).latest_checkpoint()[0]
    target = ckpt_step + 256
    done = run_cli(["--resume", "k", "--timesteps", str(target), "--no-progress"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"resuming {Path('runs') / 'k'} from step {ckpt_step:,}" in done.stdout
    steps = progress_steps(run)
    assert steps == list(range(128, target + 1, 128))  # no reset, no overlap, one row per step
    meta = json.loads((run / "metadata.json").read_text())
    assert meta["status"] == "finished" and meta["timesteps"] == target and len(meta["sessions"]) == 1
    from stable_baselines3 import PPO

    assert PPO.load(run / "final_model.zip").num_timesteps == target
    # TensorBoard's step axis continues from the checkpoint (events a killed process wrote after it are purged)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / "tb"))
    acc.Reload()
    tb_steps = [e.step for e in acc.Scalars("time/rollout_s")]
    assert tb_steps == sorted(tb_steps) and tb_steps[0] == 128 and tb_steps[-1] == target


def test_resume_refuses_changing_the_recipe(cli_here):
    code, _, err = cli_here(main, ["--resume", "r", "--n-epochs", "3"])
    assert code == 2 and "branch" in err and err.count("\n") == 1


def test_crashing_env_worker(tmp_path):
    (tmp_path / "crashy.py").write_text(CRASHY_ENV)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    args = [*LONG_CARTPOLE, "--env", "crashy:Crashy-v0", "--vec-env", "subproc", "--run-name", "c"]
    proc = run_cli(args, tmp_path, env=env, timeout=120)
    assert proc.returncode == 1
    assert "boom from the env worker" in proc.stderr  # the child's traceback
    assert "env worker process died" in proc.stdout
    run = tmp_path / "runs" / "c"
    assert json.loads((run / "metadata.json").read_text())["status"] == "crashed"
    assert RunDir(run).latest_checkpoint() is not None
