"""The batched simulation core: arrays shaped (n_envs, n_units, ...) stepped by numba kernels.
Imports neither gymnasium nor torch."""

from mission_gym.sim._cache_guard import drop_stale_numba_cache

drop_stale_numba_cache()

from mission_gym.sim.core import MissionCore  # noqa: E402

__all__ = ["MissionCore"]
