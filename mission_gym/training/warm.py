"""Training processes forked from a warm process instead of started anew (the local launcher's ``warm`` jobs: a
population's members; :func:`fork` also starts the test suite's commands).

A population on CPU starts a ``train_ppo`` process for every member at every stage: the ``cpu`` preset's run starts
14, a test of a population a handful, and each spends about 3.4 s (on an Intel Xeon with AVX-512) importing torch,
torch._dynamo, SB3 and Mission Gym before its first step. Here one process imports them once (multiprocessing's
forkserver, its preload list) and each member is forked from it: the same ``train_ppo`` main with the same
arguments, its own session, process group, log file, cores, thread caps and environment, the same files and the
same exit status, started in a fraction of a second. The forkserver loads torch and numpy with the thread caps of
one (they read them as they load) and numba with a pool of the launcher's cores; a member of several cores sets its
learner's torch threads and its env's numba threads itself, as a new process does.

The forkserver ends when the launcher does, ``kill -9`` included (:mod:`mission_gym.vec.forkserver_guard`, armed
while it starts), and each member when the forkserver does: a member whose launcher died gets SIGTERM, saves a
checkpoint and exits, as a process started anew does (:func:`mission_gym.launch.local.spawn`). Only CPU members on
Linux are started so (a CUDA process must not be forked from one that may have touched the driver, a GPU population
trains in one process by default, and macOS's frameworks are not safe across a fork).
"""

from __future__ import annotations

import atexit
import io
import multiprocessing
import os
import runpy
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from mission_gym.hardware import parent_death_signal

#: the module a member process runs, as ``python -m`` names it
TRAIN_MODULE = "mission_gym.scripts.train_ppo"

#: what the forkserver imports once for every member (after :data:`~mission_gym.vec.subproc.FORKSERVER_GUARD`, which
#: ties it to the launcher): what a member's ``train_ppo`` imports before its first step
PRELOAD = [
    "torch",
    "torch._dynamo",  # Optimizer.step imports it at the first update: 1.3 s of the 3.4 s
    "stable_baselines3",
    "mission_gym.scripts.cli",  # not train_ppo itself: `python -m` runs it afresh (runpy warns of one imported)
    "mission_gym.plan.command",
    "mission_gym.training.trainer",
    "mission_gym.launch.population",
]


#: imported as well for members whose update goes through torch.compile (``compile_update``): 0.9 s more
COMPILE_PRELOAD = ["torch._inductor.compile_fx"]

_prepared = False


def prepare(compiled: bool = False) -> None:
    """Start the forkserver now, so that its imports overlap with what the launcher does before its first member
    starts (the members' configuration, a recording of their restarts); with ``compiled``, it imports what
    torch.compile needs too. Once per process: a later call does nothing."""
    from multiprocessing import forkserver

    from mission_gym.hardware import core_ids
    from mission_gym.vec.subproc import FORKSERVER_FROZEN, FORKSERVER_GUARD, worker_thread_env

    global _prepared
    if _prepared:
        return
    _prepared = True
    # a forkserver this process already runs (for env workers) keeps its own list: members then import the rest
    multiprocessing.get_context("forkserver").set_forkserver_preload(
        [FORKSERVER_GUARD, *PRELOAD, *(COMPILE_PRELOAD if compiled else []), FORKSERVER_FROZEN]
    )
    # the forkserver's thread caps (1, a member of one core's: torch and numpy read them as they load) and the
    # launcher's pid for its guard; numba's is its pool's size, so its cores (the launcher's) for a member of several:
    # its native env sets the threads it steps on, and a member of one core steps on none of the pool's
    with worker_thread_env():
        os.environ["NUMBA_NUM_THREADS"] = str(len(core_ids()))
        forkserver.ensure_running()


def applies(device: str) -> bool:
    """Whether runs of ``device`` (``auto``, ``cpu``, ``cuda:1``) are forked warm here: on Linux (where forking a
    process that loaded torch is safe), on CPU."""
    from mission_gym.hardware import resolve_device

    if not sys.platform.startswith("linux"):
        return False
    try:
        return resolve_device(device) == "cpu"
    except ValueError:  # a CUDA device this machine lacks: the member says so itself
        return False


