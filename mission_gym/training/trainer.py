"""The PPO trainer: build a run (new, resumed or branched), train it, and finish its files whatever happens.

Everything that can be wrong with the input (preset, flags, env id, env arguments, batch size, device, a
parent checkpoint with other spaces) is checked before the run directory is made, so bad input never leaves a
half-made run behind.
"""

from __future__ import annotations

import csv
import platform
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym

from mission_gym.config.yaml_io import ConfigError, dump_yaml, read_yaml, validate
from mission_gym.training import hardware
from mission_gym.training.batch import check_batch_size, choose_batch_size
from mission_gym.training.callbacks import (
    DashboardCallback,
    EntropyPhaseCallback,
    EpisodeMetricsCallback,
    EvalRecord,
    RolloutThreadsCallback,
    StepCheckpointCallback,
    StepEvalCallback,
    StopAtStepCallback,
    StopFlagCallback,
    TimingCallback,
    Timings,
    make_evaluator,
    read_eval_records,
    refresh_dashboard,
    save_checkpoint,
    save_model,
)
from mission_gym.training.curriculum import Curriculum, CurriculumCallback, mission_core
from mission_gym.training.entropy import lean_entropy
from mission_gym.training.presets import TrainConfig, ppo_extra_args
from mission_gym.training.rundir import (
    RunDir,
    atomic_write_text,
    check_run_name,
    config_hash,
    default_run_name,
    read_json,
    resolve_run_dir,
    vecnormalize_path,
    write_json,
)
from mission_gym.training.vec_env import MISSION_ENV_ID, make_vec_env, probe_spaces, resolve_kind

ACTIVATIONS = {"tanh": "Tanh", "relu": "ReLU", "elu": "ELU", "leaky_relu": "LeakyReLU", "gelu": "GELU", "silu": "SiLU"}
EXIT_SIGNAL = {signal.SIGINT: 130, signal.SIGTERM: 143}
# Flags a resumed run may change: they touch neither the learning maths nor the env.
RESUME_OVERRIDES = ("timesteps", "device", "num_threads", "vec_env")


@dataclass
class TrainResult:
    """What a training session did.

    :param status: ``finished``, ``interrupted`` or ``crashed``
    :param exit_code: 0, 130 (SIGINT), 143 (SIGTERM) or 1
    """

    run_dir: Path
    status: str
    exit_code: int
    timesteps: int
    target_timesteps: int
    session_steps: int
    wall_s: float
    learn_s: float
    rollout_s: float
    train_s: float
    eval_s: float
    save_s: float
    final_eval: EvalRecord | None = None
    checkpoint: Path | None = None
    message: str = ""

    @property
    def fps(self) -> float:
        """Env steps per second of training wall time (evaluation and saving included)."""
        return self.session_steps / self.learn_s if self.learn_s > 0 else 0.0

    @property
    def shares(self) -> dict[str, float]:
        """Fractions of the training wall time: rollout (env + inference), update (PPO), other (eval, saving, logging)."""
        if self.learn_s <= 0:
            return {"rollout": 0.0, "update": 0.0, "other": 0.0}
        rollout, update = self.rollout_s / self.learn_s, self.train_s / self.learn_s
        return {"rollout": rollout, "update": update, "other": max(0.0, 1.0 - rollout - update)}

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "final_eval"}
        out.update(fps=self.fps, shares=self.shares, run_dir=str(self.run_dir), checkpoint=str(self.checkpoint or ""))
        out["final_eval"] = None if self.final_eval is None else self.final_eval.row() | {"outcomes": self.final_eval.outcomes}
        return out

    def summary(self) -> str:
        s = self.shares
        lines = [
            f"{self.status}: {self.timesteps:,} / {self.target_timesteps:,} steps in {self.run_dir}",
            f"  wall {self.wall_s:.1f} s (training {self.learn_s:.1f} s)   {self.fps:,.0f} steps/s",
            f"  time: update {100 * s['update']:.0f}%  rollout {100 * s['rollout']:.0f}%  "
            f"eval/save/other {100 * s['other']:.0f}%",
        ]
        ev = self.final_eval
        if ev is not None:
            win = (
                ""
                if ev.win_rate is None
                else f"win rate {100 * ev.win_rate:.0f}% ({ev.win_ci_low:.2f}-{ev.win_ci_high:.2f})  "
            )
            lines.append(
                f"  final eval ({ev.n_episodes} episodes): {win}return {ev.mean_return:.2f} ± {ev.std_return:.2f}  "
                f"length {ev.mean_ep_length:.0f}"
            )
        if self.checkpoint is not None:
            lines.append(f"  checkpoint {self.checkpoint}")
        if self.message:
            lines.append(f"  {self.message}")
        return "\n".join(lines)


