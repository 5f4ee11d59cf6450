"""What a training session gives its dashboard: SB3 callbacks that refresh the run's pages after updates and add
a filmstrip of an evaluation game after each evaluation. ``train_ppo`` passes them to the trainer, which knows
nothing of dashboards."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stable_baselines3.common.callbacks import BaseCallback

from mission_gym import ENV_ID
from mission_gym.dashboard.pages import refresh_dashboards


class DashboardCallback(BaseCallback):
    """Refreshes the run's dashboard after updates, at most every ``interval_s`` seconds.

    :param run_dir: the run directory
    """

    def __init__(self, run_dir: Path, interval_s: float = 30.0) -> None:
        super().__init__()
        self.run_dir, self.interval = Path(run_dir), interval_s

    def _on_rollout_start(self) -> None:
        if self.model.num_timesteps > 0:
            refresh_dashboards(self.run_dir, min_interval_s=self.interval)

    def _on_step(self) -> bool:
        return True


class EvalFramesCallback(BaseCallback):
    """After each in-training evaluation (as its ``callback_after_eval``), one game of the evaluated policy on the
    first evaluation seed becomes the dashboard's filmstrip (``frames/``). Mission Gym only.

    :param run_dir: the run directory
    :param env_kwargs: the run's env arguments (the real game)
    """

    def __init__(self, run_dir: Path, env_kwargs: dict[str, Any]) -> None:
        super().__init__()
        self.run_dir, self.env_kwargs = Path(run_dir), env_kwargs

    def _on_step(self) -> bool:
        from mission_gym.dashboard.video import record_eval_frames
        from mission_gym.evaluation import EVAL_SEED_BASE

        predict = self.parent.predict  # the evaluation callback's: normalised as in training
        record_eval_frames(
            self.run_dir, lambda o: predict(o[None])[0], int(self.model.num_timesteps), env_kwargs=self.env_kwargs,
            seed=EVAL_SEED_BASE,
        )  # fmt: skip
        return True


def training_callbacks(run_dir: Path, env_id: str, env_kwargs: dict[str, Any]) -> tuple[list[BaseCallback], Any]:
    """``(callbacks, callback_after_eval)`` for :meth:`~mission_gym.training.trainer.Trainer.train`."""
    after_eval = EvalFramesCallback(run_dir, env_kwargs) if env_id == ENV_ID else None
    return [DashboardCallback(run_dir)], after_eval
