"""Self-contained HTML dashboards of training runs, and the evaluation frames they show.

``refresh_dashboards(run_dir)`` is what a training loop calls (rate-limited, never raises; ``train_ppo`` hands the
trainer :func:`~mission_gym.dashboard.training.training_callbacks`); ``write_dashboards(runs_dir, run)`` is what the
``dashboard`` command runs.
"""

from mission_gym.dashboard.frames import write_eval_frames
from mission_gym.dashboard.pages import refresh_dashboards, write_dashboards, write_index, write_run_dashboard

__all__ = ["refresh_dashboards", "write_dashboards", "write_eval_frames", "write_index", "write_run_dashboard"]
