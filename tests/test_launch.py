"""The parallel job launcher: job lists, admission, the local pool (with stand-in children and with real quick
train_ppo runs), Ctrl-C handling and the Ray backend."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from mission_gym.config.yaml_io import ConfigError
from mission_gym.launch.jobs import Job, args_to_argv, flag_value, jobs_from_flags, load_jobs
from mission_gym.launch.local import LocalLauncher
from mission_gym.launch.report import read_last_progress
from mission_gym.launch.resources import CoreAllocator, GpuInfo, default_max_parallel
from mission_gym.scripts import launch as launch_cli

REPO = Path(__file__).resolve().parent.parent


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


# --- job lists ---------------------------------------------------------------------------------------------------
def test_jobs_file_expands_one_job_per_seed(tmp_path):
    f = write(
        tmp_path / "jobs.yaml",
        """
        defaults:
          preset: quick
          cpus: 1
          args: {timesteps: 2000, device: cpu}
        jobs:
          - name: base
            seeds: [0, 1]
          - name: hop
            env: Hopper-v5
            gpus: 0.25
            args:
              timesteps: 5000
              no-tensorboard: true
              hyperparams: {learning_rate: 3e-4, ent_coef: 0.01}
    """,
    )
    jobs = load_jobs(f, extra_args=["--n-envs", "8"])
    assert [j.name for j in jobs] == ["base-s0", "base-s1", "hop"]
    assert [j.seed for j in jobs] == [0, 1, None]
    base, hop = jobs[0], jobs[2]
    assert base.preset == "quick" and base.flag("seed") == "0" and base.flag("timesteps") == "2000"
    assert base.flag("n-envs") == "8" and base.cpus == 1 and base.gpus is None
    assert hop.flag("env") == "Hopper-v5" and hop.flag("timesteps") == "5000" and hop.gpus == 0.25
    assert "--no-tensorboard" in hop.args
    i = hop.args.index("--hyperparams")
    assert hop.args[i + 1 : i + 3] == ("learning_rate=0.0003", "ent_coef=0.01")
    argv = base.train_args("/runs", num_threads=2)
    assert flag_value(argv, "run-name") == "base-s0" and flag_value(argv, "runs-dir") == "/runs"
    assert flag_value(argv, "num-threads") == "2" and "--no-progress" in argv


def test_args_mapping_to_argv():
    argv = args_to_argv(
        {
            "n_envs": 8,
            "no-tensorboard": True,
            "notes": None,
            "no-progress": False,
            "network-arch": "256,256",
            "env-kwargs": {"max_steps": 100},
            "hyperparams": {"gamma": 0.99},
        }
    )
    assert argv == [
        "--n-envs",
        "8",
        "--no-tensorboard",
        "--network-arch",
        "256,256",
        "--env-kwargs",
        "max_steps=100",
        "--hyperparams",
        "gamma=0.99",
    ]


def test_jobs_from_flags():
    jobs = jobs_from_flags(3, "cpu", name="exp", extra_args=["--timesteps", "100"])
    assert [j.name for j in jobs] == ["exp-s0", "exp-s1", "exp-s2"]
    assert all(j.preset == "cpu" and j.flag("timesteps") == "100" for j in jobs)
    assert [j.name for j in jobs_from_flags(None, "quick", [5, 7], name="x")] == ["x-s5", "x-s7"]
    assert jobs_from_flags(1, "heavy")[0].name.startswith("heavy-")


@pytest.mark.parametrize(
    "body, expected",
    [
        ("jobs:\n  - name: a\n    sed: [1]\n", "jobs.0.sed: unknown key"),
        ("jobs:\n  - preset: quick\n", "jobs.0.name: Field required"),
        ("jobs: []\n", "jobs: List should have at least 1 item"),
        ("jobs:\n  - name: a\n    cpus: '2'\n", "jobs.0.cpus"),
        ("jobs:\n  - name: a\n    seeds: [1, 1]\n", "seeds repeat"),
        ("jobs:\n  - name: a\n    args: {run_name: x}\n", "'run_name' is set by the launcher: use the job's `name`"),
        ("jobs:\n  - name: a\n    args: {seed: 3}\n", "use the job's `seeds` list"),
        ("jobs:\n  - name: a b\n", "jobs.0.name: String should match pattern"),
        ("jobs:\n  - name: a-s1\n  - name: a\n    seeds: [1]\n", "two jobs expand to the run name 'a-s1'"),
        ("defaults: {presett: quick}\njobs:\n  - name: a\n", "defaults.presett: unknown key"),
        ("jobs: [\n", "not valid YAML"),
    ],
)
def test_jobs_file_errors_name_file_and_key(tmp_path, body, expected):
    f = tmp_path / "jobs.yaml"
    f.write_text(body)
    with pytest.raises(ConfigError) as info:
        load_jobs(f)
    assert str(f) in str(info.value) and expected in str(info.value)


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--jobs", "2", "--seeds", "1"], "--jobs 2 but 1 seeds given"),
        (["--seeds", "1", "1"], "--seeds repeat"),
        ([], "give a jobs YAML file, or --jobs N"),
        (["--jobs", "2", "--max-parallel", "0"], "--max-parallel must be >= 1"),
        (["--jobs", "1", "--", "--run-name", "x"], "--run-name is set by the launcher"),
        (["--jobs", "1", "--ray-address", "h:1"], "--ray-address needs --backend ray"),
        (["JOBS", "--preset", "quick"], "--preset build jobs from flags"),
        (["nope.yaml"], "nope.yaml: cannot read"),
        (["--jobs", "1", "--", "--timestep", "9"], "unknown train_ppo flag --timestep (did you mean 'timesteps'?)"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, expected):
    jobs = write(tmp_path / "jobs.yaml", "jobs:\n  - name: a\n")
    argv = [str(jobs) if a == "JOBS" else a for a in argv]
    cut = argv.index("--") if "--" in argv else len(argv)
    assert launch_cli.main([*argv[:cut], "--runs-dir", str(tmp_path), *argv[cut:]]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and expected in err and err.count("\n") == 1


def test_cli_refuses_existing_run_dirs_and_dry_run_starts_nothing(tmp_path, capsys):
    (tmp_path / "x-s0").mkdir()
    assert launch_cli.main(["--jobs", "2", "--name", "x", "--runs-dir", str(tmp_path)]) == 2
    assert "already exist" in capsys.readouterr().err
    assert (
        launch_cli.main(
            [
                "--jobs",
                "2",
                "--name",
                "y",
                "--preset",
                "quick",
                "--runs-dir",
                str(tmp_path),
                "--dry-run",
                "--",
                "--timesteps",
                "64",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "max parallel" in out and "--run-name y-s1" in out and "--timesteps 64" in out
    assert not (tmp_path / "y-s0").exists() and not (tmp_path / "_launches").exists()


def test_ray_missing_is_a_clear_exit_2(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    assert launch_cli.main(["--jobs", "1", "--backend", "ray", "--runs-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "needs Ray" in err and "pip install 'mission_gym[ray]'" in err


# --- resources ---------------------------------------------------------------------------------------------------
def test_core_allocator_partitions_then_shares():
    alloc = CoreAllocator([0, 1, 2, 3])
    a, b = alloc.take(2), alloc.take(2)
    assert a == [0, 1] and b == [2, 3]
    assert alloc.take(1) == [0]  # oversubscribed: the least-used core
    alloc.release(b)
    assert alloc.take(2) == [2, 3]


def test_default_max_parallel_takes_the_tightest_limit():
    jobs = [Job(f"j{i}", ("--device", "cpu")) for i in range(4)]
    assert default_max_parallel(jobs, cores=[0, 1], host_free_mb=64_000, gpus=[]).max_parallel == 2
    assert default_max_parallel(jobs, cores=list(range(16)), host_free_mb=64_000, gpus=[]).max_parallel == 4
    tight = default_max_parallel(jobs, cores=list(range(16)), host_free_mb=100, gpus=[])
    assert tight.max_parallel == 1 and "free host RAM" in tight.explain()
    gpu_jobs = [Job(f"g{i}", ("--device", "cuda")) for i in range(8)]
    small_gpu = [GpuInfo(0, "test", 4_000, 1_000)]
    plan = default_max_parallel(gpu_jobs, cores=list(range(16)), host_free_mb=64_000, gpus=small_gpu)
    assert plan.by_gpu is not None and plan.max_parallel == plan.by_gpu


def test_read_last_progress_follows_a_rewritten_header(tmp_path):
    p = tmp_path / "progress.csv"
    assert read_last_progress(p) == {}
    p.write_text("time/fps,time/total_timesteps\n")
    assert read_last_progress(p) == {}
    p.write_text("time/fps,time/total_timesteps,mission/win_rate\n100,64,0.25\n120,128,\n130,19")  # last row half-written
    assert read_last_progress(p) == {"time/fps": "120", "time/total_timesteps": "128", "mission/win_rate": "0.25"}
    p.write_text("time/fps,time/total_timesteps,eval/win_rate\n100,64,\n,64,0.5\n")  # an eval row without time/fps
    assert read_last_progress(p) == {"time/fps": "100", "time/total_timesteps": "64", "eval/win_rate": "0.5"}


# --- the local pool with stand-in children -------------------------------------------------------------------------
STANDIN = """
import os, signal, subprocess, sys, time
mode, seconds, run = sys.argv[1], float(sys.argv[2]), sys.argv[3]
os.makedirs(run, exist_ok=True)
def stop(sig, frame):
    open(os.path.join(run, "checkpoint"), "w").write(str(sig)); sys.exit(128 + sig)
