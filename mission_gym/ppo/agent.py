"""A trained agent ready to act: the PPO model of a run with the observation statistics it was trained with; and a
policy to watch or record (:func:`load_policy`): an agent, or a scripted baseline."""

from __future__ import annotations

import difflib
import pickle
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mission_gym import ENV_ID
from mission_gym.config.yaml_io import read_yaml
from mission_gym.rundir.directory import RunDir, resolve_run_dir, vecnormalize_path

MODEL_CHOICE = ("best_model.zip", "final_model.zip")  # a run's model, in order of preference
# What a model loaded to act (not to train on) need not unpickle: its training schedules, which may be objects of
# another version of this package (a run saved before a module moved still loads).
NOT_FOR_ACTING: dict[str, Any] = {
    "learning_rate": 0.0,
    "lr_schedule": lambda _: 0.0,
    "clip_range": lambda _: 0.0,
    "clip_range_vf": None,
}


class Agent:
    """A loaded policy that normalises observations the way its training env did.

    :param model: the SB3 model
    :param obs_normalizer: the run's ``VecNormalize`` (statistics only) or None
    :param env_id: the Gymnasium id it was trained on
    :param env_kwargs: the env's keyword arguments from the run's configuration
    :param model_path: the model file
    :param config: the run's resolved configuration (empty when loaded from a bare model file)
    """

    def __init__(
        self,
        model: Any,
        obs_normalizer: Any,
        env_id: str,
        env_kwargs: dict[str, Any],
        model_path: Path,
        config: dict[str, Any],
    ) -> None:
        self.model = model
        self.obs_normalizer = obs_normalizer
        self.env_id = env_id
        self.env_kwargs = env_kwargs
        self.model_path = model_path
        self.config = config

    @property
    def observation_space(self) -> Any:
        return self.model.observation_space

    @property
    def action_space(self) -> Any:
        return self.model.action_space

    def normalize(self, obs: np.ndarray) -> np.ndarray:
        """Observations as the policy saw them in training."""
        if self.obs_normalizer is None:
            return obs
        return self.obs_normalizer.normalize_obs(obs)

    def predict(self, obs: np.ndarray, deterministic: bool = True) -> np.ndarray:
        """Actions for one observation or a batch.

        :param obs: raw env observations, ``obs_shape`` or ``(n, *obs_shape)``
        :param deterministic: the most likely action instead of a sample
        """
        actions, _ = self.model.predict(self.normalize(np.asarray(obs)), deterministic=deterministic)
        return actions


def model_file(model_or_run: str | Path, runs_dir: str | Path = "runs") -> tuple[Path, Path | None]:
    """The model file and its run directory (None for a bare model outside a run)."""
    path = Path(model_or_run)
    if path.suffix == ".zip":
        if not path.is_file():
            raise FileNotFoundError(f"model file {str(path)!r} does not exist")
        for parent in (path.parent, path.parent.parent):
            if (parent / "config.yaml").is_file():
                return path, parent
        return path, None
    try:
        run_dir = resolve_run_dir(model_or_run, runs_dir)
    except ValueError as exc:
        raise FileNotFoundError(str(exc)) from None
    for name in MODEL_CHOICE:
        if (run_dir / name).is_file():
            return run_dir / name, run_dir
    latest = RunDir(run_dir).latest_checkpoint()
    if latest is None:
        raise FileNotFoundError(f"run {str(run_dir)!r} has no model yet ({', '.join(MODEL_CHOICE)} or a checkpoint)")
    return latest[1], run_dir


def load_agent(model_or_run: str | Path, runs_dir: str | Path = "runs", device: str = "cpu") -> Agent:
    """Load a trained agent.

    :param model_or_run: a run name (under ``runs_dir``), a run directory (its ``best_model.zip``, else
        ``final_model.zip``, else the newest checkpoint) or a model ``.zip`` (its VecNormalize statistics and the
        run's ``config.yaml`` are found next to it)
    :param runs_dir: where run names are looked up
    :param device: torch device for the policy
    :raises FileNotFoundError: when no such run or model exists
    """
    from stable_baselines3 import PPO

    model_path, run_dir = model_file(model_or_run, runs_dir)
    model = PPO.load(model_path, device=device, custom_objects=NOT_FOR_ACTING)
    stats = vecnormalize_path(model_path)
    normalizer = None
    if stats.is_file():
        with open(stats, "rb") as f:
            normalizer = pickle.load(f)
        normalizer.training = False
    config: dict[str, Any] = {}
    if run_dir is not None:
        config = read_yaml(run_dir / "config.yaml") or {}
    env_id = str(config.get("env", "MissionGym-v0"))
    return Agent(model, normalizer, env_id, dict(config.get("env_kwargs") or {}), model_path, config)


#: observation -> action, for one observation
Policy = Callable[[np.ndarray], np.ndarray]


@dataclass
class PolicySource:
    """A policy and the env it acts in.

    :param policy: observation -> action
    :param env_id: Gymnasium id of the env
    :param env_kwargs: keyword arguments for ``gymnasium.make``
    :param label: what to call it in messages
    """

    policy: Policy
    env_id: str
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    label: str = ""

    def make_env(self) -> Any:
        """A fresh ``rgb_array`` env for this policy (a ``gymnasium.Env``)."""
        import gymnasium as gym

        import mission_gym.envs  # noqa: F401  (registers MissionGym-v0)

        return gym.make(self.env_id, render_mode="rgb_array", **self.env_kwargs)


def load_policy(
    source: str | None = None,
    baseline: str | None = None,
    runs_dir: str | Path = "runs",
    seed: int | None = None,
    env_kwargs: dict[str, Any] | None = None,
    device: str = "cpu",
) -> PolicySource:
    """A policy from a model file or run name (``source``) or a scripted baseline (``baseline``).

    :param source: a model ``.zip``, a run directory or a run name under ``runs_dir``
    :param baseline: ``greedy`` or ``random`` (Mission Gym only)
    :param runs_dir: where run names are looked up
    :param seed: seed of the random baseline
    :param env_kwargs: env keyword arguments (for a model, merged over those it was trained with)
    :param device: torch device for a model
    :raises ValueError: for a bad name or combination (the message suggests valid names)
    """
    if (source is None) == (baseline is None):
        raise ValueError("give exactly one of a MODEL/RUN or --policy greedy|random")
    if baseline is not None:
        from mission_gym.baselines import POLICIES as BASELINES
        from mission_gym.baselines import make_policy

        if baseline not in BASELINES:
            close = difflib.get_close_matches(baseline, BASELINES, n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise ValueError(f"unknown policy {baseline!r}; valid: {', '.join(BASELINES)}{hint}")
        from mission_gym.envs import MissionEnv

        kwargs = dict(env_kwargs or {})
        try:
            probe = MissionEnv(**kwargs)
        except OSError as exc:
            raise ValueError(str(exc)) from exc
        batch_policy = make_policy(baseline, probe.config, seed=seed)
        probe.close()
        return PolicySource(lambda obs: batch_policy(obs[None])[0], ENV_ID, kwargs, label=f"{baseline} baseline")
    assert source is not None  # exactly one of the two, checked above
    try:
        agent = load_agent(source, runs_dir=runs_dir, device=device)
    except (FileNotFoundError, KeyError) as exc:
        raise ValueError(str(exc).strip("'\"")) from exc

    def policy(obs: np.ndarray) -> np.ndarray:
        out = agent.predict(obs, deterministic=True)
        return out[0] if isinstance(out, tuple) else out

    return PolicySource(policy, agent.env_id, {**(agent.env_kwargs or {}), **(env_kwargs or {})}, label=str(source))
