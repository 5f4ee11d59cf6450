"""A vec-env layer that makes every episode end terminal to the learner (``bootstrap_truncated: false``).

SB3's PPO adds ``gamma * V(last observation)`` to the last reward of an episode whose info says
``TimeLimit.truncated``, as if the game went on. That is right for a time limit the agent cannot see, and wrong
where the limit is part of the task the agent is scored on: Mission Gym shows the time remaining in every
observation, and its ``stalled`` end (no progress for 30 s) is a penalised outcome of the fleet's own play. Left
bootstrapped, a stall costs the fleet its penalty but not the game it gave up, so hanging back looks cheap.
"""

from __future__ import annotations

import numpy as np
from stable_baselines3.common.vec_env import VecEnvWrapper
from stable_baselines3.common.vec_env.base_vec_env import VecEnvObs, VecEnvStepReturn

TRUNCATED_KEY = "TimeLimit.truncated"


class TerminalEpisodeEnds(VecEnvWrapper):
    """Clears ``TimeLimit.truncated`` in the step infos, so the learner never bootstraps past an episode's end.

    :param venv: the vec env to wrap
    """

    def reset(self) -> VecEnvObs:
        return self.venv.reset()

    def step_wait(self) -> VecEnvStepReturn:
        obs, rewards, dones, infos = self.venv.step_wait()
        for i in np.flatnonzero(dones):  # only the episodes that just ended carry the key
            if infos[i].get(TRUNCATED_KEY):
                infos[i][TRUNCATED_KEY] = False
        return obs, rewards, dones, infos
