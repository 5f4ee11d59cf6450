"""Optional parts of a run, registered by name in :mod:`mission_gym.training.parts` (the way sb3-contrib sits beside SB3):
a curriculum over game settings (``curriculum:``) and a shared actor-critic trunk (``policy: trunk``)."""