signal.signal(signal.SIGINT, stop if mode != "stubborn" else signal.SIG_IGN)
signal.signal(signal.SIGTERM, stop)
print("cores", sorted(os.sched_getaffinity(0)), "threads", os.environ["OMP_NUM_THREADS"], flush=True)
if mode == "fail":
    print("error: unknown env id 'NoSuchEnv-v0'", file=sys.stderr)
    sys.exit(2)
if mode == "quiet":  # runs without logging progress, like a job still building its first rollout
    time.sleep(seconds)
    sys.exit(0)
if mode in ("stubborn", "spawner"):
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])  # a grandchild in the job's group
with open(os.path.join(run, "progress.csv"), "w") as f:
    f.write("time/fps,time/total_timesteps,mission/win_rate\\n")
    for i in range(int(seconds * 10)):
        f.write(f"500,{(i + 1) * 64},0.25\\n")
        f.flush()
        time.sleep(0.1)
"""


def standin_command(tmp_path: Path):
    script = tmp_path / "standin.py"
    script.write_text(STANDIN)

    def command(job: Job, runs_dir: Path, threads: int) -> list[str]:
        return [sys.executable, str(script), job.args[0], job.args[1], str(runs_dir / job.name)]

    return command


def test_pool_runs_jobs_and_a_failure_does_not_stop_the_others(tmp_path):
    jobs = [Job("a", ("ok", "0.5")), Job("bad", ("fail", "0")), Job("c", ("ok", "0.5"))]
    launcher = LocalLauncher(
        jobs, tmp_path / "runs", tmp_path / "launch", max_parallel=2, cores=[0], command=standin_command(tmp_path), live=False
    )
    records = {r.name: r for r in launcher.run()}
    assert [records[n].state for n in ("a", "bad", "c")] == ["done", "failed", "done"]
    assert records["bad"].returncode == 2 and "NoSuchEnv-v0" in records["bad"].reason
    assert records["a"].progress["time/total_timesteps"] == "320"
    assert "cores [0] threads 1" in (tmp_path / "launch" / "a.log").read_text()
    summary = json.loads((tmp_path / "launch" / "summary.json").read_text())
    assert not summary["all_succeeded"] and summary["jobs"][1]["log"] == str(tmp_path / "launch" / "bad.log")
    # when each job started and ended, for the launch's page (its wall time)
    a = summary["jobs"][0]
    assert a["started"] <= a["ended"] and a["seconds"] >= 0.5 and "total_steps" in a and a["group"] is None


def test_pool_stop_forwards_the_signal_then_kills_what_does_not_stop(tmp_path):
    jobs = [Job("polite", ("spawner", "60")), Job("stubborn", ("stubborn", "60")), Job("never", ("ok", "1"))]
    launcher = LocalLauncher(
        jobs,
        tmp_path / "runs",
        tmp_path / "launch",
        max_parallel=2,
        stop_timeout=2.0,
        command=standin_command(tmp_path),
        live=False,
    )
    pids: list[int] = []
    # children from earlier tests (e.g. a multiprocessing forkserver) are not the launcher's
    before = {p.pid for p in psutil.Process().children(recursive=True)}

    def stop_when_started() -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(pids) < 4:  # two jobs and their grandchildren
            time.sleep(0.1)
            pids[:] = [p.pid for p in psutil.Process().children(recursive=True) if p.pid not in before]
        launcher.request_stop(signal.SIGINT)

    threading.Thread(target=stop_when_started, daemon=True).start()
    records = {r.name: r for r in launcher.run()}
    assert len(pids) >= 4
    assert records["polite"].state == "interrupted" and records["polite"].returncode == 130
    assert (tmp_path / "runs" / "polite" / "checkpoint").read_text() == str(int(signal.SIGINT))
    assert records["stubborn"].state == "killed" and records["never"].state == "cancelled"
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def test_admission_waits_for_memory_and_skips_what_never_fits(tmp_path, monkeypatch):
    import mission_gym.launch.local as local

    monkeypatch.setattr(local, "estimate_job_memory", lambda job, gpus=None, runs_dir="runs": (400.0, 0.0))
    monkeypatch.setattr(local, "free_host_mb", lambda: local.HOST_HEADROOM_MB + 600.0)
    jobs = [Job("a", ("quiet", "1")), Job("b", ("quiet", "0.2"))]
    launcher = LocalLauncher(jobs, tmp_path / "runs", tmp_path / "l1", max_parallel=2, command=standin_command(tmp_path),
                             live=False)  # fmt: skip
    a, b = launcher.run()
    assert a.state == b.state == "done"
    assert b.started >= a.ended - 0.5, "b was admitted while a still held its memory reservation"

    monkeypatch.setattr(local, "free_host_mb", lambda: local.HOST_HEADROOM_MB + 100.0)
    launcher = LocalLauncher([Job("big", ("ok", "0"))], tmp_path / "runs", tmp_path / "l2", max_parallel=1,
                             command=standin_command(tmp_path), live=False)  # fmt: skip
    (big,) = launcher.run()
    assert big.state == "skipped" and "needs ~400 MB host RAM" in big.reason and "--no-memory-check" in big.reason


def test_a_job_that_can_never_fit_is_refused_at_once_and_no_check_reaches_the_jobs(tmp_path, monkeypatch):
    import mission_gym.launch.local as local

    sizes = {"small": (100.0, 0.0), "huge": (64_000.0, 0.0)}
    monkeypatch.setattr(local, "estimate_job_memory", lambda job, gpus=None, runs_dir="runs": sizes[job.name])
    monkeypatch.setattr(local, "total_ram_gb", lambda: 32.0)  # 32 GiB in all: the huge job never fits
    monkeypatch.setattr(local, "free_host_mb", lambda: 30_000.0)
    jobs = [Job("small", ("ok", "1")), Job("huge", ("ok", "0"))]
    launcher = LocalLauncher(jobs, tmp_path / "runs", tmp_path / "l1", max_parallel=2, command=standin_command(tmp_path),
                             live=False)  # fmt: skip
    small, huge = launcher.run()
    assert small.state == "done" and huge.state == "skipped" and huge.started is None
    assert "needs ~64,000 MB host RAM, more than the 32,256 MB this machine has for jobs" in huge.reason
    assert "can never fit" in huge.reason
    # without the check the launcher starts it, and tells the job not to check either
    started: list[tuple[str, ...]] = []
    command = standin_command(tmp_path)

    def recording(job: Job, runs_dir: Path, threads: int) -> list[str]:
        started.append(job.args)
        return command(job, runs_dir, threads)

    launcher = LocalLauncher([Job("huge", ("ok", "0"))], tmp_path / "runs", tmp_path / "l2", max_parallel=1,
                             memory_check=False, command=recording, live=False)  # fmt: skip
    (huge,) = launcher.run()
    assert huge.state == "done" and started == [("ok", "0", "--no-memory-check")]


# --- real train_ppo runs ----------------------------------------------------------------------------------------------
QUICK = ["--timesteps", "256", "--device", "cpu", "--no-tensorboard", "--eval-freq", "0"]


def run_launcher(args: list[str], timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mission_gym.scripts.launch", "--no-live", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_three_quick_jobs_two_at_a_time_one_failing(tmp_path):
    jobs = write(
        tmp_path / "jobs.yaml",
        """
        defaults: {preset: quick}
        jobs:
          - name: ok
            seeds: [0, 1]
          - name: bad
            env: NoSuchEnv-v0
    """,
    )
    runs = tmp_path / "runs"
    proc = run_launcher([str(jobs), "--max-parallel", "2", "--runs-dir", str(runs), "--", *QUICK])
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    launch_dir = next((runs / "_launches").iterdir())
    assert "failed: bad (exit 2)" in out and f"log: {launch_dir / 'bad.log'}" in out
    assert "NoSuchEnv-v0" in (launch_dir / "bad.log").read_text()
    summary = {j["name"]: j for j in json.loads((launch_dir / "summary.json").read_text())["jobs"]}
    assert [summary[n]["state"] for n in ("ok-s0", "ok-s1", "bad")] == ["done", "done", "failed"]
    for name in ("ok-s0", "ok-s1"):
        assert (runs / name / "final_model.zip").is_file() and (runs / name / "progress.csv").is_file()
    assert not (runs / "bad").exists()
    # the launch's page: its jobs side by side, and the runs index links it
    page = (launch_dir / "index.html").read_text()
    assert f"launch page: {launch_dir / 'index.html'}" in out
    assert 'data-chart="jobs_return"' in page and all(f">{name}<" in page for name in ("ok-s0", "ok-s1", "bad"))
    assert f'href="_launches/{launch_dir.name}/index.html"' in (runs / "index.html").read_text()


def test_ctrl_c_stops_every_job_and_leaves_no_process(tmp_path):
    runs = tmp_path / "runs"
    launcher = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mission_gym.scripts.launch",
            "--no-live",
            "--jobs",
            "2",
            "--preset",
            "quick",
            "--name",
            "cc",
            "--max-parallel",
            "2",
            "--runs-dir",
            str(runs),
            "--stop-timeout",
            "60",
            "--",
            "--timesteps",
            "10000000",
            "--device",
            "cpu",
            "--no-tensorboard",
            "--eval-freq",
            "0",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not all((runs / n / "progress.csv").exists() for n in ("cc-s0", "cc-s1")):
            time.sleep(0.5)
        pids = [p.pid for p in psutil.Process(launcher.pid).children(recursive=True)]
        assert len(pids) >= 2, "both jobs should be running"
        launcher.send_signal(signal.SIGINT)
        out, _ = launcher.communicate(timeout=120)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode == 130, out
    assert out.count("interrupted") >= 2, out
    alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"left behind: {alive}\n{out}"
    for name in ("cc-s0", "cc-s1"):
        assert any((runs / name / "checkpoints").iterdir()), f"{name} saved no checkpoint"


def test_ray_backend_runs_two_quick_jobs(tmp_path):
    try:
        import ray  # noqa: F401
    except ImportError:
        pytest.skip("ray is not installed (pip install 'mission_gym[ray]'); CI installs it")
    runs = tmp_path / "runs"
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mission_gym.scripts.launch",
            "--no-live",
            "--backend",
            "ray",
            "--jobs",
            "2",
            "--preset",
            "quick",
            "--name",
            "ray",
            "--runs-dir",
            str(runs),
            "--",
            *QUICK,
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 job(s): 2 done" in proc.stdout
    for name in ("ray-s0", "ray-s1"):
        assert (runs / name / "final_model.zip").is_file()
