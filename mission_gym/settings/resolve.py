"""What a configuration leaves to the machine and the task, fixed once before a run is built: the minibatch size
(``batch_size: auto``), the vec-env kind (``vec_env: auto``), the policy (``policy: auto``) and the torch device
(``device: auto``).

:func:`resolve` is what the trainer calls; :func:`batch_size` and :func:`vec_env_kind` are the same rules for a
configuration that is only sized (:func:`~mission_gym.settings.sizing.shape_from_config`), so an estimate and the run
it sizes never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass

from mission_gym.config.loader import suggest
from mission_gym.config.yaml_io import ConfigError
from mission_gym.hardware import available_cores, resolve_device
from mission_gym.settings.minibatch import check_batch_size, choose_batch_size
from mission_gym.settings.ppo_args import ppo_extra_args
from mission_gym.settings.registry import AUTO_POLICY, policy_for
from mission_gym.settings.schema import TrainConfig
from mission_gym.vec.factory import has_native, resolve_kind


@dataclass(frozen=True)
class Resolved:
    """A configuration ready to build.

    :param config: ``batch_size`` a number and ``vec_env`` a kind; ``device`` as it was asked for (``auto`` stays
        ``auto`` in the run's ``config.yaml``, so a resumed run picks its device where it resumes)
    :param device: the torch device it trains on here
    """

    config: TrainConfig
    device: str


def batch_size(config: TrainConfig) -> int:
    """The minibatch size: ``auto`` is the largest divisor of the rollout within ``[min_batch, target_batch]``.

    :raises ConfigError: for an explicit size that does not divide the rollout
    """
    if config.batch_size == "auto":
        return choose_batch_size(config.rollout, config.target_batch, config.min_batch)
    return check_batch_size(int(config.batch_size), config.rollout, config.n_envs, config.n_steps)


def vec_env_kind(config: TrainConfig, cores: int | None = None) -> str:
    """The vec-env kind (``auto``: native where the env has one, else by envs, ``cores`` (default this process's) and
    whether worker processes were measured to step the task faster: :mod:`mission_gym.vec.probe`).

    :raises ConfigError: for ``native`` with an env that has none
    """
    if config.vec_env != "auto":
        return resolve_kind(config.vec_env, config.env, config.n_envs, 1, config.env_kwargs, config.env_wrapper)
    cores = available_cores() if cores is None else cores
    worth = False
    if config.n_envs > 1 and cores > 1 and not has_native(config.env, config.env_kwargs, config.env_wrapper):
        from mission_gym.vec.probe import task_profile

        worth = task_profile(config.env, config.env_kwargs, config.env_wrapper, cores).worth_a_process
    return resolve_kind("auto", config.env, config.n_envs, cores, config.env_kwargs, config.env_wrapper, worth)


def policy_name(config: TrainConfig) -> str:
    """The policy a configuration builds: its own, or for ``policy: auto`` the one its observations call for
    (:func:`~mission_gym.settings.registry.policy_for`; the env built once to read its space)."""
    if config.policy != AUTO_POLICY:
        return config.policy
    from mission_gym.vec.factory import probe_spaces
    from mission_gym.vec.probe import obs_kind

    observation_space, _ = probe_spaces(config.env, config.env_kwargs, config.env_wrapper, config.frame_stack)
    return policy_for(obs_kind(observation_space))


def torch_device(device: str) -> str:
    """The torch device a configuration's ``device`` names here (``auto``: CUDA when present).

    :raises ConfigError: for a device this machine does not have
    """
    try:
        return resolve_device(device)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def resolve(config: TrainConfig, cores: int | None = None) -> Resolved:
    """Fix the batch size, the vec-env kind and the device of a configuration for this machine, and check what
    needs more than one field.

    :param cores: CPU cores for ``vec_env: auto`` (default: those this process may use)
    :raises ConfigError: for a batch size that does not divide the rollout, unknown PPO extras, ``native`` for an
        env without one, or a device this machine does not have
    """
    batch = batch_size(config)
    valid = ppo_extra_args()
    for key in config.hyperparams:
        if key not in valid:
            raise ConfigError(f"hyperparams: unknown PPO argument {key!r}{suggest(key, valid)}; valid: {', '.join(valid)}")
    device = torch_device(config.device)
    kind = vec_env_kind(config, cores)
    return Resolved(config.model_copy(update={"batch_size": batch, "vec_env": kind, "policy": policy_name(config)}), device)
