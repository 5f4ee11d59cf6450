"""Ray backend: the same job list as Ray tasks, each running one ``train_ppo`` subprocess.

Each task asks Ray for ``num_cpus`` (the job's ``cpus``, default 1), a fraction of a GPU (``num_gpus``, e.g.
0.25 to pack four jobs on a GPU) and, with the memory check on, the job's estimated host ``memory``, so Ray's
scheduler does the admission. A local Ray instance is started by default; ``address`` joins an existing cluster
(every node needs ``mission_gym`` installed, and ``runs_dir`` should be a shared filesystem to collect the runs
in one place). Ctrl-C/SIGTERM cancel the tasks: each forwards SIGINT to its ``train_ppo`` (which saves a
checkpoint), waits, then kills its process group.
"""

from __future__ import annotations

import contextlib
import math
import signal
import socket
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live

from mission_gym.hardware import MB, GpuInfo, core_ids, list_gpus
from mission_gym.launch.jobs import Job
from mission_gym.launch.local import INTERRUPTED_CODES, child_env, finish_if_exited, spawn, stop_signals, wait_and_stop
from mission_gym.launch.report import JobRecord, failure_reason, print_summary, status_table
from mission_gym.launch.resources import estimate_job_memory, job_timesteps

#: when the driver cannot see the cluster's GPUs, a job gets a whole one unless told otherwise
DEFAULT_GPU_FRACTION = 1.0
#: share of a GPU's memory the packed jobs' estimates may fill
GPU_FIT_FRACTION = 0.85
#: the local instance's object store: the launcher passes nothing big through it
LOCAL_OBJECT_STORE_MB = 128
TRAIN_MODULE = "mission_gym.scripts.train_ppo"


class RayUnavailable(RuntimeError):
    """Ray is not installed (or cannot start)."""


def import_ray() -> Any:
    """``import ray``, or a :class:`RayUnavailable` that says how to install it."""
    from mission_gym.optional import MissingExtra, require

    try:
        return require("ray", "the Ray backend")
    except MissingExtra as exc:
        raise RayUnavailable(f"{exc}, or use --backend local") from exc


def connect(address: str | None = None) -> bool:
    """Start a local Ray instance (``address`` None) or join a cluster, unless this process already has; whether
    it was done here (then the caller shuts it down).

    :raises RayUnavailable: when Ray is not installed or cannot start or connect
    """
    ray = import_ray()
    if ray.is_initialized():
        return False
    try:
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            ray.init(
                num_cpus=len(core_ids()),
                include_dashboard=False,
                log_to_driver=False,
                object_store_memory=LOCAL_OBJECT_STORE_MB * MB,
            )
    except Exception as exc:
        raise RayUnavailable(f"could not {'connect to Ray at ' + address if address else 'start Ray'}: {exc}") from exc
    return True


@contextlib.contextmanager
def session(address: str | None = None) -> Iterator[None]:
    """Ray connected for the duration (one instance for several :func:`run_ray` calls, e.g. a population's stages)."""
    started = connect(address)
    try:
        yield
    finally:
        if started:
            import_ray().shutdown()


def run_job_task(
    args: Sequence[str], log_path: str, threads: int, stop_timeout: float, module: str = TRAIN_MODULE
) -> dict[str, Any]:
    """The body of one Ray task: run ``python -m module args`` to completion (or until the task is cancelled)."""
    argv = [sys.executable, "-m", module, *args]
    log = Path(log_path)
    started = time.time()
    proc = spawn(argv, log, child_env(threads))
    try:
        rc = finish_if_exited(proc)
        while rc is None:
            time.sleep(0.5)
            rc = finish_if_exited(proc)
    except KeyboardInterrupt:  # ray.cancel: let train_ppo save its checkpoint, then make sure nothing is left
        rc = wait_and_stop(proc, stop_timeout, signal.SIGINT)
    return {
        "returncode": rc,
        "node": socket.gethostname(),
        "pid": proc.pid,
        "started": started,
        "ended": time.time(),
        "reason": failure_reason(log) if rc != 0 else "",
    }


