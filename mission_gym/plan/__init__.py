"""A run's plan: the recipe a task trains (:mod:`~mission_gym.plan.recipes`), the tier that sizes it for the machine
(:mod:`~mission_gym.plan.tiers`, and ``auto``'s pick among them, :mod:`~mission_gym.plan.fit`), the preset files both
live in (:mod:`~mission_gym.plan.presets`), ``train_ppo``'s settings flags and the one way they make a configuration
(:mod:`~mission_gym.plan.command`), and what is said about it before a run starts (:mod:`~mission_gym.plan.notes`).
The configuration itself, its overrides and what it costs are :mod:`mission_gym.settings`.
"""
