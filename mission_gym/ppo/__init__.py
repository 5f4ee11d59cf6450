"""The PPO run: its typed configuration and presets, the training env, the model (SB3's PPO), the trainer and its
callbacks, the run directory, and the memory estimator.

Kept free of imports so that env worker processes, which import :mod:`mission_gym.ppo.vec_env`, load nothing they do
not need.
"""