def gpu_fraction(gpu_mb: float, gpus: Sequence[GpuInfo]) -> float:
    """The share of a GPU one job gets: as many jobs per GPU as their estimates fit (``1/k``), one when unknown."""
    if gpu_mb <= 0:
        return 0.0
    if not gpus:
        return DEFAULT_GPU_FRACTION
    per_gpu = max(1, int(min(g.total_mb for g in gpus) * GPU_FIT_FRACTION // gpu_mb))
    return math.floor(10_000 / per_gpu) / 10_000  # Ray keeps four decimals; rounding down keeps k jobs on a GPU


def run_ray(
    jobs: Sequence[Job],
    runs_dir: Path,
    launch_dir: Path,
    address: str | None = None,
    max_parallel: int | None = None,
    memory_check: bool = True,
    stop_timeout: float = 60.0,
    console: Console | None = None,
    live: bool = True,
    module: str = TRAIN_MODULE,
    summary: bool = True,
) -> tuple[list[JobRecord], int | None]:
    """Run every job as a Ray task; returns the records and the signal that stopped the launch (if any).

    :param address: an existing cluster's address (``ray://...`` or ``host:port``); None starts a local instance
    :param max_parallel: at most this many tasks submitted at once (None: Ray's resources decide)
    :param memory_check: ask Ray for each job's estimated host memory (its ``memory`` resource)
    :param module: the module each task runs (tests use stand-ins)
    :param summary: print the summary table and write ``summary.json`` at the end
    :raises RayUnavailable: when Ray is not installed or cannot connect
    """
    ray = import_ray()
    console = console or Console()
    launch_dir.mkdir(parents=True, exist_ok=True)
    records = [JobRecord(j, runs_dir / j.name, launch_dir / f"{j.name}.log") for j in jobs]
    started_here = connect(address)
    state: dict[str, Any] = {"signal": None, "count": 0}

    def on_signal(signum: int) -> None:
        state["count"] += 1
        state["signal"] = state["signal"] or signum

    try:
        cluster = ray.cluster_resources()
        local_gpus = list_gpus()
        gpus = local_gpus or ([GpuInfo(0, "cluster GPU", 0.0, 0.0)] if cluster.get("GPU", 0) > 0 else [])
        remote = ray.remote(run_job_task)
        options: dict[str, dict[str, Any]] = {}
        for r in records:
            r.host_mb, r.gpu_mb = estimate_job_memory(r.job, gpus, runs_dir=str(runs_dir))
            r.total_steps = job_timesteps(r.job)
            cpus = r.job.cpus or 1
            gpu = r.job.gpus if r.job.gpus is not None else gpu_fraction(r.gpu_mb, local_gpus)
            opts: dict[str, Any] = {"num_cpus": cpus, "num_gpus": gpu, "name": r.name, "max_retries": 0}
            if memory_check:
                opts["memory"] = int(r.host_mb * MB)
            options[r.name] = opts
            r.device = f"{gpu:g} GPU" if gpu else None
        console.print(
            f"{len(records)} job(s) on Ray ({'cluster ' + address if address else 'local instance'}: "
            f"{cluster.get('CPU', 0):g} CPU, {cluster.get('GPU', 0):g} GPU); "
            + ", ".join(f"{n}: {o['num_cpus']} CPU {o['num_gpus']:g} GPU" for n, o in options.items()),
            soft_wrap=True,
            highlight=False,
        )
        for r in records:
            if options[r.name]["num_gpus"] > cluster.get("GPU", 0) or options[r.name]["num_cpus"] > cluster.get("CPU", 0):
                r.state, r.reason = "skipped", f"asks for more than the cluster has ({cluster})"

        with stop_signals(on_signal):
            view = (
                Live(status_table(records), console=console, auto_refresh=False)
                if live and console.is_terminal
                else nullcontext()
            )
            with view:
                extra = () if memory_check else ("--no-memory-check",)  # Ray admits by memory, or nothing does
                driver = _Driver(ray, remote, records, options, max_parallel, stop_timeout, state, view, console)
                driver.run(module, extra)
    finally:
        if started_here:
            ray.shutdown()
    if summary:
        print_summary(console, records, launch_dir)
    return records, state["signal"]


class _Driver:
    """The Ray launch's event loop: submits the jobs as Ray tasks, collects their results, and on a signal stops them.

    ``state`` is :func:`run_ray`'s signal state (the first signal and how many came), which its handler updates.
    """

    def __init__(
        self,
        ray: Any,
        remote: Any,
        records: list[JobRecord],
        options: dict[str, dict[str, Any]],
        max_parallel: int | None,
        stop_timeout: float,
        state: dict[str, Any],
        view: Any,
        console: Console,
    ) -> None:
        self.ray = ray
        self.remote = remote
        self.records = records
        self.options = options
        self.max_parallel = max_parallel
        self.stop_timeout = stop_timeout
        self.state = state
        self.view = view
        self.console = console
        self.pending = [r for r in records if r.state == "pending"]
        self.inflight: dict[Any, JobRecord] = {}

    def run(self, module: str, extra: Sequence[str] = ()) -> None:
        """Submit and collect until every job has ended or a signal came, then stop what is left."""
        last_draw = 0.0
        while (self.pending or self.inflight) and self.state["signal"] is None:
            self._submit(module, extra)
            self._collect_done()
            if time.monotonic() - last_draw >= 1.0:
                self._draw()
                last_draw = time.monotonic()
        if self.state["signal"] is not None:
            self._stop()
        self._draw()

    def _event(self, text: str) -> None:
        self.console.print(f"[dim]{time.strftime('%H:%M:%S')}[/] {text}", highlight=False, soft_wrap=True)

    def _draw(self) -> None:
        """Mark the submitted jobs whose log has appeared as running, refresh their progress and redraw the table."""
        for r in self.records:
            if r.state == "submitted" and r.log_path.exists():
                r.state, r.started = "running", r.started or time.time()
            if r.state in ("running", "stopping") or r.finished:
                r.refresh_progress()
        if isinstance(self.view, Live):
            self.view.update(status_table(self.records), refresh=True)

    def _submit(self, module: str, extra: Sequence[str]) -> None:
        """Submit pending jobs while fewer than ``max_parallel`` are in flight."""
        while self.pending and (self.max_parallel is None or len(self.inflight) < self.max_parallel):
            r = self.pending.pop(0)
            opts = self.options[r.name]
            threads = max(1, math.ceil(opts["num_cpus"]))
            args = r.job.train_args(r.run_dir.parent, threads) + [a for a in extra if a not in r.job.args]
            self.inflight[self.remote.options(**opts).remote(args, str(r.log_path), threads, self.stop_timeout, module)] = r
            r.state = "submitted"
            self._event(f"submitted {r.name} log {r.log_path}")

    def _collect_done(self) -> None:
        """Collect a task that has ended, waiting up to half a second for one."""
        done, _ = self.ray.wait(list(self.inflight), num_returns=1, timeout=0.5)
        for ref in done:
            self._collect(ref)

    def _collect(self, ref: Any, killed: bool = False) -> None:
        """Take an ended (or cancelled) task out of flight, record how it ended and say so."""
        r = self.inflight.pop(ref)
        try:
            res = self.ray.get(ref)
        except Exception as exc:  # cancelled, or the task itself died
            self._task_raised(r, exc, killed)
        else:
            self._task_returned(r, res)
        r.refresh_progress()
        self._event(
            f"{r.state} {r.name}"
            + (f" (exit {r.returncode})" if r.returncode is not None else "")
            + (f": {r.reason}" if r.state == "failed" else "")
        )

    def _task_raised(self, r: JobRecord, exc: Exception, killed: bool) -> None:
        """A task with no result: killed by the launch, cancelled by a signal, or dead of its own."""
        r.ended = time.time()
        cancelled = isinstance(exc, self.ray.exceptions.TaskCancelledError) or self.state["signal"] is not None
        r.state = "killed" if killed else "interrupted" if cancelled else "failed"
        r.reason = "stopped by a signal" if cancelled else f"{type(exc).__name__}: {str(exc).splitlines()[0]}"

    def _task_returned(self, r: JobRecord, res: dict[str, Any]) -> None:
        """A task's result (:func:`run_job_task`'s dict): its process's details and its state by its exit code."""
        r.returncode, r.node, r.pid = res["returncode"], res["node"], res["pid"]
        r.started, r.ended = res["started"], res["ended"]
        rc = r.returncode
        if rc == 0:
            r.state = "done"
        elif rc in INTERRUPTED_CODES:
            r.state, r.reason = "interrupted", "stopped by a signal (checkpoint saved by train_ppo)"
        elif self.state["signal"] is not None:
            r.state, r.reason = "killed", f"did not stop within {self.stop_timeout:g}s of the signal; killed"
        else:
            r.state, r.reason = "failed", res["reason"]

    def _stop(self) -> None:
        """Cancel the jobs not submitted, cancel the tasks in flight (each saves a checkpoint) and collect them until
        the stop timeout or another signal, then kill what is left."""
        for r in self.pending:
            r.state, r.reason = "cancelled", "launch stopped before it started"
        if self.inflight:
            self._event(f"stopping {len(self.inflight)} job(s); each saves a checkpoint (up to {self.stop_timeout:g}s)")
        for ref, r in self.inflight.items():
            r.state = "stopping"
            self.ray.cancel(ref)
        seen = self.state["count"]
        deadline = time.monotonic() + self.stop_timeout + 5.0
        while self.inflight and time.monotonic() < deadline and self.state["count"] == seen:
            self._collect_done()
        self._kill_inflight()

    def _kill_inflight(self) -> None:
        """Force-cancel every task still in flight and collect it as killed."""
        for ref in list(self.inflight):
            self.ray.cancel(ref, force=True)  # the worker dies; its train_ppo gets SIGTERM from the kernel and stops
            try:
                self.ray.wait([ref], timeout=10.0)
            finally:
                self._collect(ref, killed=True)
