"""The Gymnasium and SB3 contracts of ``MissionEnv`` and ``MissionVecEnv``, seeding, and the equivalence
of a vector env with single envs given the same seeds. Rendering is tested in ``test_rendering.py``."""

from __future__ import annotations

import os
import subprocess
import sys

import gymnasium
import numba
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env
from stable_baselines3.common.vec_env import VecMonitor

from mission_gym.baselines import make_policy
from mission_gym.config import REWARD_TERMS
from mission_gym.envs import ENV_ID, MissionEnv, MissionVecEnv

SHORT = {"world": {"physics": {"episode_seconds": 2.5}}}  # episodes of 10 steps (timeout)
NO_RANDOM = {
    "objective_jitter": 0.0,
    "attacker_spawn_jitter": 0.0,
    "defender_spawn_jitter": 0.0,
    "waypoint_jitter": 0.0,
}
# one attacker on the objective, nobody to stop it, and a 1 s capture: won (terminated) at step 4
QUICK_WIN = {
    "scenario": {"attackers": [{"type": "UGV_A", "x": 100, "y": 100}], "defenders": [], "randomization": NO_RANDOM},
    "engagement": {"capture": {"time_to_capture": 1.0}},
}


def mixed_actions(greedy, obs: np.ndarray, rng: np.random.Generator, p_random: float = 0.2) -> np.ndarray:
    """The greedy policy's actions with some replaced by random ones from ``rng``."""
    actions = greedy(obs)
    explore = rng.random(actions.shape) < p_random
    return np.where(explore, rng.integers(0, 11, size=actions.shape), actions)


# --- MissionEnv ------------------------------------------------------------------------------------------------
def test_gymnasium_check_env(recwarn):
    gym_check_env(MissionEnv(), skip_render_check=True)
    assert not [w for w in recwarn if issubclass(w.category, UserWarning)], [str(w.message) for w in recwarn]


def test_sb3_check_env(recwarn):
    sb3_check_env(MissionEnv(), warn=True, skip_render_check=True)
    assert not [w for w in recwarn if issubclass(w.category, UserWarning)], [str(w.message) for w in recwarn]


def test_gymnasium_make():
    env = gymnasium.make(ENV_ID)
    assert isinstance(env.unwrapped, MissionEnv)
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs) and info == {}
    obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
    assert env.observation_space.contains(obs)
    assert isinstance(reward, float) and isinstance(terminated, bool) and isinstance(truncated, bool)
    assert set(info) == {"reward_terms", "outcome"} and info["outcome"] is None
    env.close()
    env = gymnasium.make(ENV_ID, reward={"win_bonus": 1.0}, world={"physics": {"episode_seconds": 60.0}})
    assert env.unwrapped.config.reward.win_bonus == 1.0 and env.unwrapped.core.max_steps == 240


def test_spaces():
    env = MissionEnv()
    assert env.action_space == gymnasium.spaces.MultiDiscrete([11] * 4)
    assert env.observation_space.shape == (100,) and env.observation_space.dtype == np.float32
    assert (env.observation_space.low == -1).all() and (env.observation_space.high == 1).all()
    assert env.metadata["render_fps"] == 4


def test_episode_end_info_and_step_after_end():
    env = MissionEnv(**SHORT)
    env.reset(seed=1)
    for _ in range(9):
        *_, terminated, truncated, info = env.step(np.zeros(4, dtype=np.int64))
        assert not (terminated or truncated) and "episode_metrics" not in info
    _, _, terminated, truncated, info = env.step(np.zeros(4, dtype=np.int64))
    assert truncated and not terminated and info["outcome"] == "timeout"
    m = info["episode_metrics"]
    assert m["steps"] == 10 and m["outcome"] == "timeout" and m["win"] == 0
    assert set(m["reward_terms"]) == set(info["reward_terms"])
    with pytest.raises(RuntimeError, match="reset"):
        env.step(np.zeros(4, dtype=np.int64))


def test_terminated_on_capture():
    env = MissionEnv(**QUICK_WIN)
    env.reset(seed=0)
    for _ in range(3):
        assert env.step([0])[2:4] == (False, False)
    _, reward, terminated, truncated, info = env.step([0])
    assert terminated and not truncated and info["outcome"] == "captured"
    assert info["episode_metrics"]["win"] == 1 and reward > 200.0


