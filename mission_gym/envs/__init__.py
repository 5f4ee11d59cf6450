"""Gymnasium and SB3 views of the batched core and rendering (``MissionGym-v0`` is registered by ``import mission_gym``)."""

from mission_gym import ENV_ID
from mission_gym.envs.gym_vector import MissionVectorEnv
from mission_gym.envs.mission_env import MissionEnv
from mission_gym.envs.vec_env import MissionVecEnv

__all__ = ["ENV_ID", "MissionEnv", "MissionVecEnv", "MissionVectorEnv"]
