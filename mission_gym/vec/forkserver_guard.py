"""Imported by the forkserver of the ``subproc`` training env when it starts (multiprocessing's preload list, set by
:mod:`mission_gym.vec.subproc`): the forkserver ends when the trainer that started it does, ``kill -9`` included.

The env workers are the forkserver's children, and every one of them holds the forkserver's "alive" pipe open, so
the forkserver does not notice that the trainer is gone while a worker lives, and a worker notices only when it
next reads its pipe: one stuck in a long step would outlive the trainer for as long as the step lasts, and keep the
forkserver with it. With this, the kernel sends the forkserver SIGTERM when the trainer dies, and each worker (which
asks for the same when its parent, the forkserver, dies: :class:`~mission_gym.vec.factory.EnvFactory`) follows.

Kept to the standard library and :mod:`mission_gym.hardware`: the forkserver loads nothing else for it.
"""

from __future__ import annotations

import os
import signal

from mission_gym.hardware import parent_death_signal

#: the environment variable naming the trainer's pid, set while the forkserver starts (``subproc.TRAINER_PID``)
TRAINER_PID = "MISSION_GYM_TRAINER_PID"


def _follow_the_trainer() -> None:
    trainer = os.environ.get(TRAINER_PID)
    if not trainer or not trainer.isdigit():  # imported by something else than a forkserver we started
        return
    die_with_parent = parent_death_signal(signal.SIGTERM, int(trainer))
    if die_with_parent is not None:
        die_with_parent()


_follow_the_trainer()
