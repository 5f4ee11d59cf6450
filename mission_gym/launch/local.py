"""Local backend: a pool of concurrent ``train_ppo`` subprocesses on this machine.

Each job runs in its own process group and session with its own run directory, log file, CPU cores
(affinity) and thread caps. A job is admitted only when its estimated memory fits the free host RAM and
GPU memory (jobs still warming up keep their estimate reserved). One job's failure never stops the others.
SIGINT/SIGTERM to the launcher are forwarded to every child (which saves a checkpoint and exits), then,
after a timeout or a second signal, each child's whole process group is killed: nothing is left behind.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path

from rich.console import Console
from rich.live import Live

from mission_gym.hardware import (
    GpuInfo,
    core_ids,
    free_host_mb,
    gpu_memory_by_pid,
    list_gpus,
    parent_death_signal,
    thread_env,
    total_ram_gb,
)
from mission_gym.launch import mps as gpu_mps
from mission_gym.launch.jobs import Job
from mission_gym.launch.report import JobRecord, failure_reason, print_summary, status_line, status_table
from mission_gym.launch.resources import (
    HOST_HEADROOM_MB,
    CoreAllocator,
    estimate_job_memory,
    job_timesteps,
    tree_pids,
    tree_rss_mb,
)
from mission_gym.training.warm import WarmProcess, is_train_command, start_warm

#: exit statuses of a child that stopped on SIGINT/SIGTERM (train_ppo's 130/143, or killed by the signal)
INTERRUPTED_CODES = (130, 143, -signal.SIGINT, -signal.SIGTERM)

CommandFn = Callable[[Job, Path, int], list[str]]


def train_command(job: Job, runs_dir: Path, threads: int) -> list[str]:
    """``python -m mission_gym.scripts.train_ppo ...`` for one job."""
    return [sys.executable, "-m", "mission_gym.scripts.train_ppo", *job.train_args(runs_dir, threads)]


def child_env(threads: int, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a child: thread caps, unbuffered output, CUDA indices in NVML (PCI) order."""
    env = dict(os.environ if base is None else base)
    env.update(thread_env(threads))
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    return env


def _child_setup(cores: Sequence[int] | None) -> Callable[[], None]:
    """What runs in the child between fork and exec: default signal handling, its cores, and on Linux a SIGTERM
    from the kernel if the launcher dies (kill -9 included), so no job outlives its launcher: it saves a checkpoint
    and exits."""
    # the kernel signals the child when the *thread* that forked it ends; every caller of spawn() waits for its
    # children on that thread (the pool's loop, a Ray task's body), so the thread lives as long as the child needs it
    die_with_parent = parent_death_signal(signal.SIGTERM, os.getpid())
    can_pin = bool(cores) and hasattr(os, "sched_setaffinity")
    core_set = set(cores or ())

    def setup() -> None:
        # a parent such as a Ray worker may block or ignore SIGINT; both survive exec and would deafen train_ppo
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_DFL)
        if die_with_parent is not None:
            die_with_parent()
        if can_pin:
            os.sched_setaffinity(0, core_set)

    return setup