def run_episode(env: MissionEnv, seed: int | None, actions: np.ndarray) -> tuple[list[np.ndarray], list[float], list[bool]]:
    obs, _ = env.reset(seed=seed)
    observations, rewards, dones = [obs], [], []
    for a in actions:
        obs, r, terminated, truncated, _ = env.step(a)
        observations.append(obs)
        rewards.append(r)
        dones.append(terminated or truncated)
        if dones[-1]:
            break
    return observations, rewards, dones


def test_same_seed_same_trajectory_different_seed_different():
    actions = np.random.default_rng(0).integers(0, 11, size=(200, 4))
    a, b = MissionEnv(), MissionEnv()
    first = run_episode(a, 7, actions)
    second = run_episode(b, 7, actions)
    assert len(first[1]) > 50
    for x, y in zip(first[0], second[0]):
        np.testing.assert_array_equal(x, y)
    assert first[1:] == second[1:]
    # the same env reset with the same seed again replays it too
    again = run_episode(a, 7, actions)
    for x, y in zip(first[0], again[0]):
        np.testing.assert_array_equal(x, y)
    # another seed: another episode (jittered spawns and objective)
    other = run_episode(b, 8, actions)
    assert not np.array_equal(first[0][0], other[0][0])
    # reset() without a seed continues the env's stream: a new episode, and the same one for both envs
    a.reset(seed=7)
    b.reset(seed=7)
    next_a, next_b = a.reset()[0], b.reset()[0]
    np.testing.assert_array_equal(next_a, next_b)
    assert not np.array_equal(next_a, first[0][0])


def test_unseeded_envs_differ():
    assert not np.array_equal(MissionEnv().reset()[0], MissionEnv().reset()[0])


# --- MissionVecEnv ------------------------------------------------------------------------------------------------
def test_vec_env_shapes_and_dtypes():
    env = MissionVecEnv(n_envs=3, seed=0)
    assert env.num_envs == 3
    assert env.observation_space == MissionEnv().observation_space
    assert env.action_space == MissionEnv().action_space
    obs = env.reset()
    assert obs.shape == (3, 100) and obs.dtype == np.float32
    obs, rewards, dones, infos = env.step(np.stack([env.action_space.sample() for _ in range(3)]))
    assert obs.shape == (3, 100) and obs.dtype == np.float32
    assert rewards.shape == (3,) and rewards.dtype == np.float32
    assert dones.shape == (3,) and dones.dtype == np.bool_
    assert isinstance(infos, list) and len(infos) == 3 and all(isinstance(i, dict) for i in infos)
    # returned arrays are the caller's: the next step does not overwrite them
    kept = obs.copy()
    env.step(np.zeros((3, 4), dtype=np.int64))
    np.testing.assert_array_equal(obs, kept)
    assert env.reward_terms.shape == (3, 14)


def test_vec_env_auto_reset_on_truncation():
    seed = 5
    env = MissionVecEnv(n_envs=3, seed=seed, **SHORT)
    env.reset()
    actions = np.zeros((3, 4), dtype=np.int64)
    for _ in range(9):
        obs, _, dones, infos = env.step(actions)
        assert not dones.any() and infos == [{}, {}, {}]
    last = obs.copy()
    obs, _, dones, infos = env.step(actions)
    assert dones.all()
    for i, info in enumerate(infos):
        assert info["TimeLimit.truncated"] is True and info["outcome"] == "timeout"
        terminal = info["terminal_observation"]
        assert terminal.dtype == np.float32 and terminal.shape == (100,)
        assert terminal[-2] == 0.0  # no time left
        assert not np.array_equal(terminal, last[i])
        assert obs[i, -2] == 1.0 and obs[i, -1] == 0.0  # a fresh episode
        assert info["episode_metrics"]["steps"] == 10
        # both are what a single env with the same seed gives: its last observation, then its next episode
        single = MissionEnv(**SHORT)
        single.reset(seed=seed + i)
        for _ in range(10):
            final = single.step(actions[i])[0]
        np.testing.assert_array_equal(terminal, final)
        np.testing.assert_array_equal(obs[i], single.reset()[0])
    assert env.env_method("episode_metrics", indices=[0])[0]["steps"] == 0


def test_vec_env_termination_is_not_a_time_limit():
    env = MissionVecEnv(n_envs=2, seed=0, **QUICK_WIN)
    env.reset()
    for _ in range(3):
        _, _, dones, _ = env.step(np.zeros((2, 1), dtype=np.int64))
        assert not dones.any()
    _, rewards, dones, infos = env.step(np.zeros((2, 1), dtype=np.int64))
    assert dones.all() and (rewards > 200).all()
    for info in infos:
        assert info["TimeLimit.truncated"] is False and info["outcome"] == "captured"
        assert "terminal_observation" in info


