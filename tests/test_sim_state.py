"""A game saved from the batched core and restored in another env replays to the bit."""

from __future__ import annotations

import numpy as np

from mission_gym.envs.mission_env import make_config
from mission_gym.sim import MissionCore


def test_a_saved_game_restored_in_another_env_replays_to_the_bit() -> None:
    core = MissionCore(make_config(None, None, None, {}), n_envs=3)
    core.seed([0, 1, 2], [11, 12, 13])
    core.reset()
    rng = np.random.default_rng(0)
    for _ in range(40):  # into the game, the defenders moving
        core.step(rng.integers(0, 11, size=(3, core.n_attackers)))
    saved = core.save_state(0)
    actions = rng.integers(0, 11, size=(60, core.n_attackers))
    first = []
    for a in actions:
        obs, rewards, terminated, truncated = core.step(np.stack([a, a, a]))
        first.append((obs[0].copy(), rewards[0], terminated[0], truncated[0]))
        if terminated[0] or truncated[0]:
            break
    core.restore_state(2, saved)
    for k, a in enumerate(actions[: len(first)]):
        obs, rewards, terminated, truncated = core.step(np.stack([a, a, a]))
        assert np.array_equal(obs[2], first[k][0]) and rewards[2] == first[k][1]
        assert (terminated[2], truncated[2]) == first[k][2:]
