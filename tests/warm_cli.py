"""The tests' commands run as the population runs its members: forked from a warm process that imported torch, SB3
and Mission Gym once (:func:`mission_gym.training.warm.fork`), instead of a new interpreter that spends about 3.4 s
importing them. Each command is still a process of its own, with its own session, directory, files and exit status,
and ``python -m``'s main; the test that member weights match a new process's to the bit is in test_population.

Tests about what a new process is (signals to a process group, what a process leaves behind, a process started
with other environment variables or thread caps, every CLI's smoke test) start one with :mod:`subprocess`; off
Linux every command does.
"""

from __future__ import annotations

import locale
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from multiprocessing import forkserver
from pathlib import Path
from unittest import mock

from mission_gym.training import warm
from mission_gym.vec.subproc import FORKSERVER_FROZEN

WARM = sys.platform.startswith("linux")
_server: forkserver.ForkServer | None = None


def _start_server() -> forkserver.ForkServer:
    """This pytest worker's forkserver for commands, once: it imports what a training command imports before its
    first step, with this process's environment (no thread caps: a command here gets every core, as a new process
    would). A forkserver of its own, not multiprocessing's one per process: a test that ran env workers here first
    started that one with their short preload list, and every command forked from it then imported torch._dynamo,
    SB3 and the trainer itself (about 2 s each)."""
    global _server
    if _server is None:
        server = forkserver.ForkServer()
        server.set_forkserver_preload([*warm.PRELOAD, FORKSERVER_FROZEN])
        server.ensure_running()
        _server = server
    return _server


def run(
    argv: Sequence[str],
    cwd: Path | str | None = None,
    timeout: float = 300,
    text: bool = True,
    env: dict[str, str] | None = None,
    env_read_as_it_runs: bool = False,
) -> subprocess.CompletedProcess:
    """What ``subprocess.run(argv, cwd=cwd, capture_output=True, text=text, timeout=timeout, env=env)`` returns, the
    command forked warm where it can be (``python -m mission_gym.<module>`` on Linux, with this process's
    environment: variables such as thread caps are read as modules load, which the forkserver did before). With
    ``env_read_as_it_runs`` (variables that only the command reads, e.g. wandb's), it is forked with ``env``."""
    if (env is not None and not env_read_as_it_runs) or not (WARM and warm.is_module_command(argv)):
        return subprocess.run(list(argv), cwd=cwd, capture_output=True, text=text, timeout=timeout, env=env)
    server = _start_server()
    with tempfile.TemporaryDirectory(prefix="warm-cli-") as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        out.touch()
        err.touch()
        # multiprocessing asks its module-level connect_to_new_process for each process of the forkserver context
        with mock.patch.object(forkserver, "connect_to_new_process", server.connect_to_new_process):
            proc = warm.fork(argv, out, err, dict(os.environ if env is None else env), Path(cwd or Path.cwd()).resolve())
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # its session: the command and what it started
            proc.wait()
            raise subprocess.TimeoutExpired(list(argv), timeout, out.read_bytes(), err.read_bytes()) from None
        stdout, stderr = out.read_bytes(), err.read_bytes()
    if text:  # decoded as subprocess's text mode does: the locale's encoding, universal newlines
        out_text, err_text = (b.decode(locale.getpreferredencoding(False)) for b in (stdout, stderr))
        out_text, err_text = (t.replace("\r\n", "\n").replace("\r", "\n") for t in (out_text, err_text))
        return subprocess.CompletedProcess(list(argv), proc.returncode, out_text, err_text)
    return subprocess.CompletedProcess(list(argv), proc.returncode, stdout, stderr)
