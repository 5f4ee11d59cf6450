"""Imported last by a forkserver's preload list (:mod:`mission_gym.vec.subproc`, :mod:`mission_gym.training.warm`):
what it imported is left out of the garbage collector's later passes (:func:`mission_gym.hardware.freeze_heap`),
in every process it forks and at its own exit, which otherwise spent 0.8 s of a core collecting torch's objects."""

from __future__ import annotations

from mission_gym.hardware import freeze_heap

freeze_heap(collect=False)
