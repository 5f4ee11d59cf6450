"""The training envs of a batch's members stepped together (the batched learner's fast path).

Each member of a population has its own training env: ``MissionVecEnv`` under a ``VecMonitor`` and usually a
``VecNormalize``. Stepped member by member, a batch of 32 members spends most of a rollout step in Python around
32 small compiled calls. :class:`MemberEnvs` steps the games of every member whose game is the same (a recipe's
curriculum moves its members' settings together) as one ``MissionCore`` (one compiled call on every core), and
computes each member's ``VecMonitor`` and ``VecNormalize`` arithmetic for all members at once, with each member's
own statistics. The members' wrapper objects stay the truth between rollouts: their statistics are read at the
start of each rollout and written back at its end, so checkpoints, evaluations and a member that leaves the batch see
what its own wrappers would hold. Env ``i`` of a member keeps its own random stream, so it plays the games it would
play alone.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

import numba
import numpy as np
from stable_baselines3.common.vec_env import VecMonitor, VecNormalize

from mission_gym.envs.vec_env import MissionVecEnv
from mission_gym.sim import MissionCore
from mission_gym.sim.core import STATE_ARRAYS


def _chain(env: Any) -> tuple[VecNormalize | None, VecMonitor, MissionVecEnv] | None:
    """``(VecNormalize or None, VecMonitor, MissionVecEnv)`` when ``env`` is exactly that stack, else None."""
    norm = env if isinstance(env, VecNormalize) else None
    inner = env.venv if norm is not None else env
    if type(inner) is not VecMonitor or inner.info_keywords or inner.results_writer is not None:
        return None
    base = inner.venv
    if type(base) is not MissionVecEnv:
        return None
    if norm is not None and isinstance(norm.obs_rms, dict):  # dict observations: not Mission Gym's
        return None
    return norm, inner, base


def covered(envs: Sequence[Any]) -> bool:
    """Whether every env is Mission Gym's ``MissionVecEnv`` under a ``VecMonitor`` (and a ``VecNormalize``, for all
    or none), which :class:`MemberEnvs` steps together."""
    chains = [_chain(env) for env in envs]
    if any(c is None for c in chains):
        return False
    kinds = {
        (c[0] is not None, c[0] is not None and c[0].norm_obs, c[0] is not None and c[0].norm_reward) for c in chains if c
    }
    return len(kinds) == 1


class SparseInfos(Sequence[dict[str, Any]]):
    """A member's ``infos`` of one step: an empty dict for every env but those whose episode ended."""

    def __init__(self, n: int, ended: dict[int, dict[str, Any]]) -> None:
        self.n, self.ended = n, ended

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(self.n))]
        if i < 0:
            i += self.n
        if not 0 <= i < self.n:
            raise IndexError(i)
        return self.ended.get(i, {})

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self.ended.get(i, {}) for i in range(self.n))


class _Games:
    """One member's games in a group's core: each state array a view of its rows (what a reset hook writes to)."""

    def __init__(self, core: MissionCore, start: int, n: int) -> None:
        self._core, self._rows = core, slice(start, start + n)

    def __getattr__(self, name: str) -> Any:
        if name not in STATE_ARRAYS:
            raise AttributeError(name)
        return getattr(self._core, name)[self._rows]


class _SharedCore:
    """What a member's ``MissionVecEnv.core`` becomes while it trains in the batch: its slice of a group's core
    (the curriculum sets the game through it)."""

    def __init__(self, owner: MemberEnvs, member: int) -> None:
        self._owner, self._member = owner, member
        self.config = owner.cores[owner.group_of[member]].config
        self.n_envs = owner.n_envs

    def set_config(self, config: Any) -> None:
        self.config = config  # applied to the member's group at the next rollout start (MemberEnvs.regroup)

    def location(self) -> tuple[MissionCore, int]:
        """The core holding this member's games and where they start in it."""
        return self._index(0)

    def _index(self, i: int) -> tuple[MissionCore, int]:
        g = self._owner.group_of[self._member]
        return self._owner.cores[g], self._owner.slot[self._member] * self._owner.n_envs + i

    def outcome(self, i: int) -> str | None:
        core, j = self._index(i)
        return core.outcome(j)

    def episode_metrics(self, i: int) -> dict[str, Any]:
        core, j = self._index(i)
        return core.episode_metrics(j)

    def defender_modes(self, i: int) -> list[str]:
        core, j = self._index(i)
        return core.defender_modes(j)

    def situation_codes(self) -> np.ndarray:
        core, start = self._index(0)
        return core.situation_codes()[start : start + self.n_envs]

    def snapshot(self, i: int) -> dict[str, Any]:
        core, j = self._index(i)
        return core.snapshot(j)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._owner.cores[self._owner.group_of[self._member]], name)


