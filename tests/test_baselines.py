"""The scripted baselines: valid actions, and greedy doing better than random on the default scenario."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from mission_gym.baselines import GreedyPolicy, RandomPolicy, make_policy
from mission_gym.config import load_config
from mission_gym.envs import MissionEnv, MissionVecEnv


def play_one_episode_each(name: str, n_envs: int = 64, seed: int = 1000) -> list[dict[str, Any]]:
    """The metrics of the first episode of each of ``n_envs`` default games under a baseline."""
    env = MissionVecEnv(n_envs=n_envs, seed=seed)
    policy = make_policy(name, env.config, seed=seed)
    obs = env.reset()
    metrics: list[dict[str, Any] | None] = [None] * n_envs
    while any(m is None for m in metrics):
        obs, _, dones, infos = env.step(policy(obs))
        for i in np.flatnonzero(dones):
            if metrics[i] is None:
                metrics[i] = infos[i]["episode_metrics"]
    return metrics  # type: ignore[return-value]


def test_greedy_beats_random():
    greedy = play_one_episode_each("greedy")
    random = play_one_episode_each("random")
    greedy_wins = sum(m["win"] for m in greedy)
    random_wins = sum(m["win"] for m in random)
    assert greedy_wins > random_wins, (greedy_wins, random_wins)
    # greedy gets to the zone; random hardly leaves its spawn
    assert np.mean([m["capture_progress"] for m in greedy]) > 2.0 + np.mean([m["capture_progress"] for m in random])


def test_make_policy():
    config = load_config()
    assert isinstance(make_policy("greedy", config), GreedyPolicy)
    assert isinstance(make_policy("random", config, seed=0), RandomPolicy)
    with pytest.raises(ValueError, match="unknown policy 'greddy'"):
        make_policy("greddy", config)


@pytest.mark.parametrize("name", ["random", "greedy"])
def test_policies_return_valid_actions(name):
    env = MissionVecEnv(n_envs=5, seed=0)
    policy = make_policy(name, env.config, seed=0)
    obs = env.reset()
    for _ in range(30):
        actions = policy(obs)
        assert actions.shape == (5, 4) and np.issubdtype(actions.dtype, np.integer)
        assert all(env.action_space.contains(a) for a in actions)
        obs, *_ = env.step(actions)
    # a single observation (as from MissionEnv) gives one row of actions
    single = MissionEnv()
    action = policy(single.reset(seed=0)[0])
    assert action.shape == (1, 4) and single.action_space.contains(action[0])


def test_random_policy_is_seeded():
    config = load_config()
    obs = np.zeros((3, 100), dtype=np.float32)
    a, b, c = (make_policy("random", config, seed=s) for s in (1, 1, 2))
    first = a(obs)
    np.testing.assert_array_equal(first, b(obs))
    assert not np.array_equal(first, c(obs))
    assert len(np.unique(np.concatenate([a(obs) for _ in range(20)]))) == 11  # every action comes up


def test_greedy_heads_for_the_objective_and_holds_in_the_zone():
    scenario = {"attackers": [{"type": "UAV_B", "x": 20, "y": 20, "heading": 0}], "defenders": []}
    env = MissionEnv(scenario=scenario)
    policy = make_policy("greedy", env.config)
    obs, _ = env.reset(seed=0)
    assert policy(obs)[0, 0] == 2  # NE, straight at the objective
    for _ in range(240):
        obs, _, terminated, truncated, info = env.step(policy(obs)[0])
        if terminated or truncated:
            break
    assert info["outcome"] == "captured"
