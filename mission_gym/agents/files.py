"""An agent's files that hold no code: beside every model ``X.zip``, the policy's weights as safetensors
(``X.safetensors``) and a JSON agent file (``X.agent.json``) with what the weights need to act: the env, the policy's
description (:class:`~mission_gym.agents.spec.AgentSpec`) and the observation statistics (:class:`NormStats`).

SB3's zip stores a model's spaces, policy class and schedules as cloudpickle and VecNormalize's statistics are a
pickle: unpickling runs whatever code the file names. Reading these two files runs none: safetensors holds a JSON
header and raw tensor bytes, and the agent file is plain data checked field by field. The zip and the ``.pkl`` stay
beside them, for ``PPO.load`` users and for resuming a run.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from mission_gym.agents.spec import SPEC_FIELDS, AgentSpec
from mission_gym.config.yaml_io import ConfigError, validate
from mission_gym.rundir.directory import agent_file_path, weights_path

#: the agent file's ``format`` (its ``version`` changes when a reader of the old one could misread the new)
FORMAT = "mission_gym.agent"
VERSION = 1


def normalized(obs: np.ndarray, mean: np.ndarray, var: np.ndarray, epsilon: float, clip: float) -> np.ndarray:
    """Observations normalised as SB3's ``VecNormalize.normalize_obs`` does it (float32 out)."""
    return np.clip((obs - mean) / np.sqrt(var + epsilon), -clip, clip).astype(np.float32)


@dataclass(frozen=True)
class NormStats:
    """A ``VecNormalize``'s settings and running statistics as plain data (named as its attributes are).

    :param norm_obs: observations are normalised
    :param norm_reward: rewards are (training only: acting never sees a reward)
    :param clip_obs: normalised observations are clipped to ``±clip_obs``
    :param clip_reward: the same for rewards
    :param epsilon: added to the variance
    :param gamma: the discount of the reward statistics
    :param obs_mean: observation mean, the observation's shape (a Dict observation: per normalised key)
    :param obs_var: observation variance (the same)
    :param obs_count: observations counted (the same)
    :param ret_mean: discounted return mean
    :param ret_var: its variance
    :param ret_count: returns counted
    :param norm_obs_keys: the keys of a Dict observation that are normalised (None: a Box observation)
    """

    norm_obs: bool
    norm_reward: bool
    clip_obs: float
    clip_reward: float
    epsilon: float
    gamma: float
    obs_mean: Any
    obs_var: Any
    obs_count: Any
    ret_mean: float
    ret_var: float
    ret_count: float
    norm_obs_keys: tuple[str, ...] | None = None

    @classmethod
    def of(cls, vecnorm: Any) -> NormStats:
        """The statistics of a ``VecNormalize`` (of observations in a ``Box``, or of a Dict's keys).

        :raises ConfigError: for anything else (an unpickled file may hold any object)
        """
        from stable_baselines3.common.running_mean_std import RunningMeanStd
        from stable_baselines3.common.vec_env import VecNormalize

        if not isinstance(vecnorm, VecNormalize):
            raise ConfigError(f"expected VecNormalize statistics, got a {type(vecnorm).__name__}")
        obs, ret = vecnorm.obs_rms, vecnorm.ret_rms
        settings = (bool(vecnorm.norm_obs), bool(vecnorm.norm_reward), float(vecnorm.clip_obs), float(vecnorm.clip_reward),
                    float(vecnorm.epsilon), float(vecnorm.gamma))  # fmt: skip
        returns = (float(ret.mean), float(ret.var), float(ret.count))
        if isinstance(obs, dict) and all(isinstance(v, RunningMeanStd) for v in obs.values()):
            keys = tuple(vecnorm.norm_obs_keys or obs)
            mean = {k: np.asarray(obs[k].mean, dtype=np.float64) for k in keys}
            var = {k: np.asarray(obs[k].var, dtype=np.float64) for k in keys}
            return cls(*settings, mean, var, {k: float(obs[k].count) for k in keys}, *returns, norm_obs_keys=keys)
        if not isinstance(obs, RunningMeanStd):
            raise ConfigError(f"expected VecNormalize statistics of a Box or Dict observation, got {type(obs).__name__}")
        mean, var = np.asarray(obs.mean, dtype=np.float64), np.asarray(obs.var, dtype=np.float64)
        return cls(*settings, mean, var, float(obs.count), *returns)

    def normalize(self, obs: Any) -> Any:
        """Observations as the policy saw them in training (a Dict's normalised keys; its others as they are)."""
        if not self.norm_obs:
            return obs
        if self.norm_obs_keys is not None:
            out = dict(obs)
            for k in self.norm_obs_keys:
                out[k] = normalized(np.asarray(obs[k]), self.obs_mean[k], self.obs_var[k], self.epsilon, self.clip_obs)
            return out
        return normalized(obs, self.obs_mean, self.obs_var, self.epsilon, self.clip_obs)

    def to_dict(self) -> dict[str, Any]:
        def running(mean: np.ndarray, var: np.ndarray, count: float) -> dict[str, Any]:
            return {"mean": mean.ravel().tolist(), "var": var.ravel().tolist(), "count": count}

        if self.norm_obs_keys is not None:
            obs_rms: dict[str, Any] = {
                k: running(self.obs_mean[k], self.obs_var[k], self.obs_count[k]) for k in self.norm_obs_keys
            }
        else:
            obs_rms = running(self.obs_mean, self.obs_var, self.obs_count)
        return {
            "norm_obs": self.norm_obs, "norm_reward": self.norm_reward, "clip_obs": self.clip_obs,
            "clip_reward": self.clip_reward, "epsilon": self.epsilon, "gamma": self.gamma, "obs_rms": obs_rms,
            "ret_rms": {"mean": self.ret_mean, "var": self.ret_var, "count": self.ret_count},
            **({"norm_obs_keys": list(self.norm_obs_keys)} if self.norm_obs_keys is not None else {}),
        }  # fmt: skip

    def shaped(self, space: Any, source: str) -> NormStats:
        """These statistics with the shapes of the observation space ``space`` (the file holds them flat).

        :raises ConfigError: when they do not fit it
        """
        from gymnasium import spaces

        def one(mean: np.ndarray, var: np.ndarray, shape: tuple[int, ...], what: str) -> tuple[np.ndarray, np.ndarray]:
            size = int(np.prod(shape))
            if mean.size != size or var.size != size:
                raise ConfigError(f"{source}: observation statistics of {mean.size} values do not fit the env's {what}{shape}")
            return mean.reshape(shape), var.reshape(shape)

        if self.norm_obs_keys is None:
            mean, var = one(self.obs_mean, self.obs_var, tuple(space.shape or ()), "")
            return replace(self, obs_mean=mean, obs_var=var)
        if not isinstance(space, spaces.Dict) or any(k not in space.spaces for k in self.norm_obs_keys):
            raise ConfigError(f"{source}: statistics of the keys {list(self.norm_obs_keys)} do not fit the env's {space}")
        pairs = {k: one(self.obs_mean[k], self.obs_var[k], tuple(space[k].shape or ()), f"{k!r} ") for k in self.norm_obs_keys}
        return replace(self, obs_mean={k: p[0] for k, p in pairs.items()}, obs_var={k: p[1] for k, p in pairs.items()})


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Running(_Strict):
    mean: list[float] | float
    var: list[float] | float
    count: float = Field(ge=0)


