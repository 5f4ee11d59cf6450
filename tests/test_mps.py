"""The private MPS daemon of the local launcher (mission_gym.launch.mps), against a stand-in for
nvidia-cuda-mps-control that keeps its state in the pipe directory the way the real one does: a daemon in the
foreground (``-f``), commands on stdin (``quit``, ``get_server_list``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mission_gym.launch import mps

FAKE_CONTROL = """\
#!/bin/sh
d="$CUDA_MPS_PIPE_DIRECTORY"
if [ "$1" = "-f" ]; then
    echo $$ > "$d/daemon.pid"
    touch "$d/control"
    exec sleep 600
fi
read cmd
case "$cmd" in
    quit) kill "$(cat "$d/daemon.pid")" ;;
    get_server_list) [ -f "$d/served" ] && echo 4242 ;;
esac
exit 0
"""
# a CUDA client the daemon serves: the real server starts for it, the stand-in notes it
SERVED = (sys.executable, "-c", "import os; open(os.path.join(os.environ['CUDA_MPS_PIPE_DIRECTORY'], 'served'), 'w').close()")


@pytest.fixture
def fake_control(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / mps.CONTROL
    exe.write_text(FAKE_CONTROL)
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv(mps.PIPE_VAR, raising=False)
    return exe


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_a_served_probe_keeps_the_daemon_until_stop(fake_control):
    daemon, line = mps.start(probe=SERVED)
    assert daemon is not None, line
    assert "private MPS daemon" in line
    directory = Path(daemon.env[mps.PIPE_VAR])
    assert daemon.env == {mps.PIPE_VAR: str(directory), mps.LOG_VAR: str(directory)}
    pid = int((directory / "daemon.pid").read_text())
    assert _alive(pid)
    daemon.stop()
    assert _gone(pid)
    assert not directory.exists()


@pytest.mark.parametrize(
    "probe, why",
    [
        ((sys.executable, "-c", "import sys; sys.exit('RuntimeError: no CUDA GPUs are available')"), "no CUDA GPUs"),
        ((sys.executable, "-c", "pass"), "no MPS server was started"),  # a client that ran without the daemon
    ],
)
def test_a_probe_not_served_stops_the_daemon_and_says_why(fake_control, tmp_path, probe, why):
    before = set(Path(os.environ.get("TMPDIR", "/tmp")).glob("mission-mps-*"))
    daemon, line = mps.start(probe=probe)
    assert daemon is None
    assert line.startswith("note: MPS did not serve a CUDA process") and why in line
    assert set(Path(os.environ.get("TMPDIR", "/tmp")).glob("mission-mps-*")) == before  # its directory removed


def test_without_the_control_program_the_jobs_time_slice(monkeypatch):
    monkeypatch.delenv(mps.PIPE_VAR, raising=False)
    monkeypatch.setattr(mps.shutil, "which", lambda name: None)
    daemon, line = mps.start(probe=SERVED)
    assert daemon is None and f"{mps.CONTROL} not found" in line


def test_a_users_own_daemon_is_left_to_serve(fake_control, monkeypatch, tmp_path):
    monkeypatch.setenv(mps.PIPE_VAR, str(tmp_path))
    daemon, line = mps.start(probe=SERVED)
    assert daemon is None and str(tmp_path) in line
    assert not (tmp_path / "daemon.pid").exists()


def test_only_more_than_one_gpu_process_at_a_time_wants_it():
    assert not mps.wanted(gpu_jobs=1, max_parallel=16)
    assert not mps.wanted(gpu_jobs=16, max_parallel=1)
    assert not mps.wanted(gpu_jobs=0, max_parallel=4)
    assert mps.wanted(gpu_jobs=2, max_parallel=2)


def test_sharing_gives_the_children_the_daemon_for_the_block(fake_control, monkeypatch):
    monkeypatch.setattr(mps, "PROBE", SERVED)
    said: list[str] = []
    with mps.sharing(True, gpu_jobs=4, max_parallel=4, say=said.append) as env:
        directory = Path(env[mps.PIPE_VAR])
        pid = int((directory / "daemon.pid").read_text())
        assert _alive(pid)
    assert _gone(pid) and not directory.exists()
    assert len(said) == 1
    with mps.sharing(False, gpu_jobs=4, max_parallel=4, say=said.append) as env:
        assert env == {}
    with mps.sharing(True, gpu_jobs=1, max_parallel=4, say=said.append) as env:
        assert env == {}
    assert len(said) == 1  # no daemon, nothing said


def test_the_daemon_ends_when_the_launcher_is_killed(fake_control, tmp_path):
    """SIGKILL of the process that started the daemon: the kernel sends the daemon SIGTERM."""
    pid_file = tmp_path / "daemon_pid"
    script = textwrap.dedent(
        f"""
        import os, signal, sys
        from pathlib import Path
        from mission_gym.launch import mps
        daemon, line = mps.start(probe={SERVED!r})
        assert daemon is not None, line
        Path({str(pid_file)!r}).write_text((Path(daemon.env[mps.PIPE_VAR]) / "daemon.pid").read_text())
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], env=os.environ.copy(), timeout=60)
    assert done.returncode == -signal.SIGKILL
    pid = int(pid_file.read_text())
    assert _gone(pid), f"the MPS daemon {pid} outlived its launcher"


@pytest.mark.parametrize("use_mps", [True, False])
def test_the_launchers_gpu_jobs_side_by_side_get_the_daemon(fake_control, tmp_path, monkeypatch, use_mps):
    from mission_gym.hardware import GpuInfo
    from mission_gym.launch import local
    from mission_gym.launch.jobs import Job

    monkeypatch.setattr(mps, "PROBE", SERVED)
    monkeypatch.setattr(local, "list_gpus", lambda: [GpuInfo(0, "stand-in", 80_000.0, 80_000.0)])
    monkeypatch.setattr(local, "estimate_job_memory", lambda job, gpus=None, runs_dir="runs": (100.0, 300.0))
    seen = tmp_path / "seen"
    seen.mkdir()

    def command(job, runs_dir, threads):  # each job notes the MPS pipe directory it was given, if any
        code = f"import os; open({str(seen / job.name)!r}, 'w').write(os.environ.get({mps.PIPE_VAR!r}, ''))"
        return [sys.executable, "-c", code]

    jobs = [Job("a", ()), Job("b", ())]
    launcher = local.LocalLauncher(jobs, tmp_path / "runs", tmp_path / "launch", max_parallel=2, command=command,
                                   live=False, summary=False, mps=use_mps)  # fmt: skip
    assert [r.state for r in launcher.run()] == ["done", "done"]
    dirs = {(seen / n).read_text() for n in ("a", "b")}
    if use_mps:
        (directory,) = dirs
        assert directory and not Path(directory).exists()  # one daemon for both, ended with the launch
    else:
        assert dirs == {""}
