"""Launching training: a population run's members and cuts (:mod:`~mission_gym.launch.population`), jobs from a file
or flags (:mod:`~mission_gym.launch.jobs`) run by the local backend (:mod:`~mission_gym.launch.local`, with
:mod:`~mission_gym.launch.resources` and :mod:`~mission_gym.launch.mps`) or Ray
(:mod:`~mission_gym.launch.ray_backend`), and what they report (:mod:`~mission_gym.launch.report`).
"""
