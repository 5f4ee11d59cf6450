"""Self-contained HTML dashboards of training runs, and the evaluation frames they show.

``refresh_dashboards(run_dir)`` is what a training loop calls (rate-limited, never raises; ``train_ppo`` hands the
trainer :func:`~mission_gym.dashboard.training.training_callbacks`, and a population run's cuts); ``write_dashboards
(runs_dir, run)`` is what the ``dashboard`` command runs; ``write_launch_pages(launch_dir, runs_dir)`` what the
launcher does when a launch ends. A population run's page shows its members side by side (``members``), a launch's
page its jobs (``launches``).
"""

from mission_gym.dashboard.frames import write_eval_frames
from mission_gym.dashboard.pages import (
    refresh_dashboards,
    write_dashboards,
    write_index,
    write_launch_pages,
    write_run_dashboard,
)

__all__ = [
    "refresh_dashboards",
    "write_dashboards",
    "write_eval_frames",
    "write_index",
    "write_launch_pages",
    "write_run_dashboard",
]
