"""Gymnasium and SB3 views of the batched core, rendering, and the ``MissionGym-v0`` registration."""

import gymnasium as gym

from mission_gym import ENV_ID
from mission_gym.envs.mission_env import MissionEnv
from mission_gym.envs.vec_env import MissionVecEnv

if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point="mission_gym.envs.mission_env:MissionEnv")

__all__ = ["ENV_ID", "MissionEnv", "MissionVecEnv"]
