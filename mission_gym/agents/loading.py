"""A trained agent ready to act (:func:`load_agent`): the policy of a run's model with the observation statistics it
was trained with, loaded without unpickling anything unless the caller trusts the files.

How it decides:

- the model's safe files are there (``X.safetensors`` + ``X.agent.json``, :mod:`mission_gym.agents.files`): the
  policy is rebuilt from the agent file's description and the env's spaces and its weights loaded from safetensors;
  nothing is unpickled, whoever made the files;
- only pickles are (an SB3 zip and its ``.pkl`` statistics: a zoo repository, a run saved before the safe files):
  refused with :class:`PickleRefused`, unless ``trust_pickle`` (the commands' ``--trust-pickle``): then the zip is
  read with ``PPO.load`` and the statistics with ``pickle.load``, which run whatever code the files name.

Loading to train (``--resume``, ``--parent-checkpoint``, a population scoring its own members, a distillation's
teachers) reads a run's own files, which the user made, as before.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mission_gym import ENV_ID
from mission_gym.agents.files import NormStats, load_weights, read_agent_file, read_weights
from mission_gym.agents.spec import AgentSpec, rebuild_policy
from mission_gym.config.yaml_io import ConfigError, read_yaml
from mission_gym.rundir.directory import RunDir, agent_file_path, resolve_run_dir, vecnormalize_path, weights_path
from mission_gym.vec.factory import policy_space, probe_spaces

MODEL_CHOICE = ("best_model.zip", "final_model.zip")  # a run's model, in order of preference
READ_ATTEMPTS = 3  # times a model is looked for when its files vanish while being read
#: the flag of every command that loads an agent to act (evaluate, enjoy, record_video, hub push)
TRUST_PICKLE = "--trust-pickle"
# What a model loaded to act (not to train on) need not unpickle: its training schedules, which may be objects of
# another version of this package (a run saved before a module moved still loads).
NOT_FOR_ACTING: dict[str, Any] = {
    "learning_rate": 0.0,
    "lr_schedule": lambda _: 0.0,
    "clip_range": lambda _: 0.0,
    "clip_range_vf": None,
}


class PickleRefused(ConfigError):
    """A model exists only as pickles and the caller did not trust them (the message names ``--trust-pickle``)."""


@dataclass
class Agent:
    """A loaded policy that normalises observations the way its training env did.

    :param policy: the SB3 actor-critic policy
    :param stats: the observation statistics it was trained with (None: raw observations)
    :param env_id: the Gymnasium id it was trained on
    :param env_kwargs: the env's keyword arguments
    :param model_path: the model (its ``.zip`` name; the safe files sit beside it)
    :param config: the run's resolved configuration (empty for a model outside a run)
    :param timesteps: env steps it was trained for
    :param safe: loaded from the safe files (nothing unpickled)
    :param spec: its description (the env's wrappers and frame stack among it); None for a model outside a run
        loaded from pickles
    """

    policy: Any
    stats: NormStats | None
    env_id: str
    env_kwargs: dict[str, Any]
    model_path: Path
    config: dict[str, Any] = field(default_factory=dict)
    timesteps: int = 0
    safe: bool = True
    spec: AgentSpec | None = None

    @property
    def observation_space(self) -> Any:
        return self.policy.observation_space

    @property
    def action_space(self) -> Any:
        return self.policy.action_space

    def normalize(self, obs: np.ndarray) -> np.ndarray:
        """Observations as the policy saw them in training."""
        return obs if self.stats is None else self.stats.normalize(obs)

    def predict(self, obs: np.ndarray, deterministic: bool = True) -> np.ndarray:
        """Actions for one observation or a batch.

        :param obs: raw env observations, ``obs_shape`` or ``(n, *obs_shape)`` (a Dict observation: a dict of them)
        :param deterministic: the most likely action instead of a sample
        """
        obs = obs if isinstance(obs, dict) else np.asarray(obs)
        actions, _ = self.policy.predict(self.normalize(obs), deterministic=deterministic)
        return actions


def has_safe_files(model_path: str | Path) -> bool:
    """Whether a model has its safe files beside it (weights and agent file)."""
    return weights_path(model_path).is_file() and agent_file_path(model_path).is_file()


def _exists(model_path: Path) -> bool:
    return model_path.is_file() or has_safe_files(model_path)


def model_file(model_or_run: str | Path, runs_dir: str | Path = "runs") -> tuple[Path, Path | None]:
    """The model (its ``.zip`` name, whichever of its files exist) and its run directory (None for a bare model
    outside a run).

    :param model_or_run: a run name, a run directory, or a model's ``.zip`` or ``.safetensors``
    :raises FileNotFoundError: when there is no such run or model
    """
    path = Path(model_or_run)
    if path.suffix in (".zip", ".safetensors"):
        path = path.with_suffix(".zip")
        if not _exists(path):
            raise FileNotFoundError(f"model file {str(model_or_run)!r} does not exist")
        for parent in (path.parent, path.parent.parent):
            if (parent / "config.yaml").is_file():
                return path, parent
        return path, None
    try:
        run_dir = resolve_run_dir(model_or_run, runs_dir)
    except ValueError as exc:
        raise FileNotFoundError(str(exc)) from None
    for name in MODEL_CHOICE:
        if _exists(run_dir / name):
            return run_dir / name, run_dir
    latest = RunDir(run_dir).latest_checkpoint()
    if latest is None:
        raise FileNotFoundError(f"run {str(run_dir)!r} has no model yet ({', '.join(MODEL_CHOICE)} or a checkpoint)")
    return latest[1], run_dir


def pickle_refusal(model_path: Path) -> str:
    """The one line that refuses a model which exists only as pickles."""
    stats = vecnormalize_path(model_path)
    pickles = f"{model_path.name} and {stats.name}" if stats.is_file() else model_path.name
    return (
        f"{model_path} has no safe copy ({weights_path(model_path).name} + {agent_file_path(model_path).name}), only "
        f"pickles ({pickles}) that can run any code when loaded; pass {TRUST_PICKLE} to load it if you trust where it "
        "came from"
    )


def load_agent(
    model_or_run: str | Path, runs_dir: str | Path = "runs", device: str = "cpu", trust_pickle: bool = False
) -> Agent:
    """Load a trained agent to act (see the module doc for how it decides between the files).

    :param model_or_run: a run name (under ``runs_dir``), a run directory (its ``best_model.zip``, else
        ``final_model.zip``, else the newest checkpoint) or a model's ``.zip`` (its other files and the run's
        ``config.yaml`` are found next to it)
    :param runs_dir: where run names are looked up
    :param device: torch device for the policy
    :param trust_pickle: load a model that exists only as pickles (this runs any code they name)
    :raises FileNotFoundError: when no such run or model exists
    :raises PickleRefused: for a model with pickles only, without ``trust_pickle``
    :raises ConfigError: for safe files this version cannot read or that do not fit the env
    """
    for attempt in range(READ_ATTEMPTS):
        model_path, run_dir = model_file(model_or_run, runs_dir)
        config = read_yaml(run_dir / "config.yaml") if run_dir is not None else {}
        config = config if isinstance(config, dict) else {}
        try:
            if has_safe_files(model_path):
                agent = _load_safe(model_path, config)
            elif not model_path.is_file():
                raise FileNotFoundError(f"model file {str(model_path)!r} does not exist")
            elif trust_pickle:
                agent = _load_pickled(model_path, config)
            else:
                raise PickleRefused(pickle_refusal(model_path))
            break
        except FileNotFoundError:
            # a run being trained pruned the checkpoint between finding and reading it: find the newest again
            if attempt == READ_ATTEMPTS - 1:
                raise
    agent.policy.to(device)
    agent.policy.set_training_mode(False)
    return agent


def _load_safe(model_path: Path, config: dict[str, Any]) -> Agent:
    """The agent of a model's safe files: the policy rebuilt from the agent file and the env's spaces."""
    source = agent_file_path(model_path)
    card = read_agent_file(source)
    # both files read first: a run being trained may prune this checkpoint while the env is built
    weights = read_weights(weights_path(model_path))
    spec = card.spec
    observation_space, action_space = probe_spaces(spec.env, spec.env_kwargs, spec.env_wrapper, spec.frame_stack)
    policy = rebuild_policy(spec, policy_space(observation_space), action_space)
    load_weights(policy, weights, weights_path(model_path))
    stats = card.stats.shaped(observation_space, str(source)) if card.stats is not None else None
    return Agent(policy, stats, spec.env, dict(spec.env_kwargs), model_path, config, card.timesteps, safe=True, spec=spec)


def _load_pickled(model_path: Path, config: dict[str, Any]) -> Agent:
    """The agent of a model's SB3 zip and ``.pkl`` statistics, unpickled (only when the caller trusts them)."""
    from stable_baselines3 import PPO

    model = PPO.load(model_path, device="cpu", custom_objects=NOT_FOR_ACTING)
    path = vecnormalize_path(model_path)
    stats = None
    if path.is_file():
        with open(path, "rb") as f:
            try:
                stats = NormStats.of(pickle.load(f))
            except ConfigError as exc:
                raise ConfigError(f"{path}: {exc}") from None
    env_id = str(config.get("env", ENV_ID))
    spec = AgentSpec.from_config(config, str(model_path)) if config else None
    return Agent(model.policy, stats, env_id, dict(config.get("env_kwargs") or {}), model_path, config,
                 int(model.num_timesteps), safe=False, spec=spec)  # fmt: skip
