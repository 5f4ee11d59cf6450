"""Write the HTML dashboards of training runs: ``runs/<run>/dashboard.html``, ``runs/index.html`` and a page per
launch of the launcher, ``runs/_launches/<date-time>/index.html``.

Examples::

    python -m mission_gym.scripts.dashboard                  # every run (population members too), every launch, the index
    python -m mission_gym.scripts.dashboard my_run           # one run, and the index
    python -m mission_gym.scripts.dashboard 20250101-120000  # one launch's page (a name under runs/_launches or its path)
    python -m mission_gym.scripts.dashboard --watch 10       # keep refreshing every 10 s (Ctrl-C stops)
"""

from __future__ import annotations

import argparse
import difflib
import sys
import time
from pathlib import Path

from mission_gym.dashboard import write_dashboards
from mission_gym.dashboard.launches import LAUNCHES_DIR, is_launch_dir, list_launches
from mission_gym.dashboard.runs import is_run_dir, list_runs
from mission_gym.scripts.cli import command_main


class UsageError(Exception):
    """Bad input: reported as one line, exit status 2."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m mission_gym.scripts.dashboard",
        description="Write self-contained HTML dashboards (no network needed to view them) for one run, one launch "
        "or all of them.",
    )
    parser.add_argument(
        "run",
        nargs="?",
        help="run name under --runs-dir, a run directory, or a launch (its name under RUNS_DIR/_launches or its "
        "directory) (default: every run and launch)",
    )
    parser.add_argument("--runs-dir", default="runs", help="directory holding the run directories (default: runs)")
    parser.add_argument("--watch", type=float, default=0.0, metavar="S", help="rewrite the pages every S seconds until Ctrl-C")
    return parser.parse_args(argv)


def resolve(run: str | None, runs_dir: str) -> tuple[Path, Path | None]:
    """The runs directory and the run or launch directory (None = all of them) named on the command line.

    :param run: a run name, a run directory path, a launch name or a launch directory path, or None
    :param runs_dir: the ``--runs-dir`` value
    :raises UsageError: when either does not exist (with the closest run names)
    """
    root = Path(runs_dir)
    # a run directory given by path (absolute, or relative and not a run name under --runs-dir)
    if run is not None and is_run_dir(run) and (Path(run).is_absolute() or not is_run_dir(root / run)):
        path = Path(run)
        return path.parent, path
    # a launch's directory given by path: its runs directory is the one holding _launches/
    if run is not None and is_launch_dir(run) and not is_run_dir(root / run):
        path = Path(run)
        return path.parent.parent, path
    if not root.is_dir():
        raise UsageError(f"runs directory {runs_dir!r} does not exist; pass --runs-dir DIR")
    if run is None:
        return root, None
    if is_run_dir(root / run):
        return root, root / run
    if is_launch_dir(root / LAUNCHES_DIR / run):
        return root, root / LAUNCHES_DIR / run
    names = [p.name for p in list_runs(root)] + [p.name for p in list_launches(root)]
    close = difflib.get_close_matches(run, names, n=3)
    hint = (
        f"; did you mean {', '.join(close)}?" if close else (f"; runs: {', '.join(names[:10])}" if names else "; no runs yet")
    )
    raise UsageError(f"no run {run!r} in {runs_dir!r}{hint}")


@command_main
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        runs_dir, run = resolve(args.run, args.runs_dir)
        if args.watch < 0:
            raise UsageError(f"--watch must be >= 0 seconds, got {args.watch}")
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        while True:
            for page in write_dashboards(runs_dir, run):
                print(page)
            if not args.watch:
                return 0
            time.sleep(args.watch)
    except KeyboardInterrupt:  # the way to stop --watch
        return 0


if __name__ == "__main__":
    sys.exit(main())
