"""CUDA processes side by side on one GPU through NVIDIA's Multi-Process Service (MPS).

Without MPS the GPU time-slices between processes: each member's many small kernels wait for the others' turns.
Measured on one H200 with 16 Xeon cores (docs/gpu-guide.md): 16 members of the cpu recipe trained 93,683 env
steps/s in all on the GPU (5,855 each; the GPU "busy" 99% of the time), 185,416 on the 16 CPU cores alone, and
277,510 on the GPU under MPS, whose server runs every client's kernels in one context, concurrently.

So the local launcher (a population's members, the launcher's jobs) starts a private MPS control daemon when more
than one of its CUDA processes can run at once: its own pipe directory, given only to its children, so no other
process on the machine is served by it; a probe process must get a CUDA context through it before any job starts
(otherwise the jobs run without MPS, saying why in one line); ``quit`` at the end, and the daemon gets SIGTERM from
the kernel if the launcher dies. Where ``CUDA_MPS_PIPE_DIRECTORY`` is already set, the user runs MPS and the
children use theirs.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from mission_gym.hardware import parent_death_signal

CONTROL = "nvidia-cuda-mps-control"
PIPE_VAR, LOG_VAR = "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY"
#: a process that needs a CUDA context through the daemon before the jobs start
PROBE = (sys.executable, "-c", "import torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize()")
PROBE_TIMEOUT_S = 120.0


@dataclass
class Mps:
    """A private MPS control daemon and its pipe (and log) directory."""

    proc: subprocess.Popen | None
    directory: str

    @property
    def env(self) -> dict[str, str]:
        """What a child needs to be served by the daemon."""
        return {PIPE_VAR: self.directory, LOG_VAR: self.directory}

    def stop(self, timeout: float = 30.0) -> None:
        """``quit`` (the server ends once its clients have), then the daemon's end; its directory removed."""
        if self.proc is None:
            return
        try:
            subprocess.run([CONTROL], input="quit\n", text=True, env={**os.environ, **self.env}, timeout=timeout,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        except (OSError, subprocess.SubprocessError):
            pass
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        shutil.rmtree(self.directory, ignore_errors=True)


def wanted(gpu_jobs: int, max_parallel: int) -> bool:
    """Whether MPS pays: more than one CUDA process can run at once."""
    return min(gpu_jobs, max_parallel) > 1


def start(probe: Sequence[str] | None = None) -> tuple[Mps | None, str]:
    """Start a private daemon and check that a CUDA process gets served by it.

    :param probe: the command of the probe process [:data:`PROBE`]
    :returns: the daemon (None when there is none to use) and one line saying what happened
    """
    if os.environ.get(PIPE_VAR):
        return None, f"GPU sharing: the MPS daemon of {PIPE_VAR}={os.environ[PIPE_VAR]} serves the jobs"
    exe = shutil.which(CONTROL)
    if exe is None:
        return None, (f"note: {CONTROL} not found: the jobs time-slice the GPU, at about a third of the speed MPS gives "
                      "(docs/gpu-guide.md)")  # fmt: skip
    directory = tempfile.mkdtemp(prefix="mission-mps-")
    mps = Mps(None, directory)
    die_with_parent = parent_death_signal(signal.SIGTERM, os.getpid())
    try:
        mps.proc = subprocess.Popen(
            [exe, "-f"],
            env={**os.environ, **mps.env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
        )
    except OSError as exc:
        shutil.rmtree(directory, ignore_errors=True)
        return None, f"note: {CONTROL} did not start ({exc}); the jobs time-slice the GPU"
    why = _probe(mps, PROBE if probe is None else probe)
    if why:
        mps.stop()
        return None, f"note: MPS did not serve a CUDA process ({why}); the jobs time-slice the GPU"
    return mps, f"GPU sharing: the jobs' kernels run side by side through a private MPS daemon ({directory})"


def _probe(mps: Mps, probe: Sequence[str]) -> str:
    """Why a probe process was not served by the daemon ('' when it was). A CUDA client that finds no daemon runs
    without one, so the daemon's list of servers (one started for the probe) is what says it was served."""
    deadline = time.monotonic() + 10.0
    while not any(name.startswith("control") for name in os.listdir(mps.directory)):  # the daemon's socket
        if mps.proc is None or mps.proc.poll() is not None:
            return f"the daemon exited with status {mps.proc.returncode if mps.proc else '?'}"
        if time.monotonic() > deadline:
            break  # the probe and the server list say the rest
        time.sleep(0.05)
    env = {**os.environ, **mps.env}
    try:
        done = subprocess.run(list(probe), env=env, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
        if done.returncode != 0:
            lines = (done.stderr or done.stdout).strip().splitlines()
            return lines[-1] if lines else f"exit status {done.returncode}"
        servers = subprocess.run([CONTROL], input="get_server_list\n", env=env, capture_output=True, text=True,
                                 timeout=30)  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        return f"{exc.cmd[0]} took over {exc.timeout:.0f} s"
    except OSError as exc:
        return str(exc)
    if not servers.stdout.split():
        return "no MPS server was started for it"
    return ""


@contextmanager
def sharing(enabled: bool, gpu_jobs: int, max_parallel: int, say=print) -> Iterator[dict[str, str]]:
    """The environment additions that put the children on a private MPS daemon for the block (``{}`` without
    one); the daemon ends with the block."""
    if not (enabled and wanted(gpu_jobs, max_parallel)):
        yield {}
        return
    mps, line = start()
    say(line)
    try:
        yield mps.env if mps else {}
    finally:
        if mps:
            mps.stop()
