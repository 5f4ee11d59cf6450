"""The training envs: the one factory of a run's vectorised env (:mod:`~mission_gym.vec.factory`: ``native``,
``subproc`` or ``dummy``, under ``VecMonitor`` and ``VecNormalize``), the ``subproc`` workers started on first use
(:mod:`~mission_gym.vec.subproc`) and their forkserver's guard, and the batched VecEnv of Gymnasium's MuJoCo tasks
(:mod:`~mission_gym.vec.mujoco_vec`). Mission Gym's own batched views (``MissionVecEnv``, ``MissionVectorEnv``)
live with the game in :mod:`mission_gym.envs`.

Kept free of imports: env worker processes import :mod:`mission_gym.vec.factory` to build their env and load
nothing else of the package.
"""

#: the kinds of training env (:func:`~mission_gym.vec.factory.make_vec_env`); a configuration's ``vec_env`` is one of
#: them or ``auto`` (:func:`~mission_gym.vec.factory.resolve_kind`)
VEC_ENV_KINDS = ("native", "subproc", "dummy")