def space_signature(space: gym.Space) -> str:
    """A readable description of a space, stored in ``lineage.json`` and used in mismatch messages."""
    return repr(space)


def compare_spaces(parent: Any, obs_space: gym.Space, act_space: gym.Space) -> None:
    """Refuse a parent model whose observation or action space differs from the new env's."""
    problems = []
    if parent.observation_space != obs_space:
        problems.append(f"observation space {space_signature(parent.observation_space)} vs {space_signature(obs_space)}")
    if parent.action_space != act_space:
        problems.append(f"action space {space_signature(parent.action_space)} vs {space_signature(act_space)}")
    if problems:
        raise ConfigError("--parent-checkpoint does not fit this env: parent's " + "; parent's ".join(problems))


def ppo_kwargs(config: TrainConfig) -> dict[str, Any]:
    """SB3 ``PPO`` keyword arguments of a configuration."""
    import torch

    from mission_gym.training.schedules import learning_rate_schedule

    policy_kwargs = {
        "net_arch": list(config.network_arch),
        "activation_fn": getattr(torch.nn, ACTIVATIONS[config.activation]),
        "ortho_init": config.ortho_init,
    }
    extra = dict(config.hyperparams)
    policy_kwargs.update(extra.pop("policy_kwargs", None) or {})
    assert isinstance(config.batch_size, int)
    return dict(
        learning_rate=learning_rate_schedule(config.learning_rate, config.lr_schedule, config.phases),
        n_steps=config.n_steps,
        batch_size=config.batch_size,
        n_epochs=config.n_epochs,
        gamma=config.gamma,
        gae_lambda=config.gae_lambda,
        clip_range=learning_rate_schedule(config.clip_range, config.clip_schedule),
        clip_range_vf=config.clip_range_vf,
        ent_coef=config.ent_coef,
        vf_coef=config.vf_coef,
        max_grad_norm=config.max_grad_norm,
        target_kl=config.target_kl,
        policy_kwargs=policy_kwargs,
        **extra,
    )


def finalize_config(config: TrainConfig) -> TrainConfig:
    """Resolve ``batch_size: auto`` and check everything that needs more than one field.

    :raises ConfigError: for a batch size that does not divide the rollout, or unknown PPO extras
    """
    if config.batch_size == "auto":
        batch = choose_batch_size(config.rollout, config.target_batch, config.min_batch)
    else:
        batch = check_batch_size(int(config.batch_size), config.rollout, config.n_envs, config.n_steps)
    valid = ppo_extra_args()
    for key in config.hyperparams:
        if key not in valid:
            from mission_gym.config.loader import suggest

            raise ConfigError(f"hyperparams: unknown PPO argument {key!r}{suggest(key, valid)}; valid: {', '.join(valid)}")
    return config.model_copy(update={"batch_size": batch})


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for pkg in ("mission_gym", "stable_baselines3", "torch", "gymnasium", "numpy", "numba", "mujoco"):
        try:
            out[pkg] = version(pkg.replace("_", "-"))
        except PackageNotFoundError:
            pass
    return out


