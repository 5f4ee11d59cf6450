"""Experiment tracking: ``train_ppo --track`` sends a run to Weights & Biases.

The run's TensorBoard events are synced as they are written (``sync_tensorboard``), so W&B shows every curve
TensorBoard does, with the resolved configuration as the W&B run's config. ``WANDB_MODE=offline`` works without a
network (``wandb sync`` uploads later); ``WANDB_DIR`` says where W&B's files go (default: the run directory).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mission_gym.optional import require
from mission_gym.settings.schema import TrainConfig


@contextlib.contextmanager
def tracked(
    run_dir: Path, config: TrainConfig, project: str | None, entity: str | None, resume_id: str | None = None
) -> Iterator[Any]:
    """A W&B run for a training session while the block runs (``wandb.init`` before the session's TensorBoard writer
    is made, so its events are synced; ``wandb.finish`` after).

    :param run_dir: the run directory (its name is the W&B run's; W&B's files go there unless ``WANDB_DIR`` is set)
    :param config: the run's resolved configuration (the W&B run's config)
    :param project: the W&B project [``mission_gym``]
    :param entity: the W&B entity (user or team) [the account's default]
    :param resume_id: the W&B run id of an earlier session of this run (a ``--resume`` continues it)
    """
    wandb = require("wandb", "--track")
    wandb_dir = os.environ.get("WANDB_DIR") or str(run_dir)
    Path(wandb_dir).mkdir(parents=True, exist_ok=True)
    run = wandb.init(
        project=project or "mission_gym",
        entity=entity,
        name=run_dir.name,
        id=resume_id,
        resume="allow" if resume_id else None,
        dir=wandb_dir,
        config=config.model_dump(),
        sync_tensorboard=True,
        save_code=False,
    )
    try:
        yield run
    finally:
        run.finish()
