"""A training session around the PPO algorithm (:mod:`mission_gym.ppo`): building a run (:mod:`~mission_gym.training.build`),
the trainer that keeps its files whatever happens, its callbacks, load monitor and result, the optional run parts
registered by name, and the measuring harness of the benchmarks. The training envs are :mod:`mission_gym.vec`; a
trained agent's files and loading one to act are :mod:`mission_gym.agents`.
"""
