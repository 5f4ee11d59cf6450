"""One training session of a run, around whichever learner trains it: its callbacks, logger and ``metadata.json``
at the start; at the end its checkpoint, final model and evaluation, files closed and :class:`TrainResult`, whatever
happened (a finish, a pause, a signal, a crash or a full disk).

:class:`Session` is what :meth:`Trainer.train <mission_gym.training.trainer.Trainer.train>` runs around SB3's ``learn``
and what :func:`~mission_gym.training.trainer.train_together` runs around a batched learner's.
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
from pathlib import Path
from typing import Any

from mission_gym.agents.spec import AgentSpec
from mission_gym.hardware import armed_parent_death_signal, disarm_parent_death_signal
from mission_gym.ppo.schedules import entropy_schedule, epochs_schedule
from mission_gym.rundir.evaluations import EvalRecord
from mission_gym.rundir.files import now, read_json
from mission_gym.settings.schema import TrainConfig
from mission_gym.training.callbacks import (
    EpisodeMetricsCallback,
    PhaseCallback,
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
from mission_gym.training.result import TrainResult

EXIT_SIGNAL = {signal.SIGINT: 130, signal.SIGTERM: 143}
#: a session's end: (status, exit code, message)
Outcome = tuple[str, int, str]


class Session:
    """A training session's bookkeeping (see the module doc). Made with the signals already watched
    (:func:`stop_on_signals`): it sets the model's logger, builds the callbacks and marks the run running.

    :param trainer: the run's :class:`~mission_gym.training.trainer.Trainer` (its setup, directory, resume step and
        progress display)
    :param received: the signals received so far (the session's stop flag reads it)
    :param stop_at: pause once this many env steps are trained
    :param callbacks: more SB3 callbacks for this session
    :param callback_after_eval: called after each evaluation
    :param evaluator: evaluates for the session's evaluation callback where it can (a batched learner's members)
    """

    def __init__(
        self,
        trainer: Any,
        received: list[int],
        stop_at: int | None = None,
        callbacks: Sequence[Any] = (),
        callback_after_eval: Any = None,
        evaluator: Any = None,
    ) -> None:
        from mission_gym.rundir.logger import make_logger
        from mission_gym.training.monitor import ResourceMonitorCallback

        self.trainer, self.received, self.stop_at = trainer, received, stop_at
        self.t_start = time.perf_counter()
        config, model, run = trainer.config, trainer.model, trainer.run
        model.set_logger(make_logger(run.path, config.tensorboard, trainer.resume_step))
        self.timings = Timings()
        self.spec = AgentSpec.of(config)  # what every saved model's agent file says of it
        self.evaluate = StepEvalCallback(
            run, self.spec, config.eval_episodes, config.eval_freq, self.timings, callback_after_eval, evaluator,
            config.stop_return,
        )  # fmt: skip
        self.monitor = ResourceMonitorCallback(device=trainer.device)
        self.pause = StopAtStepCallback(stop_at) if stop_at is not None else None
        self.start_steps = model.num_timesteps
        self.record = {
            "started": now(),
            "start_timesteps": self.start_steps,
            "device": trainer.device,
            "threads": trainer.threads,
        }
        started = now() if trainer.resume_step is None else read_json(run / "metadata.json").get("started", now())
        run.update_metadata(status="running", started=started)
        self.callbacks = self._callbacks(callbacks)
        self.t_learn = time.perf_counter()

    @property
    def config(self) -> TrainConfig:
        return self.trainer.config

    def _callbacks(self, extra: Sequence[Any]) -> list[Any]:
        """The session's callbacks, in order: timing first (so evaluations and checkpoints are counted apart)."""
        from stable_baselines3.common.callbacks import ProgressBarCallback

        trainer, config, received = self.trainer, self.config, self.received
        out = [
            TimingCallback(self.timings),
            RolloutThreadsCallback(trainer.threads),
            StopFlagCallback(lambda: bool(received)),
            EpisodeMetricsCallback(),
            StepCheckpointCallback(trainer.run, config.save_freq, config.keep_checkpoints, self.timings, self.spec),
            self.evaluate,
            self.monitor,
            *extra,
        ]
        schedules = {
            "ent_coef": entropy_schedule(config.ent_coef, config.phases, config.timesteps),
            "n_epochs": epochs_schedule(config.n_epochs, config.phases, config.timesteps),
        }
        phased = {name: s for name, s in schedules.items() if s is not None}
        if phased:
            out.append(PhaseCallback(phased))
        out += trainer.setup.callbacks
        if self.pause is not None:
            out.append(self.pause)
        if trainer.progress and sys.stderr.isatty():
            out.append(ProgressBarCallback())
        return out

    def setup_learn(self) -> tuple[int, Any]:
        """SB3's ``_setup_learn`` for this session: ``(the step it trains to, its callback list)``, started."""
        from stable_baselines3.common.callbacks import CallbackList

        model = self.trainer.model
        total_timesteps, callback = model._setup_learn(
            self.config.timesteps - model.num_timesteps,
            CallbackList(self.callbacks),
            reset_num_timesteps=self.trainer.resume_step is None,
            tb_log_name="run",
            progress_bar=False,
        )
        callback.on_training_start(locals(), globals())  # SB3's learn's names: a progress bar reads total_timesteps
        return total_timesteps, callback

    # --- how it ended ---------------------------------------------------------------------------------------
    def outcome(self, error: BaseException | None = None) -> Outcome:
        """``(status, exit code, message)`` of a learner that returned (``error`` None) or raised ``error``."""
        trainer = self.trainer
        if error is None:
            if self.received:
                return "interrupted", EXIT_SIGNAL[signal.Signals(self.received[0])], ""
            if self.pause is not None and self.pause.reached:
                return "paused", 0, ""
            reached = self.evaluate.reached
            if reached is not None:
                score = f"the evaluation at {reached.timesteps:,} steps scored {reached.mean_return:g}"
                return "finished", 0, f"finished early: {score}, stop_return {self.config.stop_return:g}"
            return "finished", 0, ""
        if isinstance(error, EOFError | BrokenPipeError | ConnectionResetError):
            return "crashed", 1, f"an env worker process died ({type(error).__name__}); its traceback is above"
        if isinstance(error, KeyboardInterrupt):
            return "interrupted", EXIT_SIGNAL[signal.SIGINT], ""
        if isinstance(error, StopTraining):
            return "stopped", 0, f"stopped early: {error}"
        if isinstance(error, OSError) and disk_full(error):  # one line says it all: no traceback
            return "crashed", 1, self._disk_full_message(error)
        traceback.print_exception(error)
        return "crashed", 1, crash_message(error, trainer.config, trainer.device)

    def end(self, outcome: Outcome) -> TrainResult:
        """Finish the run's files for how the session ended; the session's :class:`TrainResult`."""
        status, exit_code, message = outcome
        trainer, run, model = self.trainer, self.trainer.run, self.trainer.model
        learn_s = time.perf_counter() - self.t_learn
        try:
            checkpoint, final_eval = self._finish(status)
        except OSError as exc:
            if not disk_full(exc):
                raise
            checkpoint, final_eval = None, None
            status, exit_code, message = "crashed", 1, self._disk_full_message(exc)
        timings = self.timings
        if status == "paused":
            message = f"paused at --stop-at {self.stop_at:,}; --resume {run.path} continues it"
        result = TrainResult(
            run_dir=run.path,
            status=status,
            exit_code=exit_code,
            timesteps=int(model.num_timesteps),
            target_timesteps=trainer.config.timesteps,
            session_steps=int(model.num_timesteps - self.start_steps),
            wall_s=time.perf_counter() - self.t_start,
            learn_s=learn_s,
            rollout_s=timings.rollout_s,
            train_s=timings.train_s,
            eval_s=timings.eval_s,
            save_s=timings.save_s,
            final_eval=final_eval,
            checkpoint=checkpoint,
            message=message,
        )
        try:
            self._record_session(result)
        except OSError as exc:  # the disk is full: metadata.json keeps what it said last
            if not disk_full(exc):
                raise
        return result

    def _finish(self, status: str) -> tuple[Path | None, EvalRecord | None]:
        """Save the session's checkpoint (and, when finished, the final model and its evaluation), close the logs
        and the env; ``(checkpoint, final evaluation)``."""
        import torch

        trainer, timings, evaluate = self.trainer, self.timings, self.evaluate
        model, run, config = trainer.model, trainer.run, trainer.config
        last_train_s = timings.close_update(time.perf_counter())
        if last_train_s:
            model.logger.record("time/train_s", last_train_s)
        checkpoint = None
        # a run that reached stop_return ended one env step into a rollout, its model the one last evaluated
        final_eval = evaluate.reached
        if evaluate.last is not None and evaluate.last.timesteps == model.num_timesteps:
            final_eval = evaluate.last
        try:
            if model.num_timesteps > self.start_steps or trainer.resume_step is None:
                t0 = time.perf_counter()
                checkpoint = save_checkpoint(model, run, config.keep_checkpoints, self.spec)
                timings.save_s += time.perf_counter() - t0
            if status == "finished":
                save_model(model, run / "final_model.zip", self.spec)
                if final_eval is None:
                    t0 = time.perf_counter()
                    torch.set_num_threads(1)
                    try:
                        final_eval = evaluate.evaluate_now()
                    except StopTraining:  # e.g. a search pruning at this evaluation: training has ended already
                        final_eval = evaluate.last
                    finally:
                        torch.set_num_threads(trainer.threads)
                    timings.eval_s += time.perf_counter() - t0
            # the final update and evaluation: a row of their own after a stop mid-rollout, else they fill in the
            # columns the last rollout's row lacks (progress.csv keeps one row per step; TensorBoard gets them all)
            model.logger.record("time/total_timesteps", model.num_timesteps)
            model.logger.dump(model.num_timesteps)
        finally:
            model.logger.close()
            self.monitor.close()
            with contextlib.suppress(Exception):  # a dead worker's pipe; the run's files are what matter now
                model.get_env().close()
        return checkpoint, final_eval

    def _disk_full_message(self, exc: OSError) -> str:
        """The one line a session stopped by a full disk ends with: what failed, what is kept, what to do."""
        run = self.trainer.run
        latest = run.latest_checkpoint()
        kept = f"the newest checkpoint is {latest[1].name}" if latest else "there is no checkpoint yet"
        return (
            f"disk full: {exc.strerror or exc} writing {exc.filename or 'a file'}; nothing half-written was kept and "
            f"{kept}; free some space, then --resume {run.path}"
        )

    def _record_session(self, result: TrainResult) -> None:
        run = self.trainer.run
        meta = read_json(run / "metadata.json")
        session = {**self.record, "ended": now(), "status": result.status, "end_timesteps": result.timesteps}
        session["fps"] = round(result.fps, 1)
        run.update_metadata(
            status=result.status,
            ended=now(),
            timesteps=result.timesteps,
            sessions=[*meta.get("sessions", []), session],
            result={k: v for k, v in result.to_dict().items() if k not in ("run_dir",)},
        )