class MemberEnvs:
    """The members' training envs (each covered by :func:`covered`) stepped as one: see the module doc.

    :param envs: each member's training env (``model.env``), all with ``n_envs`` games
    :param threads: CPU threads each group's step uses
    """

    def __init__(self, envs: Sequence[Any], threads: int) -> None:
        chains = [_chain(env) for env in envs]
        assert all(c is not None for c in chains), "MemberEnvs covers MissionVecEnv under VecMonitor (and VecNormalize)"
        self.norms = [c[0] for c in chains if c]
        self.monitors = [c[1] for c in chains if c]
        self.bases = [c[2] for c in chains if c]
        self.m = len(self.bases)
        self.n_envs = self.bases[0].num_envs
        self.threads = threads
        first = self.norms[0]
        self.normalize = first is not None
        self.norm_obs = bool(first is not None and first.norm_obs)
        self.norm_reward = bool(first is not None and first.norm_reward)
        self.cores: list[MissionCore] = []
        self.group_of = [0] * self.m  # member -> group
        self.slot = [0] * self.m  # member -> its place in its group's core
        self.members_of: list[list[int]] = []
        # each member's games: its own core, or its slice of an earlier batch's group core
        sources = [base.core.location() if isinstance(base.core, _SharedCore) else (base.core, 0) for base in self.bases]
        self._regroup([base.core.config for base in self.bases], sources)
        for i, base in enumerate(self.bases):
            base.core = _SharedCore(self, i)  # type: ignore[assignment]
        self.obs = np.zeros((self.m, self.n_envs, self.cores[0].obs.shape[1]), dtype=np.float32)
        self.live = np.ones(self.m, dtype=bool)

    # --- grouping ---------------------------------------------------------------------------------------------
    @staticmethod
    def _partition(configs: list[Any]) -> tuple[list[Any], list[list[int]]]:
        """The distinct configs and the members that play each (in member order)."""
        keys: list[Any] = []
        groups: list[list[int]] = []
        for i, config in enumerate(configs):
            for g, key in enumerate(keys):
                if key is config or key == config:
                    groups[g].append(i)
                    break
            else:
                keys.append(config)
                groups.append([i])
        return keys, groups

    def _regroup(self, configs: list[Any], sources: list[tuple[MissionCore, int]] | None) -> None:
        """One core per distinct config, each member's games copied into its slice (their state and streams) from
        its own core (``sources``) or the group it was in."""
        keys, groups = self._partition(configs)
        n = self.n_envs
        cores: list[MissionCore] = []
        group_of, slot = [0] * self.m, [0] * self.m
        for config, members in zip(keys, groups):
            core = MissionCore(config, n_envs=n * len(members), threads=self.threads)
            for k, i in enumerate(members):
                src, j = sources[i] if sources is not None else (self.cores[self.group_of[i]], self.slot[i] * n)
                for name in STATE_ARRAYS:
                    getattr(core, name)[k * n : (k + 1) * n] = getattr(src, name)[j : j + n]
                group_of[i], slot[i] = len(cores), k
            cores.append(core)
        self.cores, self.group_of, self.slot, self.members_of = cores, group_of, slot, groups

    def regroup(self) -> None:
        """Put members whose curriculum set their games apart (or together) in cores of their own; call at each
        rollout start, after the members' callbacks."""
        configs = [base.core.config for base in self.bases]
        keys, groups = self._partition(configs)
        if groups != self.members_of:
            self._regroup(configs, None)
            return
        for core, key in zip(self.cores, keys):  # the same groups: their games go on under their new settings
            if core.config is not key:
                core.set_config(key)

    # --- the wrappers' statistics --------------------------------------------------------------------------------
    def start_rollout(self, last_obs: Sequence[np.ndarray]) -> None:
        """Read each member's wrapper state (episode counters, normalisation statistics) and its last observations."""
        self.regroup()
        self.ep_returns = np.stack([mon.episode_returns for mon in self.monitors]).astype(np.float32)
        self.ep_lengths = np.stack([mon.episode_lengths for mon in self.monitors])
        self.ep_counts = [mon.episode_count for mon in self.monitors]
        self.obs[:] = np.stack(last_obs)
        if self.normalize:
            norms: list[Any] = [n for n in self.norms if n is not None]
            self.obs_mean = np.stack([n.obs_rms.mean for n in norms])
            self.obs_var = np.stack([n.obs_rms.var for n in norms])
            self.obs_count = np.array([n.obs_rms.count for n in norms], dtype=np.float64)
            self.ret_mean = np.array([n.ret_rms.mean for n in norms], dtype=np.float64)
            self.ret_var = np.array([n.ret_rms.var for n in norms], dtype=np.float64)
            self.ret_count = np.array([n.ret_rms.count for n in norms], dtype=np.float64)
            self.returns = np.stack([n.returns for n in norms])
            self.gamma = np.array([n.gamma for n in norms], dtype=np.float64)
            self.epsilon = np.array([n.epsilon for n in norms], dtype=np.float64)
            self.clip_obs = np.array([n.clip_obs for n in norms], dtype=np.float64)
            self.clip_reward = np.array([n.clip_reward for n in norms], dtype=np.float64)
            self.training = np.array([n.training for n in norms])
        self.live[:] = True

    def end_rollout(self) -> None:
        """Write each member's wrapper state back (so its saves and evaluations see it)."""
        for i, mon in enumerate(self.monitors):
            mon.episode_returns = self.ep_returns[i].copy()
            mon.episode_lengths = self.ep_lengths[i].copy()
            mon.episode_count = self.ep_counts[i]
        if self.normalize:
            for i, norm in enumerate(self.norms):
                assert norm is not None
                obs_rms: Any = norm.obs_rms
                obs_rms.mean, obs_rms.var = self.obs_mean[i].copy(), self.obs_var[i].copy()
                obs_rms.count = float(self.obs_count[i])
                norm.ret_rms.mean, norm.ret_rms.var = np.array(self.ret_mean[i]), np.array(self.ret_var[i])
                norm.ret_rms.count = float(self.ret_count[i])
                norm.returns = self.returns[i].copy()

    def leave(self, i: int) -> None:
        """Member ``i`` stopped: its statistics no longer change (its games may step on; nothing reads them)."""
        self.live[i] = False

    # --- a step ---------------------------------------------------------------------------------------------------
    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[SparseInfos]]:
        """Step every member's games with ``actions`` ``(M, n_envs, attackers)``: each member's ``(obs, rewards,
        dones, infos)`` as its ``VecNormalize(VecMonitor(MissionVecEnv))`` would return them, stacked."""
        n, m = self.n_envs, self.m
        raw_obs = np.empty((m, n, self.obs.shape[2]), dtype=np.float32)
        rewards = np.empty((m, n), dtype=np.float32)
        dones = np.empty((m, n), dtype=bool)
        ended: list[dict[int, dict[str, Any]]] = [{} for _ in range(m)]
        for core, members in zip(self.cores, self.members_of):
            acts = np.concatenate([actions[i] for i in members]).reshape(len(members) * n, -1)
            obs, rew, terminated, truncated = core.step(acts)
            done = terminated | truncated
            done_ids = np.flatnonzero(done)
            for j in done_ids:  # only the games that just ended
                k, e = divmod(int(j), n)
                ended[members[k]][e] = {
                    "outcome": core.outcome(int(j)),
                    "episode_metrics": core.episode_metrics(int(j)),
                    "terminal_observation": obs[j].copy(),
                    "TimeLimit.truncated": bool(truncated[j] and not terminated[j]),
                }
            for k, i in enumerate(members):
                rewards[i] = rew[k * n : (k + 1) * n]
                dones[i] = done[k * n : (k + 1) * n]
            if done_ids.size:
                core.reset(done_ids)  # a game that ended starts anew: its observation is the new game's first
                self._reset_hooks(core, members, done_ids)
            for k, i in enumerate(members):
                raw_obs[i] = obs[k * n : (k + 1) * n]
        self._monitor(rewards, dones, ended)
        for i, norm in enumerate(self.norms):  # what VecNormalize keeps of the step (get_original_obs)
            if norm is not None:
                norm.old_obs, norm.old_reward = raw_obs[i], rewards[i]
        out_obs, out_rewards = self._normalize(raw_obs, rewards, dones, ended)
        infos = [SparseInfos(n, e) for e in ended]
        self.obs[:] = out_obs
        return out_obs, out_rewards, dones, infos

    def _reset_hooks(self, core: MissionCore, members: list[int], done_ids: np.ndarray) -> None:
        """Each member's env's reset hook (restarts from saved states) on its games just started anew, as its own
        ``MissionVecEnv`` would call it."""
        n = self.n_envs
        for k, i in enumerate(members):
            hook = self.bases[i].reset_hook
            if hook is None:
                continue
            mine = done_ids[(done_ids >= k * n) & (done_ids < (k + 1) * n)] - k * n
            if mine.size:
                hook(mine, _Games(core, k * n, n))

    def _monitor(self, rewards: np.ndarray, dones: np.ndarray, ended: list[dict[int, dict[str, Any]]]) -> None:
        """VecMonitor's episode returns and lengths, for every member."""
        live = self.live[:, None]
        self.ep_returns += np.where(live, rewards, 0)
        self.ep_lengths += live
        now = time.time()
        for i in np.flatnonzero(self.live & dones.any(axis=1)):
            mon = self.monitors[i]
            for e in np.flatnonzero(dones[i]):
                info = ended[i][int(e)]
                info["episode"] = {
                    "r": self.ep_returns[i, e],
                    "l": self.ep_lengths[i, e],
                    "t": round(now - mon.t_start, 6),
                }
                self.ep_counts[i] += 1
                self.ep_returns[i, e] = 0
                self.ep_lengths[i, e] = 0

    def _normalize(
        self, obs: np.ndarray, rewards: np.ndarray, dones: np.ndarray, ended: list[dict[int, dict[str, Any]]]
    ) -> tuple[np.ndarray, np.ndarray]:
        """VecNormalize's step for every member: statistics updated (live, training members), observations and
        rewards normalised, terminal observations too."""
        if not self.normalize:
            return obs, rewards
        update = self.live & self.training
        if self.norm_obs:
            out_obs = np.empty_like(obs)
            normalize_stacked(obs, self.obs_mean, self.obs_var, self.obs_count, update, self.epsilon, self.clip_obs, out_obs)
            scale = np.sqrt(self.obs_var + self.epsilon[:, None])[:, None, :]
            for i, infos in enumerate(ended):
                for info in infos.values():
                    term = info["terminal_observation"]
                    info["terminal_observation"] = np.clip(
                        (term - self.obs_mean[i]) / scale[i, 0], -self.clip_obs[i], self.clip_obs[i]
                    ).astype(np.float32)
        else:
            out_obs = obs
        # VecNormalize keeps the discounted returns' statistics while training, normalised rewards or not
        returns = np.where(update[:, None], self.returns * self.gamma[:, None] + rewards, self.returns)
        self.returns = returns
        r_mean, r_var = returns.mean(axis=1), returns.var(axis=1)
        self.ret_mean, self.ret_var, self.ret_count = _moments(
            self.ret_mean, self.ret_var, self.ret_count, r_mean, r_var, returns.shape[1], update
        )
        if self.norm_reward:
            clip_r = self.clip_reward[:, None]
            out_rewards = np.clip(rewards / np.sqrt(self.ret_var + self.epsilon)[:, None], -clip_r, clip_r).astype(np.float32)
        else:
            out_rewards = rewards.astype(np.float32)
        self.returns[dones & self.live[:, None]] = 0
        return out_obs, out_rewards


