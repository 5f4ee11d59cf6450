"""The PPO algorithm (:mod:`~mission_gym.ppo.lean`, its entropy and schedules) and the training session around it:
building a run (:mod:`~mission_gym.ppo.build`), the trainer, its callbacks and load monitor, beside the run's
configuration, presets and files. The training envs are :mod:`mission_gym.vec`; a trained agent's files and loading
one to act are :mod:`mission_gym.agents`.
"""