def test_vec_env_seed():
    a = MissionVecEnv(n_envs=3, seed=42)
    b = MissionVecEnv(n_envs=3)
    assert b.seed(42) == [42, 43, 44]
    first = a.reset()
    np.testing.assert_array_equal(first, b.reset())
    assert len({row.tobytes() for row in first}) == 3  # each env has its own seed
    # env i is seeded with seed + i, like a MissionEnv reset with that seed
    for i in range(3):
        np.testing.assert_array_equal(first[i], MissionEnv().reset(seed=42 + i)[0])
    # a later reset without seed() starts new episodes; seed() applies to the next reset only
    assert not np.array_equal(a.reset(), first)
    a.seed(42)
    np.testing.assert_array_equal(a.reset(), first)
    c = MissionVecEnv(n_envs=3)
    assert not np.array_equal(c.reset(), first)


def test_vec_env_attributes_and_methods():
    env = MissionVecEnv(n_envs=3, seed=0)
    env.reset()
    assert env.get_attr("render_mode") == [None, None, None]
    assert env.get_attr("render_mode", indices=[2]) == [None]
    env.set_attr("difficulty", 3, indices=[1])
    assert env.get_attr("difficulty", indices=[1]) == [3]
    with pytest.raises(AttributeError):
        env.get_attr("difficulty", indices=[0])
    env.set_attr("difficulty", 5)
    assert env.get_attr("difficulty") == [5, 5, 5]
    for _ in range(4):
        env.step(np.zeros((3, 4), dtype=np.int64))
    (metrics,) = env.env_method("episode_metrics", indices=[1])
    assert metrics["steps"] == 4 and metrics["outcome"] is None
    assert env.env_method("outcome") == [None, None, None]
    assert len(env.env_method("reward_terms", indices=[0, 2])) == 2
    assert env.env_is_wrapped(gymnasium.Wrapper) == [False, False, False]
    assert env.get_images() == [None, None, None]


def test_vec_monitor_reports_episode_returns():
    env = VecMonitor(MissionVecEnv(n_envs=2, seed=0, **SHORT))
    env.reset()
    total = np.zeros(2)
    for _ in range(10):
        _, rewards, dones, infos = env.step(np.full((2, 4), 3, dtype=np.int64))
        total += rewards
    assert dones.all()
    for i, info in enumerate(infos):
        assert info["episode"]["l"] == 10
        assert info["episode"]["r"] == pytest.approx(total[i], abs=1e-4)


@pytest.mark.parametrize("seed", [123, 2024])
def test_vec_env_equals_single_envs_over_two_episodes_each(seed):
    n = 8
    vec = MissionVecEnv(n_envs=n, seed=seed)
    singles = [MissionEnv() for _ in range(n)]
    greedy = make_policy("greedy", vec.config)
    rng = np.random.default_rng(seed)
    vobs = vec.reset()
    sobs = [env.reset(seed=seed + i)[0] for i, env in enumerate(singles)]
    np.testing.assert_array_equal(vobs, np.stack(sobs))
    episodes = np.zeros(n, dtype=np.int64)
    outcomes = set()
    steps = 0
    while (episodes < 2).any():
        actions = mixed_actions(greedy, vobs, rng)
        vobs, vrewards, vdones, vinfos = vec.step(actions)
        steps += 1
        for i in np.flatnonzero(episodes < 2):
            obs, reward, terminated, truncated, info = singles[i].step(actions[i])
            assert vrewards[i] == np.float32(reward), (i, steps)
            assert vdones[i] == (terminated or truncated), (i, steps)
            assert dict(zip(REWARD_TERMS, vec.reward_terms[i].tolist())) == info["reward_terms"]
            if not vdones[i]:
                assert vinfos[i] == {}
                np.testing.assert_array_equal(vobs[i], obs)
                continue
            np.testing.assert_array_equal(vinfos[i]["terminal_observation"], obs)
            assert vinfos[i]["TimeLimit.truncated"] == (truncated and not terminated)
            assert vinfos[i]["outcome"] == info["outcome"]
            assert vinfos[i]["episode_metrics"] == info["episode_metrics"]
            outcomes.add(info["outcome"])
            episodes[i] += 1
            obs, _ = singles[i].reset()  # the single env's stream goes on, like the vector env's auto-reset
            np.testing.assert_array_equal(vobs[i], obs)
    assert steps > 100
    assert "captured" in outcomes  # terminated and truncated episodes both occurred
    assert outcomes - {"captured"}


