"""Building a run: the PPO arguments of a configuration, the training env (the one env factory), the model (new,
resumed from a checkpoint, or branched from a parent's weights), and the machine set up for it.

:func:`build_run` returns one typed object (:class:`RunSetup`); everything wrong with the input is raised as a
:class:`~mission_gym.config.ConfigError` with the env closed, before anything is written.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mission_gym import ENV_ID
from mission_gym.agents.spec import AgentSpec, policy_args
from mission_gym.config.yaml_io import ConfigError
from mission_gym.hardware import available_cores, enable_tf32, learner_threads
from mission_gym.ppo.distill import DistillTargets, distillation
from mission_gym.ppo.schedules import learning_rate_schedule
from mission_gym.rundir.directory import vecnormalize_path
from mission_gym.rundir.files import read_json
from mission_gym.settings.resolve import Resolved
from mission_gym.settings.schema import TrainConfig
from mission_gym.training import parts
from mission_gym.training.portable import restore_schedules
from mission_gym.vec.factory import make_vec_env, policy_space, probe_spaces

# SB3 warns that an MLP policy on a GPU leaves it idle; the GPU presets run members side by side for that reason
# (docs/gpu-guide.md), so the warning says nothing a user of them can act on
warnings.filterwarnings("ignore", message="You are trying to run .* on the GPU", category=UserWarning)


def ppo_kwargs(config: TrainConfig) -> tuple[Any, dict[str, Any]]:
    """SB3 ``PPO``'s policy and keyword arguments for a finalised configuration."""
    extra = dict(config.hyperparams)
    extra.pop("policy_kwargs", None)  # the policy's, in policy_args
    policy, policy_kwargs = policy_args(AgentSpec.of(config))
    assert isinstance(config.batch_size, int)
    return policy, dict(
        learning_rate=learning_rate_schedule(config.learning_rate, config.lr_schedule, config.phases, config.timesteps),
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


def setup_machine(device: str, num_threads: int | None, env_workers: int) -> int:
    """Set up torch for a run on ``device`` (TF32 on CUDA) and set the learner's torch threads; returns them."""
    import torch

    if device.startswith("cuda"):
        enable_tf32()
    threads = learner_threads(env_workers, num_threads)
    torch.set_num_threads(threads)
    # torch.distributions' argument checks are a debugging aid; in a rollout they cost ~10% of the time
    torch.distributions.Distribution.set_default_validate_args(False)
    return threads


def make_training_env(config: TrainConfig, seed: int, stats: Path | None = None) -> Any:
    """The training env of a resolved configuration (the one place it is built). The ``native`` env steps its games
    on every core this process may use: while it steps, the learner waits (and a population member has its own cores).

    :param seed: env ``i`` is seeded with ``seed + i``
    :param stats: VecNormalize statistics to continue from
    """
    return make_vec_env(
        config.env,
        config.n_envs,
        config.vec_env,
        seed=seed,
        env_kwargs=config.env_kwargs,
        normalize=config.normalize,
        normalize_reward=config.normalize_reward,
        gamma=config.gamma,
        normalize_stats=stats,
        threads=available_cores(),
        env_wrapper=config.env_wrapper,
        frame_stack=config.frame_stack,
    )


@dataclass
class RunSetup:
    """A run ready to train.

    :param config: the resolved configuration (its batch size and vec-env kind fixed)
    :param venv: the training env
    :param model: the PPO model, the env attached
    :param device: the resolved torch device
    :param threads: learner torch threads
    :param callbacks: the callbacks of the run parts it uses (:mod:`mission_gym.training.parts`)
    :param parent: what the lineage records of a branch's parent (None otherwise)
    :param streams: the model's random generators as they stood when it was built (a batched learner draws its
        actions and minibatch orders from them: :func:`member_streams`)
    """

    config: TrainConfig
    venv: Any
    model: Any
    device: str
    threads: int
    callbacks: list[Any] = field(default_factory=list)
    parent: dict[str, Any] | None = None
    streams: Any = None

    def close(self) -> None:
        """Close the env (its workers, if any)."""
        self.venv.close()


def build_run(
    run: Resolved,
    *,
    checkpoint: Path | None = None,
    parent_checkpoint: str | Path | None = None,
    runs_dir: str | Path = "runs",
    algorithm: Any = None,
) -> RunSetup:
    """Build the env and model of a resolved configuration (:func:`~mission_gym.settings.resolve.resolve`): a new
    run, a run resumed from ``checkpoint`` (its step count, statistics and schedules continue; this session's games
    are seeded ``seed + step``), or a branch whose weights come from ``parent_checkpoint``.

    :param algorithm: the PPO class (default :class:`~mission_gym.ppo.lean.LeanPPO`, SB3's PPO with less overhead,
        which saves and loads as SB3's; the benchmark passes SB3's own to compare)
    :raises ConfigError: for anything wrong; the env is closed then
    """
    from mission_gym.ppo.lean import LeanPPO

    PPO = algorithm or LeanPPO

    config, device = run.config, run.device
    kind = config.vec_env
    parent = parent_stats = parent_info = None
    if parent_checkpoint is not None:
        parent, parent_stats, parent_info = _load_parent(parent_checkpoint, runs_dir)
        if parent_stats is not None and not config.normalize:
            config = config.model_copy(update={"normalize": True})  # the weights expect normalised inputs
    if parent is not None and checkpoint is None and (kind != "native" or config.env != ENV_ID):
        # before the env is built: its statistics would meet the parent's first (MissionVecEnv checks its own)
        obs_space, act_space = probe_spaces(config.env, config.env_kwargs, config.env_wrapper, config.frame_stack)
        compare_spaces(parent, policy_space(obs_space), act_space)
    step = 0
    if checkpoint is not None:
        step = checkpoint_step(checkpoint)
        stats = vecnormalize_path(checkpoint)
        venv = make_training_env(config, config.seed + step, stats if stats.is_file() else None)
    else:
        venv = make_training_env(config, config.seed, parent_stats)
    try:
        # after the env: a native env on several cores launches numba's OpenMP pool, which sets the OpenMP thread
        # count torch reads as its own (MissionCore)
        threads = setup_machine(device, config.num_threads, config.n_envs if kind == "subproc" else 0)
        callbacks = parts.session_callbacks(config, venv, step)
        if checkpoint is not None:
            model = PPO.load(checkpoint, env=venv, device=device)
            restore_schedules(model, config)  # the file holds SB3-native stand-ins of the phased schedules
            # PPO.load reseeds every generator and the envs with the first session's seed (SB3's _setup_model), so
            # a resumed session would replay its games: seed this session's own (a population's clones, whose
            # seed differs, then see other games than the member they copy)
            model.set_random_seed(config.seed + step)
        else:
            if parent is not None:
                compare_spaces(parent, policy_space(venv.observation_space), venv.action_space)
            policy, kwargs = ppo_kwargs(config)
            model = PPO(policy, venv, device=device, seed=config.seed, verbose=0, **kwargs)
        if parent is not None:
            _copy_weights(parent, model)
        config = _attach_options(model, config)
        # the generators as the model's learn will find them (a distillation's teachers drew from them as they were
        # built): a member of a batched learner draws from these
        streams = member_streams(model)
        if getattr(model, "distillation", None) is not None:
            callbacks.append(DistillTargets(model.distillation))
    except BaseException:
        venv.close()
        raise
    return RunSetup(config, venv, model, device, threads, callbacks, parent_info, streams)


def member_streams(model: Any) -> tuple[Any, Any]:
    """Generators in the state the global ones are in now: call once ``model`` is built or loaded (its seeding set
    them) and nothing else will draw before it learns; its lone run would draw its actions and minibatch orders from
    these states."""
    import numpy as np
    import torch as th

    gen = th.Generator(device=model.device)
    gen.set_state(th.cuda.get_rng_state(model.device) if model.device.type == "cuda" else th.get_rng_state())
    rs = np.random.RandomState()
    rs.set_state(np.random.get_state())
    return gen, rs


def _attach_options(model: Any, config: TrainConfig) -> TrainConfig:
    """The options a built model takes as attributes: ``compile_update``, and a distillation's term (the
    configuration returned with each teacher's situations, measured when none were given)."""
    from mission_gym.ppo.lean import LeanPPO

    if isinstance(model, LeanPPO):
        model.compile_update = config.compile_update
    if config.distill is not None:
        spec, model.distillation = distillation(model, config.distill, config.env_kwargs)
        config = config.model_copy(update={"distill": spec})
    return config


def checkpoint_step(path: Path) -> int:
    """The env step a checkpoint file was saved at (from its name, ``ckpt_<steps>_steps.zip``)."""
    from mission_gym.rundir.directory import CKPT_PATTERN

    match = CKPT_PATTERN.match(path.name)
    if match is None:
        raise ConfigError(f"{path} is not a checkpoint file (ckpt_<steps>_steps.zip)")
    return int(match.group(1))


def space_signature(space: Any) -> str:
    """A readable description of a space, stored in ``lineage.json`` and used in mismatch messages."""
    return repr(space)


def compare_spaces(parent: Any, obs_space: Any, act_space: Any) -> None:
    """Refuse a parent model whose observation or action space differs from the new env's."""
    problems = []
    if parent.observation_space != obs_space:
        problems.append(f"observation space {space_signature(parent.observation_space)} vs {space_signature(obs_space)}")
    if parent.action_space != act_space:
        problems.append(f"action space {space_signature(parent.action_space)} vs {space_signature(act_space)}")
    if problems:
        raise ConfigError("--parent-checkpoint does not fit this env: parent's " + "; parent's ".join(problems))


def _load_parent(checkpoint: str | Path, runs_dir: str | Path) -> tuple[Any, Path | None, dict[str, Any]]:
    """The parent model of a branch, its statistics file and what lineage records about it."""
    from stable_baselines3 import PPO

    from mission_gym.agents.loading import NOT_FOR_ACTING, model_file

    try:
        path, parent_run = model_file(checkpoint, runs_dir)
    except FileNotFoundError as exc:
        raise ConfigError(f"--parent-checkpoint: {exc}") from None
    try:
        parent = PPO.load(path, device="cpu", custom_objects=NOT_FOR_ACTING)  # the branch's schedules are its own
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
