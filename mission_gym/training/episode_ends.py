"""A vec-env layer that makes every episode end terminal to the learner (``bootstrap_truncated: false``).

SB3's PPO adds ``gamma * V(last observation)`` to the last reward of an episode whose info says
``TimeLimit.truncated``, as if the game went on: right for a time limit the agent cannot see. Where the limit is
part of the task and visible to the agent (Mission Gym shows the time remaining, and its ``stalled`` end is a
penalised outcome of the fleet's own play), the end can instead be taken as final: a stall then costs its penalty
and the game given up, whatever the value net thought of the last state. On Mission Gym's ``cpu`` preset that made
fleets prefer a stall to a costly fight (docs/results.md, rows 110-112), so no preset uses it.
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