@numba.njit(cache=True)
def normalize_stacked(
    obs: np.ndarray,
    mean: np.ndarray,
    var: np.ndarray,
    count: np.ndarray,
    update: np.ndarray,
    epsilon: np.ndarray,
    clip: np.ndarray,
    out: np.ndarray,
) -> None:
    """``VecNormalize``'s observation step for every member at once, compiled (0.5 ms for 16 members of 128 envs on
    one AMD EPYC Zen 4 core, against 3.2 ms for the same arithmetic in NumPy; threads only cost it): each updating
    member's statistics (``mean``, ``var``, ``count``, in place) moved by its batch ``obs[i]`` as
    ``RunningMeanStd.update`` moves them, then ``out`` the observations normalised and clipped as ``normalize_obs``
    does. The batch moments are summed in float32 env after env and the rest in float64, NumPy's order for
    ``VecNormalize``'s arrays, so each member's figures are its own wrapper's to the bit (``tests/test_batched.py``)."""
    for i in range(obs.shape[0]):
        if update[i]:
            _update_moments(obs[i], mean[i], var[i], count, i)
    _normalize_obs(obs, mean, var, epsilon, clip, out)


@numba.njit(cache=True)
def _update_moments(obs: np.ndarray, mean: np.ndarray, var: np.ndarray, count: np.ndarray, i: int) -> None:
    """``RunningMeanStd.update`` of one member's statistics by its batch ``obs`` ``(envs, features)``."""
    n, d = obs.shape
    nf = np.float32(n)
    total = np.zeros(d, dtype=np.float32)
    for e in range(n):
        for f in range(d):
            total[f] += obs[e, f]
    b_mean = total / nf
    squares = np.zeros(d, dtype=np.float32)
    for e in range(n):
        for f in range(d):
            x = obs[e, f] - b_mean[f]
            squares[f] += x * x
    c = count[i]
    t = c + n
    for f in range(d):
        delta = np.float64(b_mean[f]) - mean[f]
        m_2 = var[f] * c + np.float64((squares[f] / nf) * nf) + delta * delta * c * n / t
        mean[f] = mean[f] + delta * n / t
        var[f] = m_2 / t
    count[i] = t


