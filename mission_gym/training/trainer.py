"""The PPO trainer: one training session of a run (new, resumed or branched), its files finished whatever happens.

Everything that can be wrong with the input (preset, flags, env id, env arguments, batch size, device, a parent
checkpoint with other spaces) is checked by :func:`~mission_gym.training.build.build_run` before the run directory is
made, so bad input never leaves a half-made run behind; so is the memory the run needs against what the machine
has (:func:`~mission_gym.settings.sizing.check_memory`). A session holds its run's lock
(:mod:`~mission_gym.rundir.lock`) from the moment it touches the run until it ends.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from mission_gym.config.yaml_io import ConfigError, dump_yaml, read_yaml, validate
from mission_gym.ppo.batched.stack import batchable
from mission_gym.rundir.directory import (
    RunDir,
    check_run_name,
    default_run_name,
    hardware_info,
    resolve_run_dir,
    write_new_run,
)
from mission_gym.rundir.evaluations import EVALUATIONS, drop_rows_after
from mission_gym.rundir.files import atomic_write_text
from mission_gym.rundir.lock import RunLock, lock_run
from mission_gym.rundir.recovery import newest_loadable_checkpoint
from mission_gym.settings.resolve import Resolved, resolve
from mission_gym.settings.schema import TrainConfig
from mission_gym.settings.sizing import check_memory
from mission_gym.training.build import RunSetup, build_run, space_signature
from mission_gym.training.result import TrainResult
from mission_gym.training.session import EXIT_SIGNAL, Outcome, Session, stop_on_signals

__all__ = ["EXIT_SIGNAL", "RESUME_OVERRIDES", "Trainer", "train_together"]
# Flags a resumed run may change: they touch neither the learning maths nor the env.
RESUME_OVERRIDES = ("timesteps", "device", "num_threads", "vec_env")


class Trainer:
    """One training session of a run. Build it with :meth:`create` (a new or branched run) or :meth:`resume`;
    then :meth:`train`.

    :param setup: the run's env, model and machine (:func:`~mission_gym.training.build.build_run`)
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
        # the starts the run finds for its restarts go in its own directory
        run_settings = replace(run_settings, config=config.with_starts_in(run.path / "starts"))
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
        On CUDA a model the batched learner covers trains through it (:func:`train_together` of one run), its
        rollout's inference and its update captured in CUDA graphs instead of launched kernel by kernel.

        :param stop_at: pause once this many env steps are trained (status ``paused``, exit code 0, a checkpoint
            saved, no final model); ``--resume`` continues the run with its schedules where they were
        :param callbacks: more SB3 callbacks for this session (e.g. a dashboard's)
        :param callback_after_eval: called after each evaluation
            (:class:`~mission_gym.training.callbacks.StepEvalCallback`)
        """
        if self.device.startswith("cuda") and batchable(self.model) is None:
            return train_together([self], stop_at, [(callbacks, callback_after_eval)])[0]
        try:
            with stop_on_signals() as received:
                session = Session(self, received, stop_at, callbacks, callback_after_eval)
                outcome = self._learn(session)
            return session.end(outcome)
        finally:
            if self.lock is not None:
                self.lock.release()

    def _learn(self, session: Session) -> Outcome:
        """SB3's ``learn`` to the target; how it ended."""
        from stable_baselines3.common.callbacks import CallbackList

        model = self.model
        try:
            model.learn(
                total_timesteps=self.config.timesteps - model.num_timesteps,
                callback=CallbackList(session.callbacks),
                reset_num_timesteps=self.resume_step is None,
                progress_bar=False,
            )
        except SystemExit:
            raise
        except BaseException as exc:  # Ctrl-C's KeyboardInterrupt included: the session keeps a checkpoint
            return session.outcome(exc)
        return session.outcome()


def train_together(
    trainers: Sequence[Trainer],
    stop_at: int | None = None,
    extras: Sequence[tuple[Sequence[Any], Any]] | None = None,
    on_iteration: Callable[[], None] | None = None,
) -> list[TrainResult]:
    """Train the sessions of several runs of one network shape (a population's members) as one batched learner
    (:mod:`mission_gym.ppo.batched`): one rollout step and one minibatch step for all of them, their envs stepped on
    every core of this process, their in-training evaluations played at once. Each run's files, logs, checkpoints
    and result are its own, as if it trained alone; a signal stops them all, each with a checkpoint; an error in
    one run's own code (a callback, its env) ends that run alone.

    :param stop_at: pause every run once it has trained this many env steps
    :param extras: for each run, ``(callbacks, callback_after_eval)`` as :meth:`Trainer.train` takes them
    :param on_iteration: called after each iteration (rollout and update) of the batch
    :returns: each run's result, in order
    """
    from mission_gym.hardware import available_cores
    from mission_gym.ppo.batched.learner import BatchedLearner, BatchEvaluator, Member

    try:
        with stop_on_signals() as received:
            evaluator = BatchEvaluator()
            sessions = []
            for k, trainer in enumerate(trainers):
                callbacks, after_eval = extras[k] if extras is not None else ((), None)
                sessions.append(Session(trainer, received, stop_at, callbacks, after_eval, evaluator))
            members = []
            for trainer, session in zip(trainers, sessions):
                assert trainer.setup.streams is not None
                total, callback = session.setup_learn()
                members.append(Member(trainer.model, callback, total, *trainer.setup.streams))
            try:
                learner = BatchedLearner(members, threads=available_cores(), on_iteration=on_iteration)
                evaluator.learner = learner
                learner.learn()
                outcomes = [s.outcome(m.error if m.status == "failed" else None) for s, m in zip(sessions, members)]
            except SystemExit:
                raise
            except BaseException as exc:  # the batch itself failed (CUDA out of memory, Ctrl-C twice): every run ends
                first = sessions[0].outcome(exc)
                outcomes = [first] * len(sessions)
        return [s.end(o) for s, o in zip(sessions, outcomes)]
    finally:
        for trainer in trainers:
            if trainer.lock is not None:
                trainer.lock.release()