class _Normalize(_Strict):
    norm_obs: bool
    norm_reward: bool
    clip_obs: float = Field(gt=0)
    clip_reward: float = Field(gt=0)
    epsilon: float = Field(gt=0)
    gamma: float
    obs_rms: _Running | dict[str, _Running]
    ret_rms: _Running
    norm_obs_keys: list[str] | None = None


class _AgentFile(_Strict):
    """The agent file's fields (the spec's are checked by :meth:`AgentSpec.from_config`)."""

    format: Literal["mission_gym.agent"]
    version: Literal[1]
    timesteps: int = Field(ge=0)
    normalize: _Normalize | None
    env: Any
    env_kwargs: Any
    policy: Any
    network_arch: Any
    activation: Any
    ortho_init: Any
    hyperparams: Any
    env_wrapper: Any = None
    frame_stack: Any = None


@dataclass(frozen=True)
class AgentFile:
    """What an agent file says: the agent's spec, its observation statistics (None: raw observations) and the env
    steps it was trained for."""

    spec: AgentSpec
    stats: NormStats | None
    timesteps: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "timesteps": self.timesteps,
            **self.spec.to_dict(),
            "normalize": None if self.stats is None else self.stats.to_dict(),
        }


def read_agent_file(path: str | Path) -> AgentFile:
    """Read an agent file (plain JSON, every field checked).

    :raises ConfigError: naming the file and the field, for a file this version cannot read
    :raises FileNotFoundError: when it is not there
    """
    source = str(path)
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise  # gone since it was found (a pruned checkpoint): the caller looks again
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"{source}: not a readable agent file: {exc}") from None
    if not isinstance(data, Mapping) or data.get("format") != FORMAT:
        raise ConfigError(f"{source}: not a Mission Gym agent file (expected format {FORMAT!r})")
    if data.get("version") != VERSION:
        raise ConfigError(f"{source}: agent file version {data.get('version')!r}; this Mission Gym reads version {VERSION}")
    checked = validate(_AgentFile, data, source)
    spec = AgentSpec.from_config({k: data[k] for k in (*SPEC_FIELDS, "hyperparams") if k in data}, source)
    stats = None
    if checked.normalize is not None:
        n = checked.normalize
        settings = (n.norm_obs, n.norm_reward, n.clip_obs, n.clip_reward, n.epsilon, n.gamma)
        returns = (float(np.asarray(n.ret_rms.mean)), float(np.asarray(n.ret_rms.var)), n.ret_rms.count)
        if isinstance(n.obs_rms, dict):
            keys = tuple(n.norm_obs_keys or n.obs_rms)
            if set(keys) != set(n.obs_rms):
                raise ConfigError(
                    f"{source}: normalize.norm_obs_keys {list(keys)} are not the keys of obs_rms {list(n.obs_rms)}"
                )
            rms = n.obs_rms
            mean = {k: np.asarray(rms[k].mean, dtype=np.float64) for k in keys}
            var = {k: np.asarray(rms[k].var, dtype=np.float64) for k in keys}
            stats = NormStats(*settings, mean, var, {k: rms[k].count for k in keys}, *returns, norm_obs_keys=keys)
        else:
            box_mean, box_var = np.asarray(n.obs_rms.mean, dtype=np.float64), np.asarray(n.obs_rms.var, dtype=np.float64)
            stats = NormStats(*settings, box_mean, box_var, n.obs_rms.count, *returns)
    return AgentFile(spec, stats, checked.timesteps)