@numba.njit(cache=True)
def _normalize_obs(
    obs: np.ndarray, mean: np.ndarray, var: np.ndarray, epsilon: np.ndarray, clip: np.ndarray, out: np.ndarray
) -> None:
    """Every member's observations normalised by its statistics and clipped, as float32 (``normalize_obs``)."""
    m, n, d = obs.shape
    for i in range(m):
        scale = np.sqrt(var[i] + epsilon[i])
        for e in range(n):
            for f in range(d):
                x = (np.float64(obs[i, e, f]) - mean[i, f]) / scale[f]
                out[i, e, f] = np.float32(min(max(x, -clip[i]), clip[i]))


def _moments(
    mean: np.ndarray,
    var: np.ndarray,
    count: np.ndarray,
    b_mean: np.ndarray,
    b_var: np.ndarray,
    b_count: int,
    update: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``RunningMeanStd.update_from_moments`` for every member (``update``: which members' statistics move)."""
    extra = (1,) * (np.ndim(mean) - 1)
    delta = b_mean - mean
    tot = count + b_count
    c = count.reshape(-1, *extra)
    t = tot.reshape(-1, *extra)
    new_mean = mean + delta * b_count / t
    m_2 = var * c + b_var * b_count + np.square(delta) * c * b_count / t
    new_var = m_2 / t
    keep = update.reshape(-1, *extra)
    return np.where(keep, new_mean, mean), np.where(keep, new_var, var), np.where(update, tot, count)