def test_set_config_plays_on_exactly_like_a_fresh_env_with_that_config():
    from mission_gym.config import with_setting

    fresh = MissionVecEnv(8, seed=3, engagement={"capture": {"time_to_capture": 4.0}})
    switched = MissionVecEnv(8, seed=3)
    obs_a, obs_b = fresh.reset(), switched.reset()
    switched.core.set_config(with_setting(switched.config, "engagement.capture.time_to_capture", 4.0))
    assert switched.config.engagement.capture.time_to_capture == 4.0
    policy = make_policy("greedy", fresh.config)
    outcomes = []
    for _ in range(300):
        actions = policy(obs_a)
        np.testing.assert_array_equal(obs_a, obs_b)
        obs_a, rew_a, done_a, infos_a = fresh.step(actions)
        obs_b, rew_b, done_b, infos_b = switched.step(actions)
        np.testing.assert_array_equal(rew_a, rew_b)
        np.testing.assert_array_equal(done_a, done_b)
        outcomes += [i["outcome"] for i, d in zip(infos_b, done_b) if d]
    assert "captured" in outcomes  # the shorter capture time was actually played


def test_set_config_refuses_what_changes_the_arrays():
    from mission_gym.config import with_setting

    env = MissionVecEnv(2, seed=0)
    with pytest.raises(ValueError, match="obs_dim"):
        env.core.set_config(with_setting(env.config, "world.observation.lidar_rays", 4))


LEARNER_THREADS_AFTER_A_NATIVE_ENV = """
import os, numpy as np, torch
from mission_gym.plan.presets import load_preset
from mission_gym.training.build import build_run
from mission_gym.settings.resolve import resolve
from mission_gym.settings.overrides import apply_overrides

config = apply_overrides(load_preset("quick"), {"n_envs": 8, "num_threads": 1, "vec_env": "native", "device": "cpu"})
setup = build_run(resolve(config))
setup.venv.reset()
setup.venv.step(np.zeros((8,) + setup.venv.action_space.shape, dtype=np.int64))
print(len(os.sched_getaffinity(0)), setup.threads, torch.get_num_threads())
setup.close()
"""


@pytest.mark.skipif(
    numba.config.NUMBA_NUM_THREADS < 2 or len(os.sched_getaffinity(0)) < 2, reason="one core or one numba thread here"
)
def test_a_native_env_on_several_cores_leaves_the_learner_its_torch_threads():
    """numba's OpenMP pool, launched by the first parallel step, set the process's OpenMP thread count, which torch
    reads as its own: a learner of one thread beside a 2-core env ran its update on 2 (a fresh process: the pool
    launches once per process)."""
    out = subprocess.run(
        [sys.executable, "-c", LEARNER_THREADS_AFTER_A_NATIVE_ENV], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    cores, learner, torch_threads = map(int, out.stdout.split()[-3:])
    assert cores >= 2 and learner == 1 and torch_threads == 1


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="numba's thread pool has one thread here")
@pytest.mark.parametrize("threads", [2, 3])
def test_vec_env_on_several_threads_plays_the_same_games(threads):
    """The games split among numba's threads (prange over env chunks) step to the same bits as on one thread."""
    one = MissionVecEnv(37, seed=11)  # an uneven split: chunks of 18/19 or 12/12/13 envs
    many = MissionVecEnv(37, seed=11, threads=threads)
    assert one.core.threads == 1 and many.core.threads == min(threads, numba.config.NUMBA_NUM_THREADS)
    rng = np.random.default_rng(0)
    obs_one, obs_many = one.reset(), many.reset()
    np.testing.assert_array_equal(obs_one, obs_many)
    dones = 0
    for _ in range(400):  # past the first episode ends, so auto-resets are covered
        actions = rng.integers(0, 11, size=(37, one.core.n_attackers))
        a, b = one.step(actions), many.step(actions)
        for x, y in zip(a[:3], b[:3]):
            np.testing.assert_array_equal(x, y)
        assert [i.get("outcome") for i in a[3]] == [i.get("outcome") for i in b[3]]
        dones += int(a[2].sum())
    assert dones > 0
    one.close(), many.close()
