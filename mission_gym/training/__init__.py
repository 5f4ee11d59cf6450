"""PPO training: presets, vectorised envs, hardware, callbacks, run directories, resume and branch.

Kept free of imports so that env worker processes, which import :mod:`mission_gym.training.vec_env`, load
nothing they do not need.
"""
