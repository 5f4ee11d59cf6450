"""Mission Gym: fast PPO training on a batched capture-the-zone game and any Gymnasium task."""

__version__ = "0.1.0"

#: the Gymnasium id of the game (registered by ``import mission_gym.envs``)
ENV_ID = "MissionGym-v0"
