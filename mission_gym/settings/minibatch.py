"""Minibatch sizing: PPO's minibatches must split the rollout evenly."""

from __future__ import annotations

from mission_gym.config.yaml_io import ConfigError

DEFAULT_FLOOR = 64


def divisors(n: int) -> list[int]:
    """All divisors of ``n`` in increasing order.

    :param n: a positive integer
    """
    if n < 1:
        raise ValueError(f"n must be positive, got {n}")
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def choose_batch_size(rollout: int, target: int, floor: int = DEFAULT_FLOOR) -> int:
    """The largest divisor of ``rollout`` that is ≤ ``target`` and ≥ ``floor``.

    When no divisor lies in ``[floor, target]`` (a rollout with few divisors), the smallest divisor above
    ``floor`` is used rather than a tiny one that would make the update crawl; a rollout smaller than ``floor``
    is one batch.

    :param rollout: env steps per rollout (``n_envs × n_steps``)
    :param target: the wanted batch size
    :param floor: the smallest acceptable batch size
    """
    if rollout < 1 or target < 1:
        raise ValueError(f"rollout and target must be positive, got rollout={rollout}, target={target}")
    floor = min(floor, rollout)
    divs = divisors(rollout)
    fitting = [d for d in divs if floor <= d <= target]
    if fitting:
        return fitting[-1]
    return next(d for d in divs if d >= floor)


def nearest_divisors(rollout: int, batch_size: int, each_side: int = 2) -> list[int]:
    """Up to ``each_side`` divisors of ``rollout`` below ``batch_size`` and as many above, in increasing order."""
    divs = divisors(rollout)
    below = [d for d in divs if d < batch_size][-each_side:]
    above = [d for d in divs if d > batch_size][:each_side]
    return below + above


def check_batch_size(batch_size: int, rollout: int, n_envs: int, n_steps: int) -> int:
    """Validate an explicit batch size against the rollout.

    :raises ConfigError: when it does not divide ``n_envs × n_steps``, listing the nearest valid values
    """
    if batch_size < 1 or rollout % batch_size:
        near = ", ".join(str(d) for d in nearest_divisors(rollout, max(batch_size, 1)))
        raise ConfigError(
            f"--batch-size {batch_size} does not divide the rollout of {rollout} steps "
            f"(n_envs {n_envs} x n_steps {n_steps}); nearest valid: {near} (or auto)"
        )
    return batch_size
