"""A per-env random stream for the numba kernels.

Each env owns one uint64 state (SplitMix64), so env ``i`` of a batch draws exactly the numbers a
single env with the same seed draws, whatever its neighbours do. The state is seeded from the
env's Gymnasium generator, which keeps ``reset(seed=s)`` exactly reproducible.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S11 = np.uint64(11)
_INV53 = 1.0 / 9007199254740992.0  # 2**-53


@njit(cache=True, inline="always")
def next_u64(rng: np.ndarray, e: int) -> np.uint64:
    """Advance env ``e``'s state and return 64 random bits."""
    rng[e] = rng[e] + _GOLDEN
    z = rng[e]
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@njit(cache=True, inline="always")
def uniform(rng: np.ndarray, e: int) -> float:
    """A float in [0, 1)."""
    return float(next_u64(rng, e) >> _S11) * _INV53


@njit(cache=True, inline="always")
def uniform_range(rng: np.ndarray, e: int, low: float, high: float) -> float:
    """A float in [low, high)."""
    return low + (high - low) * uniform(rng, e)


@njit(cache=True)
def normal(rng: np.ndarray, e: int) -> float:
    """A standard normal draw (Box-Muller; one value per call keeps the stream simple)."""
    u1 = uniform(rng, e)
    u2 = uniform(rng, e)
    return math.sqrt(-2.0 * math.log(1.0 - u1)) * math.cos(2.0 * math.pi * u2)
