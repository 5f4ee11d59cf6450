"""How far a population run has come and how long it still needs: member-steps trained against the run's plan,
steps/s in all (measured over the last minutes on this machine) and the time left, as one line for a terminal and
the log.

The plan is every stage's members times the stage's span (the extra draws of a cut once they are drawn); a member's
trained steps are its step count less the step it started from (a clone starts at its cut). The time left leaves out
the scoring at the cuts.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mission_gym.rundir.directory import read_last_progress
from mission_gym.settings.schema import TrainConfig

#: how often a line is printed
EVERY_S = 60.0
#: the span of training the first estimate waits for, measured from the first member-steps written (a member's first
#: rollout: numba's kernels and torch are loaded by then), so the members that run at once all count in its rate
FIRST_SPAN_S = 60.0
#: the window the rate is measured over
WINDOW_S = 180.0


def planned_steps(config: TrainConfig, state: dict[str, Any]) -> int:
    """Member-steps the run will train: each stage's members (those the cut before it kept, once it is made) times
    the stage's span, and each extra draw's steps to its cut."""
    cuts = config.population.cuts
    done = state.get("cuts", [])
    bounds = [0, *(c.at for c in cuts), config.timesteps]
    total = 0
    for i, (start, end) in enumerate(zip(bounds, bounds[1:])):
        if i == 0:
            n = config.population.size
        elif i - 1 < len(done):
            n = len(done[i - 1]["kept"])
        else:
            n = cuts[i - 1].keep + cuts[i - 1].clones
        total += n * (end - start)
    total += sum(int(m["drawn_at"]) for m in state.get("members", []) if m.get("drawn_at"))
    return total


def trained_steps(members_dir: Path, state: dict[str, Any]) -> int:
    """Member-steps trained so far, read from each member's ``progress.csv``."""
    total = 0
    for m in state.get("members", []):
        row = read_last_progress(members_dir / m["name"] / "progress.csv")
        try:
            steps = int(float(row.get("time/total_timesteps", 0) or 0))
        except ValueError:
            steps = 0
        total += max(0, steps - int(m.get("step", 0)))
    return total


class PopulationProgress:
    """Prints, every :data:`EVERY_S`, member-steps trained of the plan, steps/s in all and the time left (the
    recordings of the run's own starts still to come included, :func:`~mission_gym.launch.starts_stage.seconds_left`).
    No line until the rate has been measured over :data:`FIRST_SPAN_S` of training, at the start and again after
    each recording.

    :param config: the run's configuration
    :param state: its ``population.json`` (kept current by the run)
    :param members_dir: where the members' directories are
    :param say: where the line goes (the terminal and the log)
    :param clock: seconds of a monotonic clock (a test's own)
    """

    def __init__(
        self,
        config: TrainConfig,
        state: dict[str, Any],
        members_dir: Path,
        say: Callable[[str], None] = print,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config, self.state, self.members_dir, self.say, self.clock = config, state, members_dir, say, clock
        self.samples: deque[tuple[float, int]] = deque()
        self.before: int | None = None  # member-steps when the window was (re)started
        self.last_said: float | None = None
        self.expected_said = False

    def restart_window(self) -> None:
        """Measure the rate afresh from the next member-steps written (after the training stopped for a while: a
        recording of the run's own starts)."""
        self.samples.clear()
        self.before = None

    def tick(self) -> None:
        """Measure, and print the line when it is due (call as often as convenient)."""
        now = self.clock()
        done = trained_steps(self.members_dir, self.state)
        if self.before is None:
            self.before = done
        if not self.samples and done == self.before:
            return  # the window begins at the first member-steps written, when the members are warm
        if not self.samples or done != self.samples[-1][1]:
            self.samples.append((now, done))
        while len(self.samples) > 2 and now - self.samples[0][0] > WINDOW_S:
            self.samples.popleft()
        if now - self.samples[0][0] < FIRST_SPAN_S:
            return  # a rate over less training is not yet the run's: at its start, and after each recording
        if self.last_said is not None and now - self.last_said < EVERY_S:
            return
        line = self.line(done)
        if line:
            self.last_said = now
            self.say(line)

    def line(self, done: int) -> str:
        """The progress line (empty until two measurements give a rate)."""
        from mission_gym.launch.starts_stage import seconds_left

        plan = max(planned_steps(self.config, self.state), done)
        if len(self.samples) < 2:
            return ""
        (t0, d0), (t1, d1) = self.samples[0], self.samples[-1]
        if t1 <= t0 or d1 <= d0:
            return ""
        rate = (d1 - d0) / (t1 - t0)
        recording = seconds_left(self.config, self.state)
        left = (plan - done) / rate + recording
        eta = time.strftime("%H:%M", time.localtime(time.time() + left))
        counted = "its starts' recordings included, " if recording else ""
        text = (
            f"population: {done / 1e6:,.2f}M of {plan / 1e6:,.2f}M member-steps ({100 * done / plan:.0f}%), "
            f"{rate:,.0f} steps/s in all, about {_minutes(left)} left (ETA {eta}, {counted}scoring not counted)"
        )
        if not self.expected_said:
            self.expected_said = True
            more = f" and about {_minutes(recording)} of finding its starts" if recording else ""
            text = (
                f"population: at {rate:,.0f} steps/s in all this run needs about {_minutes(plan / rate)} of training"
                f"{more}\n" + text
            )
        return text


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"
