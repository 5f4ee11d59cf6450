"""The PPO trainer: one training session of a run (new, resumed or branched), its files finished whatever happens.

Everything that can be wrong with the input (preset, flags, env id, env arguments, batch size, device, a parent
checkpoint with other spaces) is checked by :func:`~mission_gym.ppo.build.build_run` before the run directory is
made, so bad input never leaves a half-made run behind; so is the memory the run needs against what the machine
has (:func:`~mission_gym.settings.sizing.check_memory`). A session holds its run's lock
(:mod:`~mission_gym.rundir.lock`) from the moment it touches the run until it ends.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from mission_gym.config.yaml_io import ConfigError, dump_yaml, read_yaml, validate
from mission_gym.hardware import disarm_parent_death_signal
from mission_gym.ppo.build import RunSetup, build_run, space_signature
from mission_gym.ppo.callbacks import (
    EntropyPhaseCallback,
    EpisodeMetricsCallback,
    RolloutThreadsCallback,
    StepCheckpointCallback,
    StepEvalCallback,
    StopAtStepCallback,
    StopFlagCallback,
    StopTraining,
    TimingCallback,
    Timings,
    save_checkpoint,
    save_model,
)
from mission_gym.ppo.result import TrainResult
from mission_gym.ppo.schedules import entropy_schedule
from mission_gym.rundir.directory import (
    RunDir,
    check_run_name,
    default_run_name,
    hardware_info,
    resolve_run_dir,
    write_new_run,
)
from mission_gym.rundir.evaluations import EVALUATIONS, EvalRecord, drop_rows_after
from mission_gym.rundir.files import atomic_write_text, now, read_json
from mission_gym.rundir.lock import RunLock, lock_run
from mission_gym.rundir.recovery import newest_loadable_checkpoint
from mission_gym.settings.resolve import Resolved, resolve
from mission_gym.settings.schema import TrainConfig
from mission_gym.settings.sizing import check_memory

EXIT_SIGNAL = {signal.SIGINT: 130, signal.SIGTERM: 143}
# Flags a resumed run may change: they touch neither the learning maths nor the env.
RESUME_OVERRIDES = ("timesteps", "device", "num_threads", "vec_env")


class Trainer:
    """One training session of a run. Build it with :meth:`create` (a new or branched run) or :meth:`resume`;
    then :meth:`train`.

    :param setup: the run's env, model and machine (:func:`~mission_gym.ppo.build.build_run`)
    :param run: its directory (already created and populated)
    :param resume_step: the step a resumed session starts from (None for a new run)
    :param progress: show a progress bar (only on a terminal)
    :param lock: the run's lock, held until the session ends (:meth:`train` or :meth:`close` releases it)
    """

    def __init__(
        self,
        setup: RunSetup,
        run: RunDir,
        resume_step: int | None = None,
        progress: bool = True,
        lock: RunLock | None = None,
    ) -> None:
        self.setup, self.run = setup, run
        self.resume_step = resume_step
        self.progress = progress
        self.lock = lock

    @property
    def config(self) -> TrainConfig:
        return self.setup.config

    @property
    def model(self) -> Any:
        return self.setup.model

    @property
    def device(self) -> str:
        return self.setup.device

    @property
    def threads(self) -> int:
        return self.setup.threads

    # --- construction ---------------------------------------------------------------------------------------
    def close(self) -> None:
        """End a session that will not train: close its env and release the run's lock."""
        try:
            self.setup.close()
        finally:
            if self.lock is not None:
                self.lock.release()

    @classmethod
    def check(cls, config: TrainConfig, memory_check: bool = True) -> Resolved:
        """Everything :meth:`create` checks for a new run of ``config``, making nothing: the env and model are
        built and closed, starting no env worker process (a population checks each member's configuration this way
        before it starts them).

        :param memory_check: refuse a configuration whose memory estimate does not fit the machine
        :returns: the resolved configuration (:func:`~mission_gym.settings.resolve.resolve`)
        :raises ConfigError: for bad input
        """
        run = resolve(config)  # refuses a device this machine does not have
        if memory_check:
            check_memory(run)
        # built on the CPU: the check needs no GPU, and a CUDA context would hold hundreds of MB of it for as long
        # as this process lives (a population's launcher: the whole run)
        build_run(replace(run, device="cpu")).close()
        return run

    @classmethod
    def create(
        cls,
        config: TrainConfig,
        runs_dir: str | Path = "runs",
        run_name: str | None = None,
        parent_checkpoint: str | Path | None = None,
        branch_name: str | None = None,
        notes: str | None = None,
        command: str | None = None,
        progress: bool = True,
        memory_check: bool = True,
    ) -> Trainer:
        """Validate everything, build env and model, then make the run directory and take its lock (env worker
        processes start when training does).

        :param config: the configuration (preset plus flags)
        :param runs_dir: parent of the run directory
        :param run_name: the run's directory name (default ``<env>_<preset>_<time>``, or the branch name)
        :param parent_checkpoint: start from this model's weights (a branch); its VecNormalize statistics too
        :param branch_name: the branch's name (required with ``parent_checkpoint``)
        :param notes: free text kept in ``lineage.json``
        :param command: the command line, for ``command.txt`` and the lock
        :param memory_check: refuse a run whose memory estimate does not fit the memory available
        :raises ConfigError: for any bad input (a run that cannot fit in memory included); nothing is created then
        """
        run_settings = resolve(config)
        config = run_settings.config
        if (parent_checkpoint is None) != (branch_name is None):
            raise ConfigError("--parent-checkpoint and --branch-name go together (a branch needs both)")
        name = check_run_name(run_name or branch_name or default_run_name(config.env, config.preset))
        run = RunDir(Path(runs_dir) / name)
        if run.path.exists():
            raise ConfigError(f"run directory {str(run.path)!r} already exists; pick another --run-name or --resume it")
        if memory_check:
            check_memory(run_settings)
        setup = build_run(run_settings, parent_checkpoint=parent_checkpoint, runs_dir=runs_dir)
        parent = setup.parent
        lock = None
        try:
            run.create()
            lock = lock_run(run.path, command)  # before config.yaml: --resume finds no run until this one holds it
            write_new_run(
                run,
                setup.config,
                command,
                notes,
                lineage={
                    "parent": parent,
                    "root": parent["root"] if parent else name,
                    "branch": branch_name,
                    "observation_space": space_signature(setup.venv.observation_space),
                    "action_space": space_signature(setup.venv.action_space),
                },
                metadata={
                    "hardware": hardware_info(setup.device, setup.threads),
                    "vec_env": setup.config.vec_env,
                    "sessions": [],
                },
            )
        except BaseException:
            setup.close()
            if lock is not None:
                lock.release()
            raise
        return cls(setup, run, progress=progress, lock=lock)

    @classmethod
    def resume(
        cls,
        run: str | Path,
        runs_dir: str | Path = "runs",
        overrides: dict[str, Any] | None = None,
        command: str | None = None,
        progress: bool = True,
        memory_check: bool = True,
    ) -> Trainer:
        """Take the run's lock and continue the run from its newest checkpoint that loads: step count, schedules,
        statistics and logs continue.

        :param run: the run's name (under ``runs_dir``) or directory
        :param overrides: changes allowed on resume (:data:`RESUME_OVERRIDES`: timesteps, device, num_threads,
            vec_env)
        :param memory_check: refuse a session whose memory estimate does not fit the memory available
        :raises ConfigError: when the run, its configuration or a checkpoint that loads is missing, for other
            overrides, or when another process writes the run (:class:`~mission_gym.rundir.lock.RunLocked`)
        """
        overrides = dict(overrides or {})
        bad = [k for k in overrides if k not in RESUME_OVERRIDES]
        if bad:
            flags = ", ".join("--" + k.replace("_", "-") for k in bad)
            raise ConfigError(
                f"--resume continues a run with its saved configuration; {flags} cannot change it "
                "(branch instead: --parent-checkpoint CKPT --branch-name NAME)"
            )
        run_dir = RunDir(resolve_run_dir(run, runs_dir))
        lock = lock_run(run_dir.path, command)
        setup = None
        try:
            saved = validate(TrainConfig, read_yaml(run_dir / "config.yaml"), str(run_dir / "config.yaml"))
            run_settings = resolve(validate(TrainConfig, {**saved.model_dump(), **overrides}, "command line"))
            config = run_settings.config
            step, ckpt = newest_loadable_checkpoint(run_dir, config.normalize)
            if step >= config.timesteps:
                raise ConfigError(
                    f"run {run_dir.name!r} already reached {step:,} of its {config.timesteps:,} steps; "
                    "give a larger --timesteps to train on"
                )
            if memory_check:
                check_memory(run_settings)
            setup = build_run(run_settings, checkpoint=ckpt)
            if setup.config != saved:
                atomic_write_text(run_dir / "config.yaml", dump_yaml(setup.config.model_dump()))
            if command:
                with open(run_dir / "command.txt", "a") as f:
                    f.write(command + "\n")
            drop_rows_after(run_dir / EVALUATIONS, step)
            run_dir.update_metadata(target_timesteps=config.timesteps, hardware=hardware_info(setup.device, setup.threads))
        except BaseException:
            if setup is not None:
                setup.close()
            lock.release()
            raise
        return cls(setup, run_dir, resume_step=step, progress=progress, lock=lock)

    # --- training ---------------------------------------------------------------------------------------------
    def train(self, stop_at: int | None = None, callbacks: Sequence[Any] = (), callback_after_eval: Any = None) -> TrainResult:
        """Train to the target step count; on SIGINT/SIGTERM or a crash, save a checkpoint and finish the files.

        :param stop_at: pause once this many env steps are trained (status ``paused``, exit code 0, a checkpoint
            saved, no final model); ``--resume`` continues the run with its schedules where they were
        :param callbacks: more SB3 callbacks for this session (e.g. a dashboard's)
        :param callback_after_eval: called after each evaluation (see :class:`~mission_gym.ppo.callbacks.StepEvalCallback`)
        """
        try:
            return self._train(stop_at, callbacks, callback_after_eval)
        finally:
            if self.lock is not None:
                self.lock.release()

    def _train(self, stop_at: int | None, callbacks: Sequence[Any], callback_after_eval: Any) -> TrainResult:
        """The session itself (:meth:`train` releases the lock after it, whatever happens)."""
        from mission_gym.ppo.monitor import ResourceMonitorCallback
        from mission_gym.rundir.logger import make_logger

        t_start = time.perf_counter()
        config, model, run = self.config, self.model, self.run
        model.set_logger(make_logger(run.path, config.tensorboard, self.resume_step))
        timings = Timings()
        evaluate = StepEvalCallback(
            run, config.env, config.env_kwargs, config.eval_episodes, config.eval_freq, timings, callback_after_eval
        )
        monitor = ResourceMonitorCallback(device=self.device)
        pause = StopAtStepCallback(stop_at) if stop_at is not None else None
        start_steps = model.num_timesteps
        session = {"started": now(), "start_timesteps": start_steps, "device": self.device, "threads": self.threads}
        started = now() if self.resume_step is None else read_json(run / "metadata.json").get("started", now())
        run.update_metadata(status="running", started=started)
        t_learn = time.perf_counter()
        with _stop_on_signals() as received:
            session_callbacks = self._callbacks(timings, evaluate, monitor, pause, received, callbacks)
            status, exit_code, message = self._learn(session_callbacks, received, pause)
        learn_s = time.perf_counter() - t_learn
        try:
            checkpoint, final_eval = self._finish(status, start_steps, evaluate, timings, monitor)
        except OSError as exc:
            if not _disk_full(exc):
                raise
            checkpoint, final_eval = None, None
            status, exit_code, message = "crashed", 1, self._disk_full_message(exc)
        result = TrainResult(
            run_dir=run.path,
            status=status,
            exit_code=exit_code,
            timesteps=int(model.num_timesteps),
            target_timesteps=config.timesteps,
            session_steps=int(model.num_timesteps - start_steps),
            wall_s=time.perf_counter() - t_start,
            learn_s=learn_s,
            rollout_s=timings.rollout_s,
            train_s=timings.train_s,
            eval_s=timings.eval_s,
            save_s=timings.save_s,
            final_eval=final_eval,
            checkpoint=checkpoint,
            message=message if status != "paused" else f"paused at --stop-at {stop_at:,}; --resume {run.path} continues it",
        )
        try:
            self._record_session(result, session)
        except OSError as exc:  # the disk is full: metadata.json keeps what it said last
            if not _disk_full(exc):
                raise
        return result

    def _callbacks(
        self,
        timings: Timings,
        evaluate: StepEvalCallback,
        monitor: Any,
        pause: StopAtStepCallback | None,
        received: list[int],
        extra: Sequence[Any],
    ) -> list[Any]:
        """The session's callbacks, in order: timing first (so evaluations and checkpoints are counted apart)."""
        from stable_baselines3.common.callbacks import ProgressBarCallback

        config = self.config
        out = [
            TimingCallback(timings),
            RolloutThreadsCallback(self.threads),
            StopFlagCallback(lambda: bool(received)),
            EpisodeMetricsCallback(),
            StepCheckpointCallback(self.run, config.save_freq, config.keep_checkpoints, timings),
            evaluate,
            monitor,
            *extra,
        ]
        ent_schedule = entropy_schedule(config.ent_coef, config.phases, config.timesteps)
        if ent_schedule is not None:
            out.append(EntropyPhaseCallback(ent_schedule))
        out += self.setup.callbacks
        if pause is not None:
            out.append(pause)
        if self.progress and sys.stderr.isatty():
            out.append(ProgressBarCallback())
        return out

    def _learn(self, callbacks: list[Any], received: list[int], pause: StopAtStepCallback | None) -> tuple[str, int, str]:
        """Run SB3's ``learn`` to the target; ``(status, exit code, message)``."""
        from stable_baselines3.common.callbacks import CallbackList

        model = self.model
        try:
            model.learn(
                total_timesteps=self.config.timesteps - model.num_timesteps,
                callback=CallbackList(callbacks),
                reset_num_timesteps=self.resume_step is None,
                progress_bar=False,
            )
        except (EOFError, BrokenPipeError, ConnectionResetError) as exc:
            return "crashed", 1, f"an env worker process died ({type(exc).__name__}); its traceback is above"
        except KeyboardInterrupt:
            return "interrupted", EXIT_SIGNAL[signal.SIGINT], ""
        except StopTraining as exc:
            return "stopped", 0, f"stopped early: {exc}"
        except Exception as exc:
            if isinstance(exc, OSError) and _disk_full(exc):  # one line says it all: no traceback
                return "crashed", 1, self._disk_full_message(exc)
            traceback.print_exc()
            return "crashed", 1, _crash_message(exc, model, self.config, self.device)
        if received:
            return "interrupted", EXIT_SIGNAL[signal.Signals(received[0])], ""
        if pause is not None and pause.reached:
            return "paused", 0, ""
        return "finished", 0, ""

    def _finish(
        self, status: str, start_steps: int, evaluate: StepEvalCallback, timings: Timings, monitor: Any
    ) -> tuple[Path | None, EvalRecord | None]:
        """Save the session's checkpoint (and, when finished, the final model and its evaluation), close the logs
        and the env; ``(checkpoint, final evaluation)``."""
        import torch

        model, run, config = self.model, self.run, self.config
        last_train_s = timings.close_update(time.perf_counter())
        if last_train_s:
            model.logger.record("time/train_s", last_train_s)
        checkpoint = None
        final_eval = evaluate.last if evaluate.last is not None and evaluate.last.timesteps == model.num_timesteps else None
        try:
            if model.num_timesteps > start_steps or self.resume_step is None:
                t0 = time.perf_counter()
                checkpoint = save_checkpoint(model, run, config.keep_checkpoints)
                timings.save_s += time.perf_counter() - t0
            if status == "finished":
                save_model(model, run / "final_model.zip")
                if final_eval is None:
                    t0 = time.perf_counter()
                    torch.set_num_threads(1)
                    try:
                        final_eval = evaluate.evaluate_now()
                    except StopTraining:  # e.g. a search pruning at this evaluation: training has ended already
                        final_eval = evaluate.last
                    finally:
                        torch.set_num_threads(self.threads)
                    timings.eval_s += time.perf_counter() - t0
            # the final update and evaluation: a row of their own after a stop mid-rollout, else they fill in the
            # columns the last rollout's row lacks (progress.csv keeps one row per step; TensorBoard gets them all)
            model.logger.record("time/total_timesteps", model.num_timesteps)
            model.logger.dump(model.num_timesteps)
        finally:
            model.logger.close()
            monitor.close()
            with contextlib.suppress(Exception):  # a dead worker's pipe; the run's files are what matter now
                model.get_env().close()
        return checkpoint, final_eval

    def _disk_full_message(self, exc: OSError) -> str:
        """The one line a session stopped by a full disk ends with: what failed, what is kept, what to do."""
        latest = self.run.latest_checkpoint()
        kept = f"the newest checkpoint is {latest[1].name}" if latest else "there is no checkpoint yet"
        return (
            f"disk full: {exc.strerror or exc} writing {exc.filename or 'a file'}; nothing half-written was kept and "
            f"{kept}; free some space, then --resume {self.run.path}"
        )

    def _record_session(self, result: TrainResult, session: dict[str, Any]) -> None:
        meta = read_json(self.run / "metadata.json")
        session.update(ended=now(), status=result.status, end_timesteps=result.timesteps, fps=round(result.fps, 1))
        self.run.update_metadata(
            status=result.status,
            ended=now(),
            timesteps=result.timesteps,
            sessions=[*meta.get("sessions", []), session],
            result={k: v for k, v in result.to_dict().items() if k not in ("run_dir",)},
        )


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[list[int]]:
    """SIGINT and SIGTERM ask training to stop after the current step (the signals received are yielded); a second
    one stops it at once, unless the process has lost its parent: the kernel then repeats its parent-death SIGTERM
    (once per thread of the dead parent), and the repeats are not a second request."""
    received: list[int] = []
    parent = os.getppid()

    def on_signal(signum: int, frame: Any) -> None:
        if received:
            if os.getppid() != parent:  # orphaned: the parent-death signal again
                return
            signal.signal(signum, signal.SIG_DFL)  # a second Ctrl-C: stop at once
            raise KeyboardInterrupt
        received.append(signum)
        disarm_parent_death_signal()  # stopping already: no more from a dying parent, during or after the stop
        print(f"\n{signal.Signals(signum).name}: stopping after this step, saving a checkpoint...", file=sys.stderr)

    previous = {s: signal.signal(s, on_signal) for s in EXIT_SIGNAL}
    try:
        yield received
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _disk_full(exc: OSError) -> bool:
    return exc.errno in (errno.ENOSPC, errno.EDQUOT)


def _crash_message(exc: BaseException, model: Any, config: TrainConfig, device: str) -> str:
    """The explanation of a crash; for CUDA OOM, the memory estimator's view of the run and the largest preset
    that fits the card."""
    import torch

    if isinstance(exc, torch.cuda.OutOfMemoryError):
        try:
            from mission_gym.hardware import gpu_memory_gb, total_ram_gb
            from mission_gym.settings.notes import oom_message
            from mission_gym.settings.sizing import shape_from_config

            shape = shape_from_config(config, device="cuda")
            return oom_message(shape, gpu_memory_gb(device), total_ram_gb())
        except Exception:
            return "CUDA out of memory: try a smaller preset, a smaller --batch-size, or --device cpu"
    return f"training stopped by {type(exc).__name__}: {exc}"