#: how long a repeated parent-death signal waits for the parent to finish dying before it counts as a second request
PARENT_EXIT_WAIT_S = 5.0


@contextlib.contextmanager
def stop_on_signals() -> Iterator[list[int]]:
    """SIGINT and SIGTERM ask training to stop after the current step (the signals received are yielded); a second
    one stops it at once, unless it is the parent-death signal again: the kernel sends it once per thread of the dead
    parent as each thread exits, and the repeats are not a second request."""
    received: list[int] = []
    parent = os.getppid()
    death_signal = armed_parent_death_signal()

    def on_signal(signum: int, frame: Any) -> None:
        if received:
            if signum == death_signal and parent_gone(parent, PARENT_EXIT_WAIT_S):
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


def parent_gone(parent: int, wait_s: float) -> bool:
    """Whether this process has been handed to another parent within ``wait_s`` seconds. A parent killed with several
    threads signals its children as each thread exits, while ``getppid`` still names it: the last thread, which hands
    the children on, may take a moment (it frees the parent's memory)."""
    deadline = time.monotonic() + wait_s
    while os.getppid() == parent:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def disk_full(exc: OSError) -> bool:
    return exc.errno in (errno.ENOSPC, errno.EDQUOT)


def crash_message(exc: BaseException, config: TrainConfig, device: str) -> str:
    """The explanation of a crash; for CUDA OOM, the memory estimator's view of the run and the largest preset
    that fits the card."""
    import torch

    if isinstance(exc, torch.cuda.OutOfMemoryError):
        try:
            from mission_gym.hardware import gpu_memory_gb, total_ram_gb
            from mission_gym.plan.notes import oom_message
            from mission_gym.settings.sizing import shape_from_config

            shape = shape_from_config(config, device="cuda")
            return oom_message(shape, gpu_memory_gb(device), total_ram_gb())
        except Exception:
            return "CUDA out of memory: try a smaller preset, a smaller --batch-size, or --device cpu"
    return f"training stopped by {type(exc).__name__}: {exc}"