def is_train_command(argv: Sequence[str]) -> bool:
    """Whether ``argv`` is ``python -m mission_gym.scripts.train_ppo ...`` with this interpreter (what a warm
    member runs; any other command is started anew)."""
    return is_module_command(argv) and argv[2] == TRAIN_MODULE


def is_module_command(argv: Sequence[str]) -> bool:
    """Whether ``argv`` is ``python -m mission_gym.<module> ...`` with this interpreter: a command :func:`fork` can
    start."""
    return len(argv) >= 3 and argv[0] == sys.executable and argv[1] == "-m" and argv[2].startswith("mission_gym.")


class WarmProcess:
    """A member forked from the warm forkserver, with the part of :class:`subprocess.Popen` the launcher uses."""

    def __init__(self, process: multiprocessing.process.BaseProcess) -> None:
        self._process = process
        assert process.pid is not None
        self.pid: int = process.pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """Its exit status once it has ended (negative: the signal that ended it), else None."""
        if self.returncode is None:
            self.returncode = self._process.exitcode
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for it to end: its exit status (:class:`subprocess.TimeoutExpired` if it runs past ``timeout``)."""
        self._process.join(timeout)
        rc = self.poll()
        if rc is None:
            raise subprocess.TimeoutExpired(f"forked {self._process.name}", timeout or 0.0)
        return rc

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)


def start_warm(argv: Sequence[str], log_path: Path, env: dict[str, str], cores: Sequence[int] | None) -> WarmProcess:
    """Start ``train_ppo`` with ``argv``'s arguments forked from the warm forkserver (started on first use), its
    output appended to ``log_path`` (the command first, as :func:`mission_gym.launch.local.spawn` writes it)."""
    import shlex

    assert is_train_command(argv), argv
    prepare()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        log.write(f"$ {shlex.join(argv)}\n".encode())
    return fork(argv, log_path, log_path, env, Path.cwd(), cores, name=f"member {log_path.stem}")


def fork(
    argv: Sequence[str],
    stdout: Path,
    stderr: Path,
    env: dict[str, str],
    cwd: Path,
    cores: Sequence[int] | None = None,
    name: str = "warm",
) -> WarmProcess:
    """Start ``python -m mission_gym.<module> args`` (``argv``) as a child of the forkserver that this process runs
    (started on first use with the preload list set before), its output appended to ``stdout`` and ``stderr`` (one
    file may be both), in ``cwd`` with ``env``, on ``cores`` (all of this process's when None)."""
    assert is_module_command(argv), argv
    process = multiprocessing.get_context("forkserver").Process(
        target=_child,
        args=(argv[2], list(argv[3:]), str(stdout), str(stderr), dict(env), str(cwd), list(cores or ())),
        name=name,
        daemon=True,  # this process's exit ends it (SIGTERM: it saves a checkpoint) rather than waits for it
    )
    process.start()
    return WarmProcess(process)


def _child(module: str, args: list[str], stdout: str, stderr: str, env: dict[str, str], cwd: str, cores: list[int]) -> None:
    """In the forkserver's child: what :func:`mission_gym.launch.local.spawn` gives a new process (its own session,
    output, directory, environment, signals, cores and thread caps), then the module's main as ``python -m`` runs
    it."""
    os.setsid()  # a terminal's Ctrl-C reaches the launcher only; it forwards the signal
    multiprocessing.current_process().daemon = False  # it starts processes of its own (env workers, scorers)
    for fd, path in ((1, stdout), (2, stderr)):
        opened = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.dup2(opened, fd)
        os.close(opened)
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):  # as PYTHONUNBUFFERED does in a new process
            stream.reconfigure(line_buffering=True, write_through=True)
    os.chdir(cwd)
    sys.path.insert(0, cwd)  # `python -m` puts its directory first
    os.environ.clear()
    os.environ.update(env)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    arm = parent_death_signal(signal.SIGTERM, os.getppid())  # the forkserver, which ends with the launcher
    if arm is not None:
        arm()
    if cores and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, set(cores))
    sys.argv = [module, *args]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)  # what `python -m` runs; it exits
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        atexit._run_exitfuncs()  # a forkserver's child ends with os._exit: what a process's exit runs, run here