def spawn(argv: Sequence[str], log_path: Path, env: dict[str, str], cores: Sequence[int] | None = None) -> subprocess.Popen:
    """Start one job: its own session/process group, stdout and stderr to ``log_path`` (the command first)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        log.write(f"$ {shlex.join(argv)}\n".encode())
        log.flush()
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # a terminal's Ctrl-C reaches the launcher only; it forwards the signal
            preexec_fn=_child_setup(cores),  # noqa: PLW1509 (the launcher runs no threads)
            close_fds=True,
        )


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` to a whole process group, if it still exists."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def finish_if_exited(proc: subprocess.Popen | WarmProcess) -> int | None:
    """If the job's main process has exited: kill whatever is left of its process group, reap it, return its status.

    The group is killed before the main process is reaped, so its id cannot have been reused by then (a warm
    member is reaped by the forkserver that forked it: its group is killed as soon as its status is known).
    """
    if isinstance(proc, WarmProcess):
        rc = proc.poll()
        if rc is not None:
            kill_group(proc.pid)
        return rc
    if hasattr(os, "waitid"):
        try:
            if os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
                return None
        except ChildProcessError:
            pass  # already reaped
        kill_group(proc.pid)
        return proc.wait()
    rc = proc.poll()
    if rc is not None:
        kill_group(proc.pid)
    return rc


def wait_and_stop(proc: subprocess.Popen, timeout: float, sig: int = signal.SIGINT) -> int:
    """Forward ``sig`` to a job, wait up to ``timeout`` seconds for it to save and exit, then kill its group."""
    try:
        proc.send_signal(sig)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rc = finish_if_exited(proc)
        if rc is not None:
            return rc
        time.sleep(0.1)
    kill_group(proc.pid)
    return proc.wait()


@contextmanager
def stop_signals(handler: Callable[[int], None]) -> Iterator[None]:
    """Route SIGINT, SIGTERM and SIGHUP to ``handler`` for the duration (main thread only)."""
    sigs = [signal.SIGINT, signal.SIGTERM] + ([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])
    previous = {s: signal.signal(s, lambda signum, frame: handler(signum)) for s in sigs}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


class LocalLauncher:
    """Run jobs as ``train_ppo`` subprocesses, at most ``max_parallel`` at a time.

    :param jobs: the expanded job list
    :param runs_dir: where run directories go (``runs_dir/<job name>/``)
    :param launch_dir: where the logs and ``summary.json`` of this launch go
    :param max_parallel: jobs running at once
    :param cores: cores to share out (default: this process's affinity)
    :param memory_check: admit a job only when its estimate fits free host RAM and GPU memory
    :param stop_timeout: seconds a child gets to save its checkpoint after the stop signal, before it is killed
    :param console: where the table and messages go (a live table only on a terminal)
    :param command: builds a child's argv from (job, runs_dir, threads); tests swap in stand-ins
    :param summary: print the summary table and write ``summary.json`` at the end
    :param status_every_s: without a live table, print one line of every running job's steps this often (0: never)
    :param mps: with more than one CUDA job at a time, serve them by a private MPS daemon (:mod:`mission_gym.launch.mps`)
    :param on_poll: called at every poll of the jobs (a population's progress line)
    :param warm: start each ``train_ppo`` job of one CPU core forked from one process that imported torch, SB3 and
        Mission Gym once (:mod:`mission_gym.training.warm`) instead of as a new interpreter: a population's members
    """

    def __init__(
        self,
        jobs: Sequence[Job],
        runs_dir: str | Path,
        launch_dir: str | Path,
        max_parallel: int,
        cores: Sequence[int] | None = None,
        memory_check: bool = True,
        stop_timeout: float = 60.0,
        console: Console | None = None,
        live: bool = True,
        command: CommandFn = train_command,
        poll_interval: float = 0.25,
        summary: bool = True,
        status_every_s: float = 0.0,
        mps: bool = True,
        on_poll: Callable[[], None] | None = None,
        warm: bool = False,
    ) -> None:
        self.runs_dir = Path(runs_dir)
        self.launch_dir = Path(launch_dir)
        self.max_parallel = max(1, max_parallel)
        self.cores = list(cores) if cores is not None else core_ids()
        self.cores_per_job = max(1, len(self.cores) // self.max_parallel)
        self.memory_check = memory_check
        self.stop_timeout = stop_timeout
        self.console = console or Console()
        self.live = live and self.console.is_terminal
        self.command = command
        self.poll_interval = poll_interval
        self.summary = summary
        self.status_every_s = status_every_s
        self.mps = mps
        self.on_poll = on_poll
        self.warm = warm
        self._extra_env: dict[str, str] = {}
        self.gpus: list[GpuInfo] = list_gpus()
        self.records = [JobRecord(j, self.runs_dir / j.name, self.launch_dir / f"{j.name}.log") for j in jobs]
        for r in self.records:
            r.host_mb, r.gpu_mb = estimate_job_memory(r.job, self.gpus, runs_dir=str(self.runs_dir))
            r.total_steps = job_timesteps(r.job)
        self._procs: dict[str, subprocess.Popen | WarmProcess] = {}
        self._gpu_of: dict[str, int] = {}
        self._killed: set[str] = set()
        self._alloc = CoreAllocator(self.cores)
        self.stop_signal: int | None = None
        self._signal_count = 0

    # -- signals ---------------------------------------------------------------------------------------
    def _on_signal(self, signum: int) -> None:
        self._signal_count += 1
        if self.stop_signal is None:
            self.stop_signal = signum

    def request_stop(self, signum: int = signal.SIGINT) -> None:
        """Stop as if the launcher had received ``signum``."""
        self._on_signal(signum)

    # -- the loop --------------------------------------------------------------------------------------
    def run(self) -> list[JobRecord]:
        """Run every job; returns the records, in job order, once all have ended (or the launch was stopped)."""
        self.launch_dir.mkdir(parents=True, exist_ok=True)
        live = Live(self._table(), console=self.console, auto_refresh=False) if self.live else nullcontext()
        last_draw = last_status = time.monotonic()
        for r in self.records:
            why = self._never_fits(r)
            if why:  # waiting for memory to free up would wait forever
                r.state, r.reason = "skipped", f"not started: {why}; it can never fit (--no-memory-check starts it anyway)"
                self._event(f"[red]skipped[/] {r.name}: {r.reason}")
        gpu_jobs = sum(r.gpu_mb > 0 and r.state == "pending" for r in self.records)
        sharing = gpu_mps.sharing(self.mps, gpu_jobs, self.max_parallel, say=self._event)
        with stop_signals(self._on_signal), sharing as self._extra_env, live:
            while True:
                self._reap()
                if self.stop_signal is not None:
                    self._shutdown(live)
                    break
                self._admit()
                if all(r.finished for r in self.records):
                    break
                if time.monotonic() - last_draw >= 1.0:
                    self._draw(live)
                    last_draw = time.monotonic()
                if not self.live and self.status_every_s and time.monotonic() - last_status >= self.status_every_s:
                    self.console.print(status_line(self.records), highlight=False, soft_wrap=True)
                    last_status = time.monotonic()
                if self.on_poll is not None:
                    self.on_poll()
                time.sleep(self.poll_interval)
            self._draw(live)
        if self.summary:
            print_summary(self.console, self.records, self.launch_dir)
        return self.records

    def _table(self):
        running = sum(r.state in ("running", "stopping") for r in self.records)
        return status_table(self.records, title=f"{running} running, max {self.max_parallel} at a time")

    def _draw(self, live) -> None:
        for r in self.records:
            if r.state in ("running", "stopping") or (r.finished and r.started is not None):
                r.refresh_progress()
        if isinstance(live, Live):
            live.update(self._table(), refresh=True)

    def _event(self, text: str) -> None:
        self.console.print(f"[dim]{time.strftime('%H:%M:%S')}[/] {text}", highlight=False, soft_wrap=True)

    # -- admission -------------------------------------------------------------------------------------
    def _reserved(self) -> tuple[float, dict[int, float]]:
        """Memory still to come from running jobs that have not logged yet (a job peaks by its first update)."""
        host = 0.0
        gpu: dict[int, float] = {}
        for r in self.records:
            if r.state != "running" or r.pid is None:
                continue
            r.refresh_progress()
            if r.progress:
                continue
            host += max(0.0, r.host_mb - tree_rss_mb(r.pid))
            if r.name in self._gpu_of:
                i = self._gpu_of[r.name]
                gpu[i] = gpu.get(i, 0.0) + max(0.0, r.gpu_mb - gpu_memory_by_pid(tree_pids(r.pid)))
        return host, gpu

    def _never_fits(self, r: JobRecord) -> str:
        """Why a pending job can never fit this machine, however much memory frees up ("" when it can)."""
        if not self.memory_check or r.state != "pending":
            return ""
        host_total = total_ram_gb() * 1024 - HOST_HEADROOM_MB
        if r.host_mb > host_total:
            return f"needs ~{r.host_mb:,.0f} MB host RAM, more than the {host_total:,.0f} MB this machine has for jobs"
        gpu_index = self._pick_gpu(r)
        if r.gpu_mb > 0 and gpu_index is not None:
            total = next((g.total_mb for g in self.gpus if g.index == gpu_index), 0.0)
            if r.gpu_mb > total:
                return f"needs ~{r.gpu_mb:,.0f} MB on GPU {gpu_index}, more than its {total:,.0f} MB"
        return ""

    def _fits(self, r: JobRecord) -> tuple[bool, int | None, str]:
        """Whether a job fits now, the GPU it would use, and if not, why."""
        gpu_index = self._pick_gpu(r)
        if not self.memory_check:
            return True, gpu_index, ""
        reserved_host, reserved_gpu = self._reserved()
        host_free = free_host_mb() - HOST_HEADROOM_MB - reserved_host
        if r.host_mb > host_free:
            return False, gpu_index, f"needs ~{r.host_mb:,.0f} MB host RAM, {max(0.0, host_free):,.0f} MB free"
        if r.gpu_mb > 0 and gpu_index is not None:
            gpus = {g.index: g for g in list_gpus()}
            g = gpus.get(gpu_index)
            gpu_free = (g.free_mb if g else 0.0) - reserved_gpu.get(gpu_index, 0.0)
            if r.gpu_mb > gpu_free:
                return False, gpu_index, f"needs ~{r.gpu_mb:,.0f} MB on GPU {gpu_index}, {max(0.0, gpu_free):,.0f} MB free"
        return True, gpu_index, ""

    def _pick_gpu(self, r: JobRecord) -> int | None:
        if r.gpu_mb <= 0 or not self.gpus:
            return None
        device = r.job.device or ""
        if device.startswith("cuda:"):
            try:
                return int(device.split(":", 1)[1])
            except ValueError:
                return None
        if len(self.gpus) == 1:
            return self.gpus[0].index
        _, reserved = self._reserved() if self.memory_check else (0.0, {})
        return max(list_gpus(), key=lambda g: g.free_mb - reserved.get(g.index, 0.0)).index

    def _admit(self) -> None:
        running = sum(r.state == "running" for r in self.records)
        for r in self.records:
            if running >= self.max_parallel:
                return
            if r.state != "pending":
                continue
            fits, gpu_index, why = self._fits(r)
            if not fits:
                if running == 0:  # nothing will free memory for it: waiting would wait forever
                    r.state, r.reason = "skipped", f"not started: {why} (free memory, or pass --no-memory-check)"
                    self._event(f"[red]skipped[/] {r.name}: {r.reason}")
                continue
            self._start(r, gpu_index)
            running += r.state == "running"

    def _start(self, r: JobRecord, gpu_index: int | None) -> None:
        job = r.job
        if gpu_index is not None and len(self.gpus) > 1 and (job.device or "auto") in ("auto", "cuda"):
            job = dataclasses.replace(job, args=(*job.args, "--device", f"cuda:{gpu_index}"))
        if not self.memory_check and "--no-memory-check" not in job.args:
            job = dataclasses.replace(job, args=(*job.args, "--no-memory-check"))  # nor does the job check its own
        cores = self._alloc.take(job.cpus or self.cores_per_job)
        argv = self.command(job, self.runs_dir, len(cores))
        env = {**child_env(len(cores)), **self._extra_env}
        proc: subprocess.Popen | WarmProcess
        try:
            if self.warm and gpu_index is None and is_train_command(argv):
                proc = start_warm(argv, r.log_path, env, cores)
            else:
                proc = spawn(argv, r.log_path, env, cores)
        except OSError as exc:
            self._alloc.release(cores)
            r.state, r.reason, r.started, r.ended = "failed", f"could not start: {exc}", time.time(), time.time()
            self._event(f"[red]failed[/] {r.name}: {r.reason}")
            return
        self._procs[r.name] = proc
        if gpu_index is not None:
            self._gpu_of[r.name] = gpu_index
        r.state, r.pid, r.cores, r.started = "running", proc.pid, cores, time.time()
        r.device = f"cuda:{gpu_index}" if gpu_index is not None else None
        where = f"core{'s' if len(cores) > 1 else ''} {','.join(map(str, cores))}" + (f", {r.device}" if r.device else "")
        where += ", forked warm" if isinstance(proc, WarmProcess) else ""
        self._event(f"started {r.name} (pid {proc.pid}, {where}) log {r.log_path}")

    # -- ending ----------------------------------------------------------------------------------------
    def _reap(self) -> None:
        for r in self.records:
            proc = self._procs.get(r.name)
            if proc is None or r.finished:
                continue
            rc = finish_if_exited(proc)
            if rc is not None:
                self._finish(r, rc)

    def _finish(self, r: JobRecord, rc: int) -> None:
        r.returncode, r.ended = rc, time.time()
        self._alloc.release(r.cores)
        r.refresh_progress()
        if r.name in self._killed:
            r.state, r.reason = "killed", f"did not stop within {self.stop_timeout:g}s of the signal; killed"
        elif rc == 0:
            r.state = "done"
        elif rc in INTERRUPTED_CODES:
            r.state, r.reason = "interrupted", "stopped by a signal (checkpoint saved by train_ppo)"
        else:
            r.state, r.reason = "failed", failure_reason(r.log_path)
        style = {"done": "green", "interrupted": "yellow"}.get(r.state, "red")
        self._event(
            f"[{style}]{r.state}[/] {r.name} (exit {rc}, {r.elapsed or 0:.0f}s)"
            + (f": {r.reason}" if r.state == "failed" else "")
        )

    def _shutdown(self, live) -> None:
        """Cancel the pending jobs, signal the running ones to stop (each saves a checkpoint) and wait for them; kill
        those still running at the stop timeout or at another signal."""
        sig = signal.SIGTERM if self.stop_signal in (signal.SIGTERM, getattr(signal, "SIGHUP", -1)) else signal.SIGINT
        for r in self.records:
            if r.state == "pending":
                r.state, r.reason = "cancelled", "launch stopped before it started"
        self._signal_running(sig)
        deadline = time.monotonic() + self.stop_timeout
        seen_signals = self._signal_count
        last_draw = 0.0
        while any(r.state == "stopping" for r in self.records):
            self._reap()
            if self._signal_count > seen_signals or time.monotonic() > deadline:
                self._kill_stopping()
                break
            if time.monotonic() - last_draw >= 1.0:
                self._draw(live)
                last_draw = time.monotonic()
            time.sleep(0.1)

    def _signal_running(self, sig: int) -> None:
        """Send ``sig`` to every running job and mark it stopping."""
        stopping = [r for r in self.records if r.state == "running"]
        if stopping:
            self._event(
                f"stopping {len(stopping)} job(s) with {signal.Signals(sig).name}; each saves a checkpoint "
                f"(up to {self.stop_timeout:g}s; a second Ctrl-C kills them now)"
            )
        for r in stopping:
            r.state = "stopping"
            try:
                self._procs[r.name].send_signal(sig)
            except ProcessLookupError:
                pass

    def _kill_stopping(self) -> None:
        """Kill the process group of every job still stopping and record it as killed."""
        for r in self.records:
            if r.state == "stopping":
                self._killed.add(r.name)
                kill_group(self._procs[r.name].pid)
                self._finish(r, self._procs[r.name].wait())
