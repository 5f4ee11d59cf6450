"""Runs trained alone and then together (``train_together``), for the tests that compare the two."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch


def alone_then_together(
    configs: Sequence[Any], runs_dir: Path, stop_at: int, before: Callable[[list[Any]], None] | None = None
) -> list[tuple[float, Any]]:
    """Train each configuration alone to ``stop_at``, then all of them together; for each run, the largest weight
    difference between its two checkpoints and its result from the batch. ``before`` sees the batch's trainers."""
    from stable_baselines3 import PPO

    from mission_gym.training.trainer import Trainer, train_together

    torch.set_num_threads(1)
    alone = []
    for i, config in enumerate(configs):
        result = Trainer.create(config, runs_dir=runs_dir / "alone", run_name=f"m{i}", progress=False).train(stop_at=stop_at)
        alone.append(PPO.load(result.checkpoint, device="cpu").policy.state_dict())
    trainers = [
        Trainer.create(c, runs_dir=runs_dir / "together", run_name=f"m{i}", progress=False) for i, c in enumerate(configs)
    ]
    if before is not None:
        before(trainers)
    out = []
    for expected, result in zip(alone, train_together(trainers, stop_at=stop_at)):
        got = PPO.load(result.checkpoint, device="cpu").policy.state_dict()
        out.append((max((expected[k] - got[k]).abs().max().item() for k in expected), result))
    return out
