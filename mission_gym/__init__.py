"""Mission Gym: fast PPO training on a batched capture-the-zone game and any Gymnasium task.

Importing the package registers ``MissionGym-v0`` with Gymnasium by string entry points only (nothing heavy is
imported until an env is made), so ``gym.make("mission_gym:MissionGym-v0")`` and
``gym.make_vec("MissionGym-v0", num_envs=N, vectorization_mode="vector_entry_point")`` work after it.
"""

import gymnasium as _gym

__version__ = "0.1.0"

#: the Gymnasium id of the game (registered by ``import mission_gym``)
ENV_ID = "MissionGym-v0"

if ENV_ID not in _gym.registry:
    _gym.register(
        id=ENV_ID,
        entry_point="mission_gym.envs.mission_env:MissionEnv",
        # make_vec's vector_entry_point mode: Gymnasium's VectorEnv over the batched core (same-step autoreset)
        vector_entry_point="mission_gym.envs.gym_vector:MissionVectorEnv",
    )
