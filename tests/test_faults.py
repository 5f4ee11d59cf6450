"""Fault suite: what users and machines do to real tiny runs, and how a run survives it.

SIGKILL at several moments (a rollout, a checkpoint write, an evaluation, a population cut) followed by ``--resume``,
a second command on a run being written, a parent killed with its members and jobs running, a damaged checkpoint, a
full disk, a run too big for the machine's memory. Faults are injected by a ``sitecustomize`` module put first on
the ``PYTHONPATH`` of the processes a test starts (:data:`HOOKS`, driven by ``FAULT_*`` variables); seeds are fixed,
so a failure reproduces.
"""

from __future__ import annotations

import csv
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import warm_cli

from mission_gym.rundir.directory import RunDir, vecnormalize_path

CLI = [sys.executable, "-m", "mission_gym.scripts.train_ppo"]
# CartPole that checkpoints every rollout (2 envs x 64 steps) and goes on until stopped
CARTPOLE = [
    "--preset", "quick", "--env", "CartPole-v1", "--vec-env", "dummy", "--n-envs", "2", "--n-steps", "64",
    "--save-freq", "128", "--keep-checkpoints", "3", "--eval-freq", "0", "--no-progress", "--no-tensorboard",
    "--seed", "3",
]  # fmt: skip
FOREVER = ["--timesteps", "10000000"]

HOOKS = '''
"""Fault injection for tests/test_faults.py (see there)."""
import errno
import os
import time

_fsync = os.fsync
_saves = [0]
FULL_AFTER = int(os.environ.get("FAULT_DISK_FULL_AFTER_CHECKPOINTS", "-1"))
SLOW_FROM = int(os.environ.get("FAULT_SLOW_CHECKPOINT_FROM", "0"))


def _fault_fsync(fd):
    try:
        path = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        path = ""
    checkpoint = "/checkpoints/.ckpt_" in path and ".zip.tmp" in path
    if FULL_AFTER >= 0 and _saves[0] >= FULL_AFTER:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # the disk is full: nothing more reaches it
    if checkpoint:
        _saves[0] += 1
        if SLOW_FROM and _saves[0] >= SLOW_FROM:
            time.sleep(60)  # a checkpoint being written, long enough to be killed in the middle
    return _fsync(fd)


os.fsync = _fault_fsync
'''

# CartPole whose in-training evaluation (its episodes are seeded from EVAL_SEED_BASE) is slow and says so
SLOW_EVAL_ENV = """
import os
import time

import gymnasium as gym
from gymnasium.envs.classic_control import CartPoleEnv


class SlowEval(CartPoleEnv):
    def reset(self, *, seed=None, options=None):
        if seed is not None and seed >= 500_000_000 and os.environ.get("FAULT_EVAL_MARKER"):
            open(os.environ["FAULT_EVAL_MARKER"], "a").close()
            time.sleep(60)
        return super().reset(seed=seed, options=options)


gym.register("SlowEval-v0", entry_point=SlowEval, max_episode_steps=500)
"""

# CartPole whose step hangs (a stuck simulator) from the 200th step of each worker on
STUCK_ENV = """
import os
import time

import gymnasium as gym
from gymnasium.envs.classic_control import CartPoleEnv


class Stuck(CartPoleEnv):
    calls = 0

    def step(self, action):
        Stuck.calls += 1
        if Stuck.calls >= 200:
            open(os.environ["FAULT_STUCK_MARKER"], "a").close()
            time.sleep(120)
        return super().step(action)


gym.register("Stuck-v0", entry_point=Stuck, max_episode_steps=500)
"""


