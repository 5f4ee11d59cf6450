"""A run's settings: the configuration (:mod:`~mission_gym.settings.schema`), how flags, paths and variants change
it (:mod:`~mission_gym.settings.overrides`, :mod:`~mission_gym.settings.variants`, the command line:
:mod:`~mission_gym.settings.command`), the notes said about it, the presets (:mod:`~mission_gym.settings.presets`,
``auto`` included) and which fits a machine (:mod:`~mission_gym.settings.fit`), what the machine fixes before a run
is built (:mod:`~mission_gym.settings.resolve`: batch size, vec-env kind, device), and the memory it needs
(:mod:`~mission_gym.settings.memory`, :mod:`~mission_gym.settings.sizing`).

A flag travels one way: the command line, then these settings, then the run's ``config.yaml``.
"""
