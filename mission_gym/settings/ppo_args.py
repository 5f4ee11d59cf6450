"""The keyword arguments of SB3's ``PPO`` that a configuration's ``hyperparams`` may set: read from its signature,
so a new SB3 argument is usable without a change here."""

from __future__ import annotations

from mission_gym.settings.schema import TrainConfig

# PPO constructor arguments the configuration sets itself (or that make no sense from a command line).
_MANAGED_PPO_ARGS = {
    "policy",
    "env",
    "tensorboard_log",
    "verbose",
    "device",
    "seed",
    "_init_setup_model",
    "rollout_buffer_class",
}


def ppo_extra_args() -> list[str]:
    """Keyword arguments of SB3's ``PPO`` that ``hyperparams`` may set (those without a configuration field)."""
    import inspect

    from stable_baselines3 import PPO

    params = inspect.signature(PPO.__init__).parameters
    return sorted(p for p in params if p not in _MANAGED_PPO_ARGS and p != "self" and p not in TrainConfig.model_fields)