def fault_env(tmp_path: Path, **faults: str) -> dict[str, str]:
    """The environment of a process with the fault hooks (and ``tmp_path``'s modules) importable."""
    hooks = tmp_path / "hooks"
    hooks.mkdir(exist_ok=True)
    (hooks / "sitecustomize.py").write_text(HOOKS)
    path = os.pathsep.join([str(hooks), str(tmp_path), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, **faults}


def run_cli(
    args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    return warm_cli.run(CLI + args, cwd, timeout, env=env)


def start_cli(args: list[str], cwd: Path, env: dict[str, str] | None = None, module: str = "") -> subprocess.Popen:
    argv = [sys.executable, "-m", module, *args] if module else CLI + args
    return subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def wait_for(condition, proc: subprocess.Popen | None, what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"exited early ({proc.returncode}) waiting for {what}: {proc.stderr.read()}")
        if time.monotonic() > deadline:
            if proc is not None:
                proc.kill()
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def kill9(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def loads(checkpoint: Path) -> bool:
    """Whether a checkpoint loads as a model, with its VecNormalize statistics."""
    import pickle

    from stable_baselines3 import PPO

    try:
        PPO.load(checkpoint, device="cpu")
        with open(vecnormalize_path(checkpoint), "rb") as f:
            pickle.load(f)
    except Exception:
        return False
    return True


def steps_of(path: Path, column: str = "time/total_timesteps") -> list[int]:
    with open(path, newline="") as f:
        return [int(float(r[column])) for r in csv.DictReader(f) if r.get(column)]


def alive(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


# generous: an orphan never ends, and a member saving its checkpoint on a loaded 2-core machine takes seconds
def wait_gone(pids: list[int], timeout: float = 60) -> list[int]:
    deadline = time.monotonic() + timeout
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return alive(pids)


def assert_resumes_continuously(run: Path, cwd: Path, env: dict[str, str] | None = None, extra: int = 256) -> str:
    """``--resume`` the run ``extra`` steps past its newest good checkpoint: it starts there and ends at the target;
    its curve keeps the rows up to that checkpoint and goes on with one row per rollout (nothing missing, nothing
    twice, steps strictly increasing)."""
    good = [(s, p) for s, p in RunDir(run).checkpoints() if loads(p)]
    step = good[-1][0]
    target = step + extra
    before = [s for s in steps_of(run / "progress.csv") if s <= step]
    done = run_cli(["--resume", run.name, "--timesteps", str(target), "--no-progress"], cwd, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"from step {step:,}" in done.stdout, done.stdout
    steps = steps_of(run / "progress.csv")
    assert before and before[-1] == step  # the checkpoint's own row is there
    assert steps == before + list(range(step + 128, target + 1, 128)), (step, steps)
    evals = steps_of(run / "evaluations.csv", "timesteps") if (run / "evaluations.csv").is_file() else []
    assert evals == sorted(set(evals)) and all(s <= target for s in evals)
    meta = json.loads((run / "metadata.json").read_text())
    assert meta["status"] == "finished" and meta["timesteps"] == target
    assert not list(run.rglob(".*.tmp*")), "a temporary file was left behind"
    assert (run / ".lock").read_text() == ""  # released at the end
    return done.stdout


# --- SIGKILL at several moments, then --resume --------------------------------------------------------------------
def test_sigkill_during_a_rollout_then_resume(tmp_path):
    proc = start_cli([*CARTPOLE, *FOREVER, "--run-name", "k"], tmp_path)
    run = tmp_path / "runs" / "k"
    wait_for(lambda: len(RunDir(run).checkpoints()) >= 2, proc, "two checkpoints")
    time.sleep(random.Random(3).uniform(0.05, 0.3))  # somewhere in a rollout, the same moment each time
    kill9(proc)
    out = assert_resumes_continuously(run, tmp_path)
    assert "no longer holds it; taking it over" in out  # the killed process's lock, reported


def test_sigkill_during_a_checkpoint_write_then_resume(tmp_path):
    env = fault_env(tmp_path, FAULT_SLOW_CHECKPOINT_FROM="3")  # the third checkpoint takes a minute to write
    proc = start_cli([*CARTPOLE, *FOREVER, "--run-name", "w"], tmp_path, env)
    run = tmp_path / "runs" / "w"
    wait_for(lambda: list((run / "checkpoints").glob(".ckpt_384_steps.zip.tmp*")), proc, "the third checkpoint's write")
    kill9(proc)
    assert [s for s, _ in RunDir(run).checkpoints()] == [128, 256]  # the one being written is not a checkpoint
    assert not (run / "checkpoints" / "ckpt_vecnormalize_384_steps.pkl").exists()  # nor are its statistics
    out = assert_resumes_continuously(run, tmp_path)
    assert "left by a writer that was killed mid-write" in out


def test_sigkill_during_an_evaluation_then_resume(tmp_path):
    (tmp_path / "slowcart.py").write_text(SLOW_EVAL_ENV)
    marker = tmp_path / "evaluating"
    env = fault_env(tmp_path, FAULT_EVAL_MARKER=str(marker))
    args = [*CARTPOLE, *FOREVER, "--env", "slowcart:SlowEval-v0", "--eval-freq", "256", "--run-name", "e"]
    proc = start_cli(args, tmp_path, env)
    run = tmp_path / "runs" / "e"
    wait_for(marker.exists, proc, "an evaluation")
    kill9(proc)
    # rows cut short, as a kill in the middle of an append leaves them
    with open(run / "evaluations.csv", "a") as f:
        f.write("3")
    with open(run / "progress.csv", "a") as f:
        f.write("0.1,0.2")
    del env["FAULT_EVAL_MARKER"]  # the resumed session's evaluations are quick
    assert_resumes_continuously(run, tmp_path, env)
    with open(run / "evaluations.csv", newline="") as f:
        assert all(r["mean_return"] and r["n_episodes"] for r in csv.DictReader(f))


def test_sigkill_a_population_at_a_cut_then_resume(tmp_path):
    pop = "population={size: 2, cuts: [{at: 256, keep: 1}], episodes: 2}"
    proc = start_cli([*CARTPOLE, "--timesteps", "512", "--run-name", "p", "--hyperparams", pop], tmp_path)
    run = tmp_path / "runs" / "p"
    metas = [run / "members" / m / "metadata.json" for m in ("m0", "m1")]

    def at_the_cut() -> bool:  # every member paused at the cut: the parent scores them now
        return all(m.is_file() and json.loads(m.read_text()).get("status") == "paused" for m in metas)

    wait_for(at_the_cut, proc, "the members at the cut")
    kill9(proc)
    done = run_cli(["--resume", "p", "--no-progress"], tmp_path, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no longer holds it; taking it over" in done.stdout
    cut, end = json.loads((run / "population.json").read_text())["cuts"]
    assert cut["step"] == 256 and len(cut["kept"]) == 1 and end["best"]["member"] == cut["kept"][0]
    winner = run / "members" / cut["kept"][0]
    steps = steps_of(winner / "progress.csv")
    assert steps == sorted(set(steps)) and steps[-1] >= 512
    assert (run / "final_model.zip").read_bytes() == (winner / "final_model.zip").read_bytes()
    assert json.loads((run / "metadata.json").read_text())["status"] == "finished"


# --- a second command on a run being written ------------------------------------------------------------------------
def test_a_second_writer_is_refused_and_readers_are_not(tmp_path, cli_here):
    from mission_gym.scripts.evaluate import main as evaluate
    from mission_gym.scripts.train_ppo import main as train

    proc = start_cli([*CARTPOLE, *FOREVER, "--run-name", "dup"], tmp_path)
    run = tmp_path / "runs" / "dup"
    try:
        wait_for(lambda: RunDir(run).checkpoints(), proc, "a checkpoint")
        holder = json.loads((run / ".lock").read_text())
        assert holder["pid"] == proc.pid and "--run-name dup" in holder["command"] and holder["since"]
        # the refusals and the reader in this process: the run's holder is another process all the same
        code, _, err = cli_here(train, ["--resume", "dup", "--no-progress"])
        assert code == 2 and err.count("\n") == 1, err
        assert f"pid {proc.pid} on " in err and "--run-name dup" in err and "since" in err
        code, _, err = cli_here(train, [*CARTPOLE, *FOREVER, "--run-name", "dup"])
        assert code == 2 and "already exists" in err
        # read-only commands never need the lock
        code, _, err = cli_here(evaluate, ["dup", "--episodes", "2"])
        assert code == 0, err
        assert proc.poll() is None and json.loads((run / ".lock").read_text())["pid"] == proc.pid
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    assert proc.returncode == 143 and (run / ".lock").read_text() == ""  # a clean end frees the run
    resumed = run_cli(["--resume", "dup", "--timesteps", str(RunDir(run).latest_checkpoint()[0] + 128)], tmp_path)
    assert resumed.returncode == 0 and "taking it over" not in resumed.stdout, resumed.stderr


# --- orphans: a parent killed with its members or jobs running -------------------------------------------------------
def test_sigkill_of_a_population_parent_leaves_no_process(tmp_path, cli_here):
    from mission_gym.scripts.train_ppo import main as train

    pop = "population={size: 2, cuts: [{at: 5000000, keep: 1}], episodes: 2}"
    proc = start_cli([*CARTPOLE, *FOREVER, "--run-name", "p", "--hyperparams", pop], tmp_path)
    run = tmp_path / "runs" / "p"
    members = [RunDir(run / "members" / m) for m in ("m0", "m1")]
    wait_for(lambda: all(m.checkpoints() for m in members), proc, "a checkpoint of every member")
    tree = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
    # the parent holds the run's lock, each member its own directory's
    assert json.loads((run / ".lock").read_text())["pid"] == proc.pid
    member_pids = {json.loads((m / ".lock").read_text())["pid"] for m in members}
    assert len(member_pids) == 2 and member_pids <= set(tree)
    code, _, err = cli_here(train, ["--resume", "p"])
    assert code == 2 and f"pid {proc.pid} on " in err, err
    kill9(proc)
    assert wait_gone(tree) == [], "processes outlived their population's parent"
    for m in members:  # each member got SIGTERM from the kernel: it saved a checkpoint on its way out
        meta = json.loads((m / "metadata.json").read_text())
        assert meta["status"] == "interrupted" and m.latest_checkpoint()[0] == meta["timesteps"]
        assert (m / ".lock").read_text() == ""


def test_sigkill_of_a_trainer_ends_its_env_workers_even_in_the_middle_of_a_step(tmp_path):
    (tmp_path / "stuck.py").write_text(STUCK_ENV)
    marker = tmp_path / "stuck"
    env = fault_env(tmp_path, FAULT_STUCK_MARKER=str(marker))
    args = [*CARTPOLE, *FOREVER, "--env", "stuck:Stuck-v0", "--vec-env", "subproc", "--run-name", "s"]
    proc = start_cli(args, tmp_path, env)
    wait_for(marker.exists, proc, "a worker stuck in a step")
    tree = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
    assert len(tree) >= 3  # the forkserver and two workers
    kill9(proc)
    assert wait_gone(tree, timeout=10) == [], "env workers outlived their trainer"


@pytest.mark.slow  # ~30 s; the kernel's SIGTERM to jobs is the same as the population's members (above)
def test_sigkill_of_the_launcher_leaves_no_job(tmp_path):
    runs = tmp_path / "runs"
    args = ["--no-live", "--jobs", "2", "--preset", "quick", "--name", "j", "--max-parallel", "2", "--runs-dir", str(runs)]
    train = [*FOREVER, "--env", "CartPole-v1", "--vec-env", "subproc", "--n-envs", "2", "--n-steps", "64"]
    train += ["--save-freq", "128", "--eval-freq", "0", "--no-tensorboard"]
    proc = start_cli([*args, "--", *train], tmp_path, module="mission_gym.scripts.launch")
    jobs = [RunDir(runs / n) for n in ("j-s0", "j-s1")]
    wait_for(lambda: all(j.checkpoints() for j in jobs), proc, "a checkpoint of every job")
    tree = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
    assert len(tree) >= 4  # two train_ppo processes and their env workers
    kill9(proc)
    assert wait_gone(tree) == [], "jobs outlived their launcher"
    for j in jobs:
        meta = json.loads((j / "metadata.json").read_text())
        assert meta["status"] == "interrupted" and j.latest_checkpoint()[0] == meta["timesteps"]


# --- damaged checkpoints ---------------------------------------------------------------------------------------------
def paused_run(tmp_path: Path, name: str) -> RunDir:
    done = run_cli([*CARTPOLE, "--timesteps", "1024", "--stop-at", "512", "--run-name", name], tmp_path)
    assert done.returncode == 0, done.stderr
    run = RunDir(tmp_path / "runs" / name)
    assert [s for s, _ in run.checkpoints()] == [384, 512, 514]
    return run


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_a_damaged_newest_checkpoint_is_skipped(tmp_path):
    run = paused_run(tmp_path, "d")
    newest = run.checkpoints()[-1][1]
    truncate(newest)
    out = assert_resumes_continuously(run.path, tmp_path)
    assert f"{newest.relative_to(tmp_path)} does not load (" in out and "set aside as ckpt_514_steps.zip.damaged" in out
    assert (run.checkpoints_dir / "ckpt_514_steps.zip.damaged").is_file()


def test_no_checkpoint_that_loads_is_exit_2_listing_each(tmp_path):
    run = paused_run(tmp_path, "n")
    for _, path in run.checkpoints():
        truncate(path)
    done = run_cli(["--resume", "n", "--no-progress"], tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "no checkpoint loads" in done.stderr and "Traceback" not in done.stderr
    for name in ("ckpt_384_steps.zip", "ckpt_512_steps.zip", "ckpt_514_steps.zip"):
        assert name in done.stderr
    assert [s for s, _ in run.checkpoints()] == [384, 512, 514]  # left as they were
    assert (run / ".lock").read_text() == ""


# --- a full disk -----------------------------------------------------------------------------------------------------
def test_a_full_disk_keeps_the_previous_checkpoint_and_stops_with_one_line(tmp_path):
    env = fault_env(tmp_path, FAULT_DISK_FULL_AFTER_CHECKPOINTS="2")
    done = run_cli([*CARTPOLE, *FOREVER, "--run-name", "full"], tmp_path, env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in (done.stdout + done.stderr).splitlines() if "No space left on device" in line]
    assert len(lines) == 1 and "disk full" in lines[0] and "--resume" in lines[0], done.stdout + done.stderr
    run = RunDir(tmp_path / "runs" / "full")
    assert [s for s, _ in run.checkpoints()] == [128, 256]
    assert all(loads(p) for _, p in run.checkpoints())
    stats = sorted(p.name for p in run.checkpoints_dir.glob("ckpt_vecnormalize_*"))
    assert stats == ["ckpt_vecnormalize_128_steps.pkl", "ckpt_vecnormalize_256_steps.pkl"]  # none without its model
    assert not list(run.path.rglob(".*.tmp*"))
    del env["FAULT_DISK_FULL_AFTER_CHECKPOINTS"]  # space freed
    assert_resumes_continuously(run.path, tmp_path, env)


# --- memory admission ------------------------------------------------------------------------------------------------
def test_a_run_too_big_for_the_memory_is_refused_before_anything_is_allocated(tmp_path):
    done = run_cli(["--preset", "quick", "--n-envs", "100000000", "--no-progress"], tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    err = done.stderr
    assert "n_envs 100,000,000" in err and "memory estimate is" in err and "available" in err, err
    assert "the largest n_envs that fits is" in err and "--no-memory-check" in err
    assert not (tmp_path / "runs").exists()


def test_memory_refusal_names_the_estimate_what_is_available_and_the_largest_n_envs():
    from dataclasses import replace

    from mission_gym.hardware import GB
    from mission_gym.settings.memory import RunShape, estimate_memory
    from mission_gym.settings.sizing import memory_refusal

    shape = RunShape(n_envs=100_000, n_steps=256, batch_size=4096, net_arch=(64, 64), vec_env="dummy")
    assert memory_refusal(shape, 1e15) is None
    why = memory_refusal(shape, 4 * GB)
    assert why is not None and "of host RAM where 4.0 GiB is available" in why
    largest = int(why.split("the largest n_envs that fits is ")[1].split()[0].replace(",", ""))
    assert estimate_memory(replace(shape, n_envs=largest)).host_bytes <= 4 * GB
    assert estimate_memory(replace(shape, n_envs=largest + 1)).host_bytes > 4 * GB
    on_gpu = replace(shape, device="cuda:0", n_envs=64)
    assert memory_refusal(on_gpu, 1e15, 1e15) is None
    gpu_why = memory_refusal(on_gpu, 1e15, 0.1 * GB)
    assert gpu_why is not None and "on cuda:0 where 102 MB is free" in gpu_why and "not even n_envs 1 fits" in gpu_why


def test_no_memory_check_skips_the_admission(tmp_path, monkeypatch, capsys):
    import mission_gym.settings.sizing as sizing
    from mission_gym.scripts.train_ppo import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sizing, "memory_available", lambda device: (1e6, None))  # a machine with 1 MB free
    args = [*CARTPOLE, "--timesteps", "128", "--run-name", "m"]
    assert main(args) == 2 and "does not fit this machine" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
    assert main([*args, "--no-memory-check"]) == 0
    assert RunDir(tmp_path / "runs" / "m").checkpoints()


# --- checking a configuration starts no process ----------------------------------------------------------------------
def test_checking_a_subproc_configuration_starts_no_process():
    from mission_gym.plan.presets import load_preset
    from mission_gym.settings.overrides import apply_overrides
    from mission_gym.settings.resolve import resolve
    from mission_gym.training.build import build_run

    config = apply_overrides(load_preset("quick"), {"env": "CartPole-v1", "vec_env": "subproc", "n_envs": 16})
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    setup = build_run(resolve(config))
    try:
        started = [p.pid for p in psutil.Process().children(recursive=True) if p.pid not in before]
        assert started == [] and setup.model.n_envs == 16 and setup.venv.num_envs == 16
    finally:
        setup.close()


def test_the_subproc_env_starts_its_workers_at_the_first_reset_with_their_seeds():
    import numpy as np

    from mission_gym.vec.factory import make_vec_env

    lazy = make_vec_env("CartPole-v1", 2, "subproc", seed=7)
    dummy = make_vec_env("CartPole-v1", 2, "dummy", seed=7)
    try:
        assert not lazy.unwrapped.started
        np.testing.assert_array_equal(lazy.reset(), dummy.reset())
        assert lazy.unwrapped.started and len(lazy.unwrapped.processes) == 2
        np.testing.assert_array_equal(lazy.step(np.array([0, 1]))[0], dummy.step(np.array([0, 1]))[0])
    finally:
        lazy.close()
        dummy.close()


# --- the lock itself -------------------------------------------------------------------------------------------------
def test_the_lock_refuses_a_second_holder_and_reports_a_dead_one(tmp_path, capsys):
    from mission_gym.rundir.lock import RunLock, RunLocked, lock_run

    first = lock_run(tmp_path, "train A")
    with pytest.raises(RunLocked, match=f"being written by pid {os.getpid()} on .* since .*\\(train A\\)"):
        RunLock(tmp_path, "train B").acquire()
    first.release()
    assert (tmp_path / ".lock").read_text() == ""
    with lock_run(tmp_path, "train B"):
        assert json.loads((tmp_path / ".lock").read_text())["command"] == "train B"
    assert "taking it over" not in capsys.readouterr().out
    # a holder that died holding it: its record is still there, the kernel's lock is not
    (tmp_path / ".lock").write_text(json.dumps({"pid": 999999, "host": "elsewhere", "command": "train C", "since": "then"}))
    with lock_run(tmp_path, "train D"):
        pass
    out = capsys.readouterr().out
    assert "locked by pid 999999 on elsewhere since then (train C), which no longer holds it; taking it over" in out


@pytest.mark.slow
def test_sigkill_of_a_ray_driver_ends_its_jobs(tmp_path):
    pytest.importorskip("ray")
    runs = tmp_path / "runs"
    args = ["--no-live", "--backend", "ray", "--jobs", "1", "--preset", "quick", "--name", "r", "--runs-dir", str(runs)]
    train = [*FOREVER, "--env", "CartPole-v1", "--vec-env", "dummy", "--n-envs", "2", "--n-steps", "64"]
    train += ["--save-freq", "128", "--eval-freq", "0", "--no-tensorboard"]
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    proc = start_cli([*args, "--", *train], tmp_path, env, module="mission_gym.scripts.launch")
    job = RunDir(runs / "r-s0")
    wait_for(lambda: job.checkpoints(), proc, "a checkpoint of the Ray job", timeout=240)
    trainer = psutil.Process(json.loads((job / ".lock").read_text())["pid"])  # the job's train_ppo, in a Ray worker
    worker = trainer.parent()
    kill9(proc)
    assert wait_gone([trainer.pid, worker.pid], timeout=30) == [], "the Ray job outlived its driver"
    from mission_gym.rundir.lock import RunLock

    with RunLock(job.path, "test"):  # nothing writes the run any more
        pass


def test_an_orphan_takes_the_repeated_parent_death_signal_as_one_stop_request(monkeypatch):
    """The kernel repeats a dead parent's SIGTERM once per thread of it as each thread exits, and ``getppid`` names the
    dead parent until its last thread has gone; an orphaned trainer must not read the repeats as a second Ctrl-C
    (stop at once, the run left ``running``) nor die of one after its stop (the lock would stay filled): the first
    one disarms the parent-death signal, and a repeat waits for the parent to finish dying and is ignored. A second
    signal to a trainer whose parent lives is still 'stop at once'."""
    from mission_gym.hardware import armed_parent_death_signal, disarm_parent_death_signal, parent_death_signal
    from mission_gym.training import session

    arm = parent_death_signal(signal.SIGTERM, os.getppid())
    assert arm is not None
    real_parent = os.getppid()
    try:
        arm()
        with session.stop_on_signals() as received:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            assert received == [signal.SIGTERM]
            assert armed_parent_death_signal() == 0, "the parent-death signal is still armed after the stop request"
            calls = iter(range(1_000_000))
            # the parent's other threads still exiting: its pid stays the parent for the first few looks
            monkeypatch.setattr(session.os, "getppid", lambda: real_parent + (next(calls) >= 5))
            for _ in range(3):
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.05)
            assert received == [signal.SIGTERM]
        monkeypatch.undo()
        arm()
        monkeypatch.setattr(session, "PARENT_EXIT_WAIT_S", 0.05)
        with pytest.raises(KeyboardInterrupt), session.stop_on_signals():  # the parent lives: a second request
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)
    finally:
        disarm_parent_death_signal()
    with pytest.raises(KeyboardInterrupt), session.stop_on_signals():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
