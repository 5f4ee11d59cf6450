"""A run's settings: the configuration (:mod:`~mission_gym.settings.schema`), how paths and variants change it
(:mod:`~mission_gym.settings.overrides`, :mod:`~mission_gym.settings.variants`), the restarts' own blocks
(:mod:`~mission_gym.settings.starts`), what the machine fixes before a run is built
(:mod:`~mission_gym.settings.resolve`: batch size, vec-env kind, policy, device), and the memory it needs
(:mod:`~mission_gym.settings.memory`, :mod:`~mission_gym.settings.sizing`). Which recipe and tier a task gets, the
preset files and the command line's flags are :mod:`mission_gym.plan`, above this.

A flag travels one way: the command line, then these settings, then the run's ``config.yaml``.
"""
