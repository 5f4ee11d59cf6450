"""A run's files: the run directory and what a new run writes (:mod:`~mission_gym.rundir.directory`), writing
every file atomically (:mod:`~mission_gym.rundir.files`), the one-writer lock (:mod:`~mission_gym.rundir.lock`),
what a resume recovers (:mod:`~mission_gym.rundir.recovery`), the training logs (:mod:`~mission_gym.rundir.logger`)
and the evaluations file (:mod:`~mission_gym.rundir.evaluations`).
"""
