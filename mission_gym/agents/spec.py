"""What an agent is, in plain data (:class:`AgentSpec`): the env it acts in and the policy network it was built with,
under the names a run's configuration gives them; and the one way a registered policy is built from it
(:func:`policy_args`), for training (:func:`mission_gym.training.build.ppo_kwargs`) and for rebuilding a saved agent
(:func:`rebuild_policy`) alike, so the two cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mission_gym.config.yaml_io import ConfigError, validate
from mission_gym.settings.registry import POLICIES, SB3_POLICIES, load
from mission_gym.settings.schema import ACTIVATIONS, TrainConfig

#: the configuration fields that describe an agent (the rest say how it was trained)
SPEC_FIELDS = ("env", "env_kwargs", "env_wrapper", "frame_stack", "policy", "network_arch", "activation", "ortho_init")
#: the entries of a configuration's ``hyperparams`` that shape the policy (SB3's ``policy_kwargs`` and ``use_sde``)
POLICY_HYPERPARAMS = ("policy_kwargs", "use_sde")


@dataclass(frozen=True)
class AgentSpec:
    """The env an agent acts in and the description of its policy network, each field named as in
    :class:`~mission_gym.settings.schema.TrainConfig` and checked as a configuration's is.

    :param env: Gymnasium id
    :param env_kwargs: the env's keyword arguments
    :param policy: a registered policy (:mod:`mission_gym.settings.registry`): ``mlp``, ``cnn``, ``multi_input``,
        ``trunk``
    :param network_arch: hidden layer widths
    :param activation: activation name (``tanh``, ``relu``, ...)
    :param ortho_init: SB3's orthogonal initialisation
    :param hyperparams: the entries of the run's ``hyperparams`` that shape the policy (:data:`POLICY_HYPERPARAMS`)
    :param env_wrapper: the wrappers around the env (:mod:`mission_gym.vec.wrappers`), by name
    :param frame_stack: observations stacked
    """

    env: str
    env_kwargs: dict[str, Any]
    policy: str
    network_arch: list[int]
    activation: str
    ortho_init: bool
    hyperparams: dict[str, Any] = field(default_factory=dict)
    env_wrapper: list[Any] = field(default_factory=list)
    frame_stack: int | None = None

    @classmethod
    def of(cls, config: TrainConfig) -> AgentSpec:
        """The spec of a run's configuration."""
        policy_kwargs = config.hyperparams.get("policy_kwargs")
        if policy_kwargs is not None and not isinstance(policy_kwargs, Mapping):
            raise ConfigError(f"hyperparams.policy_kwargs: expected a mapping of SB3 policy arguments, got {policy_kwargs!r}")
        return cls(
            env=config.env,
            env_kwargs=dict(config.env_kwargs),
            policy=config.policy,
            network_arch=list(config.network_arch),
            activation=config.activation,
            ortho_init=config.ortho_init,
            hyperparams={k: config.hyperparams[k] for k in POLICY_HYPERPARAMS if k in config.hyperparams},
            env_wrapper=list(config.env_wrapper),
            frame_stack=config.frame_stack,
        )

    @classmethod
    def from_config(cls, data: Any, source: str) -> AgentSpec:
        """The spec in a run's ``config.yaml`` or an agent file (its other fields are ignored); fields left out take
        a configuration's defaults.

        :param data: the file's mapping
        :param source: the file, for error messages
        :raises ConfigError: naming the file and the field, for anything a configuration would refuse
        """
        if not isinstance(data, Mapping):
            raise ConfigError(f"{source}: expected a mapping of configuration fields, got {type(data).__name__}")
        subset = {k: data[k] for k in SPEC_FIELDS if k in data}
        hyperparams = data.get("hyperparams") or {}
        if not isinstance(hyperparams, Mapping):
            raise ConfigError(f"{source}: hyperparams: expected a mapping, got {hyperparams!r}")
        subset["hyperparams"] = {k: hyperparams[k] for k in POLICY_HYPERPARAMS if k in hyperparams}
        try:
            return cls.of(validate(TrainConfig, subset, source))
        except ConfigError as exc:
            raise ConfigError(str(exc) if str(exc).startswith(source) else f"{source}: {exc}") from None

    def to_dict(self) -> dict[str, Any]:
        """The spec as configuration fields (what :meth:`from_config` reads back)."""
        return {name: getattr(self, name) for name in (*SPEC_FIELDS, "hyperparams")}

    @property
    def use_sde(self) -> bool:
        return bool(self.hyperparams.get("use_sde", False))


def policy_args(spec: AgentSpec) -> tuple[Any, dict[str, Any]]:
    """SB3's policy (class or name, e.g. ``"MlpPolicy"``) and ``policy_kwargs`` for an agent's registered policy."""
    import torch

    policy_kwargs = {
        "net_arch": list(spec.network_arch),
        "activation_fn": getattr(torch.nn, ACTIVATIONS[spec.activation]),
        "ortho_init": spec.ortho_init,
        **(spec.hyperparams.get("policy_kwargs") or {}),
    }
    if spec.policy in SB3_POLICIES:
        return SB3_POLICIES[spec.policy], policy_kwargs
    if spec.policy not in POLICIES:  # ``auto``: resolved for the env's spaces before a policy is built
        raise ConfigError(f"policy {spec.policy!r} is not resolved for an env; one of {', '.join(POLICIES)} builds")
    return load(POLICIES[spec.policy])(policy_kwargs)


def rebuild_policy(spec: AgentSpec, observation_space: Any, action_space: Any) -> Any:
    """A new SB3 actor-critic policy of an agent's description for the env's spaces (weights not loaded yet), as
    ``PPO`` builds it.

    :raises ConfigError: when SB3 refuses the description's arguments
    """
    from stable_baselines3 import PPO

    policy, policy_kwargs = policy_args(spec)
    policy_class = PPO.policy_aliases[policy] if isinstance(policy, str) else policy
    try:
        # the learning rate only sets up the optimiser, which acting never steps
        return policy_class(observation_space, action_space, lambda _: 0.0, use_sde=spec.use_sde, **policy_kwargs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"policy {spec.policy!r} does not build with {policy_kwargs}: {exc}") from None