def _unique_tensors(state: Mapping[str, Any]) -> dict[str, Any]:
    """Each tensor of a state dict once, under its first name: a features extractor that the actor and the critic
    share (``policy: trunk``) is in it under three names, and safetensors stores no memory twice."""
    seen: set[tuple[Any, ...]] = set()
    out = {}
    for name, tensor in state.items():
        key = (tensor.data_ptr(), tensor.dtype, tuple(tensor.shape), tuple(tensor.stride()))
        if tensor.numel() and key in seen:
            continue
        seen.add(key)
        out[name] = tensor
    return out


def weights_bytes(policy: Any) -> bytes:
    """A policy's weights as a safetensors file."""
    from safetensors.torch import save

    tensors = {name: t.detach().cpu().contiguous() for name, t in _unique_tensors(policy.state_dict()).items()}
    return save(tensors, metadata={"format": "pt"})


def read_weights(path: str | Path) -> dict[str, Any]:
    """The tensors of a safetensors file, on the CPU (no pickle is read).

    :raises ConfigError: when the file is not safetensors
    :raises FileNotFoundError: when it is not there
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(path), device="cpu")
    except FileNotFoundError:
        raise  # gone since it was found (a pruned checkpoint): the caller looks again
    except (OSError, SafetensorError) as exc:
        raise ConfigError(f"{path}: not a readable safetensors file: {exc}") from None


def load_weights(policy: Any, weights: dict[str, Any], path: str | Path) -> None:
    """Load a safetensors file's weights (:func:`read_weights`) into a policy built for them.

    :raises ConfigError: when its tensors do not fit the policy
    """
    expected = set(_unique_tensors(policy.state_dict()))
    if set(weights) != expected:
        missing, extra = sorted(expected - set(weights)), sorted(set(weights) - expected)
        raise ConfigError(
            f"{path}: its tensors do not fit the policy its agent file describes (missing {missing[:3]}, "
            f"unexpected {extra[:3]})"
        )
    try:
        policy.load_state_dict(weights, strict=False)  # the names left out are the shared tensors' other names
    except RuntimeError as exc:
        detail = " ".join(str(exc).split())
        raise ConfigError(f"{path}: its tensors do not fit the policy its agent file describes: {detail}") from None


def agent_files(
    model_path: str | Path, policy: Any, stats: NormStats | None, spec: AgentSpec, timesteps: int
) -> list[tuple[Path, Callable[[IO[Any]], None]]]:
    """The safe files of a model, as ``(path, write(binary file))`` pairs for
    :func:`~mission_gym.rundir.files.atomic_save_all` (written in the same group as the model's zip)."""
    card = AgentFile(spec, stats, int(timesteps)).to_dict()
    text = (json.dumps(card, indent=1) + "\n").encode()
    weights = weights_bytes(policy)
    return [(weights_path(model_path), lambda f: f.write(weights)), (agent_file_path(model_path), lambda f: f.write(text))]