def _git_commit() -> str | None:
    root = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "-uno"], capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def _hardware(device: str, threads: int) -> dict[str, Any]:
    import psutil
    import torch

    info: dict[str, Any] = {
        "host": platform.node(),
        "cpu_count": psutil.cpu_count(),
        "cores_available": hardware.available_cores(),
        "ram_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "device": device,
        "torch_threads": threads,
    }
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(torch.device(device))
        info.update(gpu=props.name, gpu_mem_gb=round(props.total_memory / 2**30, 1))
    return info


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


class Trainer:
    """One training session of a run. Build it with :meth:`create` (a new or branched run) or :meth:`resume`;
    then :meth:`train`.

    :param config: the run's resolved configuration
    :param run: its directory (already created and populated)
    :param model: the PPO model, its env attached
    :param device: the resolved torch device
    :param threads: learner torch threads
    :param resume_step: the step a resumed session starts from (None for a new run)
    :param progress: show a progress bar (only on a terminal)
    """

    def __init__(
        self,
        config: TrainConfig,
        run: RunDir,
        model: Any,
        device: str,
        threads: int,
        resume_step: int | None = None,
        progress: bool = True,
        curriculum: Curriculum | None = None,
    ) -> None:
        self.config, self.run, self.model = config, run, model
        self.curriculum = curriculum
        self.device, self.threads = device, threads
        self.resume_step = resume_step
        self.progress = progress

    # --- construction ---------------------------------------------------------------------------------------
    @staticmethod
    def _setup_machine(config: TrainConfig, env_workers: int) -> tuple[str, int]:
        import torch

        try:
            device = hardware.resolve_device(config.device)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if device.startswith("cuda"):
            hardware.enable_tf32()
        threads = hardware.learner_threads(env_workers, config.num_threads)
        torch.set_num_threads(threads)
        # torch.distributions' argument checks are a debugging aid; in a rollout they cost ~10% of the time
        torch.distributions.Distribution.set_default_validate_args(False)
        return device, threads

    @classmethod
    def _build(
        cls, config: TrainConfig, runs_dir: str | Path, parent_checkpoint: str | Path | None
    ) -> tuple[TrainConfig, Any, Any, Curriculum | None, dict[str, Any] | None, str, int]:
        """Check a finalised configuration by building its env and model: ``(config with the vec env kind
        resolved, venv, model, curriculum, parent info, device, threads)``.

        :raises ConfigError: for anything wrong; the env is closed then
        """
        from stable_baselines3 import PPO

        cores = hardware.available_cores()
        kind = resolve_kind(config.vec_env, config.env, config.n_envs, cores)
        obs_space, act_space = (None, None)
        parent, parent_stats, parent_info = None, None, None
        if parent_checkpoint is not None:
            parent, parent_stats, parent_info = _load_parent(parent_checkpoint, runs_dir)
            if parent_stats is not None and not config.normalize:
                config = config.model_copy(update={"normalize": True})  # the weights expect normalised inputs
        if kind != "native":
            obs_space, act_space = probe_spaces(config.env, config.env_kwargs)
            if parent is not None:
                compare_spaces(parent, obs_space, act_space)
        device, threads = cls._setup_machine(config, config.n_envs if kind == "subproc" else 0)
        venv = make_vec_env(
            config.env,
            config.n_envs,
            kind,
            seed=config.seed,
            env_kwargs=config.env_kwargs,
            normalize=config.normalize,
            normalize_reward=config.normalize_reward,
            gamma=config.gamma,
            normalize_stats=parent_stats,
            bootstrap_truncated=config.bootstrap_truncated,
        )
        try:
            curriculum = _curriculum(config, venv) if config.curriculum else None  # checked before anything is written
            if parent is not None:
                compare_spaces(parent, venv.observation_space, venv.action_space)
            policy, kwargs = _policy(config, venv)
            model = PPO(policy, venv, device=device, seed=config.seed, verbose=0, **kwargs)
            lean_entropy(model)
            if parent is not None:
                _copy_weights(parent, model)
        except BaseException:
            venv.close()
            raise
        config = config.model_copy(update={"vec_env": kind})

        return config, venv, model, curriculum, parent_info, device, threads

    @classmethod
    def check(cls, config: TrainConfig) -> TrainConfig:
        """Everything :meth:`create` checks for a new run of ``config``, making nothing: the env and model are
        built and closed (a population run checks its members' configuration this way before it starts them).

        :returns: the finalised configuration
        :raises ConfigError: for bad input
        """
        config = finalize_config(config)
        config, venv, _, _, _, _, _ = cls._build(config, ".", None)
        venv.close()
        return config

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
    ) -> Trainer:
        """Validate everything, build env and model, then make the run directory.

        :param config: the configuration (preset plus flags)
        :param runs_dir: parent of the run directory
        :param run_name: the run's directory name (default ``<env>_<preset>_<time>``, or the branch name)
        :param parent_checkpoint: start from this model's weights (a branch); its VecNormalize statistics too
        :param branch_name: the branch's name (required with ``parent_checkpoint``)
        :param notes: free text kept in ``lineage.json``
        :param command: the command line, for ``command.txt``
        :raises ConfigError: for any bad input; nothing is created then
        """

        config = finalize_config(config)
        if (parent_checkpoint is None) != (branch_name is None):
            raise ConfigError("--parent-checkpoint and --branch-name go together (a branch needs both)")
        name = check_run_name(run_name or branch_name or default_run_name(config.env, config.preset))
        run = RunDir(Path(runs_dir) / name)
        if run.path.exists():
            raise ConfigError(f"run directory {str(run.path)!r} already exists; pick another --run-name or --resume it")

        config, venv, model, curriculum, parent_info, device, threads = cls._build(config, runs_dir, parent_checkpoint)
        kind = config.vec_env

        # Everything checked: now the run directory.
        run.create()
        write_new_run(
            run,
            config,
            command,
            notes,
            lineage={
                "parent": parent_info,
                "root": parent_info["root"] if parent_info else name,
                "branch": branch_name,
                "observation_space": space_signature(venv.observation_space),
                "action_space": space_signature(venv.action_space),
            },
            metadata={"hardware": _hardware(device, threads), "vec_env": kind, "sessions": []},
        )
        return cls(config, run, model, device, threads, progress=progress, curriculum=curriculum)

    @classmethod
    def resume(
        cls,
        run: str | Path,
        runs_dir: str | Path = "runs",
        overrides: dict[str, Any] | None = None,
        command: str | None = None,
        progress: bool = True,
    ) -> Trainer:
        """Continue a run from its newest checkpoint: step count, schedules, statistics and logs continue.

        :param run: the run's name (under ``runs_dir``) or directory
        :param overrides: changes allowed on resume (:data:`RESUME_OVERRIDES`: timesteps, device, num_threads,
            vec_env)
        :raises ConfigError: when the run, its configuration or a checkpoint is missing, or for other overrides
        """
        from stable_baselines3 import PPO

        overrides = dict(overrides or {})
        bad = [k for k in overrides if k not in RESUME_OVERRIDES]
        if bad:
            flags = ", ".join("--" + k.replace("_", "-") for k in bad)
            raise ConfigError(
                f"--resume continues a run with its saved configuration; {flags} cannot change it "
                "(branch instead: --parent-checkpoint CKPT --branch-name NAME)"
            )
        run_dir = RunDir(resolve_run_dir(run, runs_dir))
        config = validate(TrainConfig, read_yaml(run_dir / "config.yaml"), str(run_dir / "config.yaml"))
        config = config.model_copy(update={"vec_env": overrides.pop("vec_env", config.vec_env)})
        if overrides:
            config = validate(TrainConfig, {**config.model_dump(), **overrides}, "command line")
        config = finalize_config(config)
        latest = run_dir.latest_checkpoint()
        if latest is None:
            raise ConfigError(f"run {str(run_dir.path)!r} has no checkpoint to resume from (checkpoints/ is empty)")
        step, ckpt = latest
        if step >= config.timesteps:
            raise ConfigError(
                f"run {run_dir.name!r} already reached {step:,} of its {config.timesteps:,} steps; "
                "give a larger --timesteps to train on"
            )
        kind = resolve_kind(config.vec_env, config.env, config.n_envs, hardware.available_cores())
        device, threads = cls._setup_machine(config, config.n_envs if kind == "subproc" else 0)
        stats = vecnormalize_path(ckpt)
        venv = make_vec_env(
            config.env,
            config.n_envs,
            kind,
            seed=config.seed + step,
            env_kwargs=config.env_kwargs,
            normalize=config.normalize,
            normalize_reward=config.normalize_reward,
            gamma=config.gamma,
            normalize_stats=stats if stats.is_file() else None,
            bootstrap_truncated=config.bootstrap_truncated,
        )
        try:
            curriculum = _curriculum(config, venv, step / config.timesteps) if config.curriculum else None
            model = PPO.load(ckpt, env=venv, device=device)
            # PPO.load reseeds every generator and the envs with the first session's seed (SB3's _setup_model), so
            # a resumed session would replay its games: seed this session's own (a population's clones, whose
            # seed differs, then see other games than the member they copy)
            model.set_random_seed(config.seed + step)
            lean_entropy(model)
        except BaseException:
            venv.close()
            raise
        if overrides or config.vec_env != kind:
            atomic_write_text(run_dir / "config.yaml", dump_yaml(config.model_copy(update={"vec_env": kind}).model_dump()))
        if command:
            with open(run_dir / "command.txt", "a") as f:
                f.write(command + "\n")
        # rows a killed process wrote after the checkpoint are dropped so the curves continue from it
        rows = [r for r in read_eval_records(run_dir / "evaluations.csv") if _int(r.get("timesteps")) <= step]
        if (run_dir / "evaluations.csv").is_file():
            from mission_gym.training.callbacks import EVAL_COLUMNS

            with open(run_dir / "evaluations.csv", "w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=EVAL_COLUMNS, extrasaction="ignore")
                writer.writeheader()
                writer.writerows(rows)
        run_dir.update_metadata(target_timesteps=config.timesteps, hardware=_hardware(device, threads))
        return cls(config, run_dir, model, device, threads, resume_step=step, progress=progress, curriculum=curriculum)

    # --- training ---------------------------------------------------------------------------------------------
    def train(self, stop_at: int | None = None) -> TrainResult:
        """Train to the target step count; on SIGINT/SIGTERM or a crash, save a checkpoint and finish the files.

        :param stop_at: pause once this many env steps are trained (status ``paused``, exit code 0, a checkpoint
            saved, no final model); ``--resume`` continues the run with its schedules where they were
        """
        import torch
        from stable_baselines3.common.callbacks import CallbackList, ProgressBarCallback

        from mission_gym.training.logger import make_logger
        from mission_gym.training.monitor import ResourceMonitorCallback
        from mission_gym.training.schedules import entropy_schedule

        t_start = time.perf_counter()
        config, model, run = self.config, self.model, self.run
        model.set_logger(make_logger(run.path, config.tensorboard, self.resume_step))
        timings = Timings()
        evaluator = make_evaluator(config.env, config.env_kwargs, config.eval_episodes, frames_dir=run.path)
        eval_cb = StepEvalCallback(run, evaluator, config.eval_freq, timings)
        monitor = ResourceMonitorCallback(device=self.device)
        received: list[int] = []
        callbacks = [
            TimingCallback(timings),
            RolloutThreadsCallback(self.threads),
            StopFlagCallback(lambda: bool(received)),
            EpisodeMetricsCallback(),
            StepCheckpointCallback(run, config.save_freq, config.keep_checkpoints, timings),
            eval_cb,
            monitor,
            DashboardCallback(run),
        ]
        ent_schedule = entropy_schedule(config.ent_coef, config.phases)
        if ent_schedule is not None:
            callbacks.append(EntropyPhaseCallback(ent_schedule))
        if self.curriculum is not None:
            callbacks.append(CurriculumCallback(self.curriculum))
        pause = StopAtStepCallback(stop_at) if stop_at is not None else None
        if pause is not None:
            callbacks.append(pause)
        if self.progress and sys.stderr.isatty():
            callbacks.append(ProgressBarCallback())

        def on_signal(signum: int, frame: Any) -> None:
            if received:  # a second Ctrl-C: stop at once
                signal.signal(signum, signal.SIG_DFL)
                raise KeyboardInterrupt
            received.append(signum)
            print(f"\n{signal.Signals(signum).name}: stopping after this step, saving a checkpoint...", file=sys.stderr)

        previous = {s: signal.signal(s, on_signal) for s in EXIT_SIGNAL}
        start_steps = model.num_timesteps
        session = {"started": _now(), "start_timesteps": start_steps, "device": self.device, "threads": self.threads}
        run.update_metadata(
            status="running",
            started=_now() if self.resume_step is None else read_json(run / "metadata.json").get("started", _now()),
        )
        status, exit_code, message = "finished", 0, ""
        t_learn = time.perf_counter()
        try:
            model.learn(
                total_timesteps=config.timesteps - start_steps,
                callback=CallbackList(callbacks),
                reset_num_timesteps=self.resume_step is None,
                progress_bar=False,
            )
            if received:
                status, exit_code = "interrupted", EXIT_SIGNAL[signal.Signals(received[0])]
            elif pause is not None and pause.reached:
                status, message = "paused", f"paused at --stop-at {stop_at:,}; --resume {run.path} continues it"
        except (EOFError, BrokenPipeError, ConnectionResetError) as exc:
            status, exit_code = "crashed", 1
            message = f"an env worker process died ({type(exc).__name__}); its traceback is above"
        except KeyboardInterrupt:
            status, exit_code = "interrupted", EXIT_SIGNAL[signal.SIGINT]
        except Exception as exc:
            status, exit_code = "crashed", 1
            message = _crash_message(exc, model, config, self.device)
            traceback.print_exc()
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
        last_train_s = timings.close_update(time.perf_counter())
        if last_train_s:
            model.logger.record("time/train_s", last_train_s)
        learn_s = time.perf_counter() - t_learn

        checkpoint = None
        final_eval = eval_cb.last if eval_cb.last is not None and eval_cb.last.timesteps == model.num_timesteps else None
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
                    final_eval = eval_cb.evaluate_now()
                    torch.set_num_threads(self.threads)
                    timings.eval_s += time.perf_counter() - t0
            model.logger.record("time/total_timesteps", model.num_timesteps)  # a last row: the final update and eval
            model.logger.dump(model.num_timesteps)
        finally:
            model.logger.close()
            monitor.close()
            try:
                model.get_env().close()
            except Exception:  # a dead worker's pipe; the run's files are what matter now
                pass
        wall_s = time.perf_counter() - t_start
        result = TrainResult(
            run_dir=run.path,
            status=status,
            exit_code=exit_code,
            timesteps=int(model.num_timesteps),
            target_timesteps=config.timesteps,
            session_steps=int(model.num_timesteps - start_steps),
            wall_s=wall_s,
            learn_s=learn_s,
            rollout_s=timings.rollout_s,
            train_s=timings.train_s,
            eval_s=timings.eval_s,
            save_s=timings.save_s,
            final_eval=final_eval,
            checkpoint=checkpoint,
            message=message,
        )
        meta = read_json(run / "metadata.json")
        session.update(ended=_now(), status=status, end_timesteps=result.timesteps, fps=round(result.fps, 1))
        run.update_metadata(
            status=status,
            ended=_now(),
            timesteps=result.timesteps,
            sessions=[*meta.get("sessions", []), session],
            result={k: v for k, v in result.to_dict().items() if k not in ("run_dir",)},
        )
        refresh_dashboard(run, force=True)
        return result


def write_new_run(
    run: RunDir,
    config: TrainConfig,
    command: str | None,
    notes: str | None,
    lineage: dict[str, Any],
    metadata: dict[str, Any],
) -> None:
    """A new run's ``config.yaml``, ``command.txt``, ``lineage.json`` and ``metadata.json``.

    :param lineage: what this run's lineage adds to (or changes in) the common fields (a root run by default)
    :param metadata: the same for its metadata (hardware, ...)
    """
    config_data = config.model_dump()
    atomic_write_text(run / "config.yaml", dump_yaml(config_data))
    atomic_write_text(run / "command.txt", (command or " ".join(sys.argv)) + "\n")
    common = {"run": run.name, "parent": None, "root": run.name, "branch": None, "notes": notes}
    write_json(run / "lineage.json", {**common, "config_hash": config_hash(config_data), **lineage, "created": _now()})
    write_json(
        run / "metadata.json",
        {
            "run": run.name,
            "env_id": config.env,
            "preset": config.preset,
            "status": "created",
            "target_timesteps": config.timesteps,
            "timesteps": 0,
            "notes": notes,
            "versions": _versions(),
            "git_commit": _git_commit(),
            **metadata,
            "created": _now(),
        },
    )


def _int(value: Any) -> int:
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return 0


def _crash_message(exc: BaseException, model: Any, config: TrainConfig, device: str) -> str:
    """The explanation of a crash; for CUDA OOM, the memory estimator's view of the run and the largest preset
    that fits the card."""
    import torch

    if isinstance(exc, torch.cuda.OutOfMemoryError):
        try:
            import psutil

            from mission_gym.training import memory

            spaces = memory.spaces_fields(model.observation_space, model.action_space)
            shape = memory.shape_from_config(config.model_dump(), device="cuda", **spaces)
            return memory.oom_message(shape, hardware.gpu_memory_gb(device), psutil.virtual_memory().total / 2**30)
        except Exception:
            return "CUDA out of memory: try a smaller preset, a smaller --batch-size, or --device cpu"
    return f"training stopped by {type(exc).__name__}: {exc}"


def _policy(config: TrainConfig, venv: Any) -> tuple[Any, dict[str, Any]]:
    """The SB3 policy (class or name) and ``PPO`` keyword arguments for a freshly built training env.

    :raises ConfigError: for ``policy: units`` on an env without Mission Gym's batched core
    """
    kwargs = ppo_kwargs(config)
    core = mission_core(venv)
    # the observation's layout: from the batched core, or from worker 0's MissionEnv (vec_env dummy or subproc)
    any_core = venv.get_attr("core", [0])[0] if core is None and config.env == MISSION_ENV_ID else core
    actor_dim = None
    if any_core is not None:
        from mission_gym.training.critic_state import CriticStatePolicy, actor_size

        actor_dim = actor_size(any_core)
    if actor_dim is not None:
        if config.policy != "mlp":
            raise ConfigError(
                f"world.observation.critic_state needs policy mlp (its actor must not see the critic's block), "
                f"got policy {config.policy!r}"
            )
        kwargs["policy_kwargs"] = {**kwargs["policy_kwargs"], "actor_dim": actor_dim}
        return CriticStatePolicy, kwargs
    if config.policy == "mlp":
        return "MlpPolicy", kwargs
    if config.policy == "trunk":
        from mission_gym.training.trunk import trunk_policy_kwargs

        kwargs["policy_kwargs"] = trunk_policy_kwargs(kwargs["policy_kwargs"])
        return "MlpPolicy", kwargs
    from mission_gym.sim.layout import C_DEF_BEARINGS, C_DEF_MOTION, C_DEF_OBJECTIVE, C_LIDAR_RAYS
    from mission_gym.training.unit_policy import UnitPolicy, unit_layout

    if core is None:
        raise ConfigError(f"policy units needs Mission Gym's batched training env (vec_env native), got {config.env!r}")
    st = core.static
    layout = unit_layout(
        st.n_attackers,
        st.n_defenders,
        int(st.cfg[C_LIDAR_RAYS]),
        bool(st.cfg[C_DEF_BEARINGS]),
        bool(st.cfg[C_DEF_MOTION]),
        bool(st.cfg[C_DEF_OBJECTIVE]),
    )
    kwargs["policy_kwargs"] = {**kwargs["policy_kwargs"], "unit_layout": layout}
    return UnitPolicy, kwargs


def _curriculum(config: TrainConfig, venv: Any, progress: float = 0.0) -> Curriculum:
    """The run's curriculum over the game a freshly built training env plays (its config is the real game), with
    the env set to the curriculum's game at ``progress`` for its first resets.

    :raises ConfigError: for a training env without Mission Gym's batched core, or a bad setting or value
    """
    core = mission_core(venv)
    if core is None:
        raise ConfigError(f"curriculum needs Mission Gym's batched training env (vec_env native), got {config.vec_env!r}")
    curriculum = Curriculum(core.config, config.curriculum)
    try:
        core.set_config(curriculum.config_at(progress))
    except ValueError as exc:
        raise ConfigError(f"curriculum: {exc}") from None
    return curriculum


def _load_parent(checkpoint: str | Path, runs_dir: str | Path) -> tuple[Any, Path | None, dict[str, Any]]:
    """The parent model of a branch, its statistics file and what lineage records about it."""
    from stable_baselines3 import PPO

    from mission_gym.training.agent import _model_file

    try:
        path, parent_run = _model_file(checkpoint, runs_dir)
    except FileNotFoundError as exc:
        raise ConfigError(f"--parent-checkpoint: {exc}") from None
    try:
        parent = PPO.load(path, device="cpu")
    except Exception as exc:
        raise ConfigError(f"--parent-checkpoint {str(path)!r} is not a loadable PPO model: {exc}") from None
    stats = vecnormalize_path(path)
    root = None
    if parent_run is not None:
        root = read_json(parent_run / "lineage.json").get("root") or parent_run.name
    info = {
        "run": parent_run.name if parent_run is not None else None,
        "path": str(parent_run) if parent_run is not None else None,
        "checkpoint": str(path),
        "timesteps": int(parent.num_timesteps),
        "root": root or (parent_run.name if parent_run is not None else str(path)),
    }
    return parent, (stats if stats.is_file() else None), info


def _copy_weights(parent: Any, model: Any) -> None:
    """Copy the parent's policy weights (and optimiser moments) into the new model; refuse other networks."""
    src, dst = parent.policy.state_dict(), model.policy.state_dict()
    diff = [k for k in sorted(set(src) | set(dst)) if k not in src or k not in dst or src[k].shape != dst[k].shape]
    if diff:
        parent_arch = parent.policy_kwargs.get("net_arch")
        raise ConfigError(
            f"--parent-checkpoint has another network (parent net_arch {parent_arch}, this run "
            f"{model.policy_kwargs.get('net_arch')}; first differing tensor {diff[0]!r}); keep --network-arch the same"
        )
    model.policy.load_state_dict(src)
    try:
        model.policy.optimizer.load_state_dict(parent.policy.optimizer.state_dict())
    except (ValueError, KeyError):
        pass  # another optimiser class: start its moments afresh
    # the new run's learning rate, whatever the parent's optimiser said; SB3 sets it again each update
    for group in model.policy.optimizer.param_groups:
        group["lr"] = model.lr_schedule(1.0)
