"""A policy to watch or record (:func:`load_policy`): a trained agent, or a scripted baseline."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mission_gym import ENV_ID
from mission_gym.agents.loading import load_agent

#: observation -> action, for one observation
Policy = Callable[[np.ndarray], np.ndarray]


@dataclass
class PolicySource:
    """A policy and the env it acts in.

    :param policy: observation -> action
    :param env_id: Gymnasium id of the env
    :param env_kwargs: keyword arguments for ``gymnasium.make``
    :param label: what to call it in messages
    :param env_wrapper: the wrappers the policy was trained inside (:mod:`mission_gym.vec.wrappers`)
    :param frame_stack: the observations it was trained on stacked
    """

    policy: Policy
    env_id: str
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    label: str = ""
    env_wrapper: list[Any] = field(default_factory=list)
    frame_stack: int | None = None

    def make_env(self, render_mode: str = "rgb_array") -> Any:
        """A fresh env for this policy (a ``gymnasium.Env``), inside the wrappers and the frame stack it was trained
        with; its frames are the task's own (a wrapper renders what it wraps)."""
        import gymnasium as gym

        import mission_gym.envs  # noqa: F401  (registers MissionGym-v0)
        from mission_gym.vec.wrappers import FrameStack, ensure_registered, make_kwargs, wrap

        ensure_registered(self.env_id.partition(":")[2] if ":" in self.env_id else self.env_id)
        kwargs = make_kwargs(self.env_id, self.env_kwargs, self.env_wrapper)
        env = wrap(gym.make(self.env_id, render_mode=render_mode, **kwargs), self.env_wrapper)
        return FrameStack(env, self.frame_stack) if self.frame_stack and self.frame_stack > 1 else env


def load_policy(
    source: str | None = None,
    baseline: str | None = None,
    runs_dir: str | Path = "runs",
    seed: int | None = None,
    env_kwargs: dict[str, Any] | None = None,
    device: str = "cpu",
    trust_pickle: bool = False,
) -> PolicySource:
    """A policy from a model file or run name (``source``) or a scripted baseline (``baseline``).

    :param source: a model ``.zip``, a run directory or a run name under ``runs_dir``
    :param baseline: ``greedy`` or ``random`` (Mission Gym only)
    :param runs_dir: where run names are looked up
    :param seed: seed of the random baseline
    :param env_kwargs: env keyword arguments (for a model, merged over those it was trained with)
    :param device: torch device for a model
    :param trust_pickle: load a model that exists only as pickles (:func:`~mission_gym.agents.loading.load_agent`)
    :raises ValueError: for a bad name or combination (the message suggests valid names), or a model with pickles
        only (:class:`~mission_gym.agents.loading.PickleRefused`) without ``trust_pickle``
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
        agent = load_agent(source, runs_dir=runs_dir, device=device, trust_pickle=trust_pickle)
    except (FileNotFoundError, KeyError) as exc:
        raise ValueError(str(exc).strip("'\"")) from exc

    def policy(obs: np.ndarray) -> np.ndarray:
        out = agent.predict(obs, deterministic=True)
        return out[0] if isinstance(out, tuple) else out

    wrappers, stack = (list(agent.spec.env_wrapper), agent.spec.frame_stack) if agent.spec is not None else ([], None)
    kwargs = {**(agent.env_kwargs or {}), **(env_kwargs or {})}
    return PolicySource(policy, agent.env_id, kwargs, label=str(source), env_wrapper=wrappers, frame_stack=stack)
