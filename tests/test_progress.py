"""A population's progress line: no estimate until the rate has been measured over a minute of training from the
first member-steps written (the members are warm then), and the estimate it then gives for a run of known length,
the recordings of its own starts included."""

from __future__ import annotations

from pathlib import Path

import pytest

from mission_gym.launch.progress import FIRST_SPAN_S, PopulationProgress, planned_steps
from mission_gym.launch.starts_stage import seconds_left
from mission_gym.plan.presets import load_preset
from mission_gym.settings.overrides import apply_overrides


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def write_steps(members: Path, steps: dict[str, int]) -> None:
    for name, n in steps.items():
        (members / name).mkdir(parents=True, exist_ok=True)
        (members / name / "progress.csv").write_text(f"time/total_timesteps\n{n}\n")


def test_the_first_estimate_waits_for_a_minute_of_warm_members_then_gives_the_runs_time(tmp_path: Path) -> None:
    config = apply_overrides(load_preset("cpu"), {})
    state = {"members": [{"name": f"m{k}"} for k in range(6)], "cuts": []}
    members = tmp_path / "members"
    members.mkdir()
    clock, lines = Clock(), []
    progress = PopulationProgress(config, state, members, say=lines.append, clock=clock)
    rate = 12_000  # member-steps per second per member, two members at a time

    progress.tick()  # nothing written yet: the members are still starting (imports, the game's kernels)
    clock.now = 20.0
    progress.tick()
    for t in range(25, 90, 5):  # their first rollouts written at t = 25 s, then steady
        clock.now = float(t)
        write_steps(members, {m: 8192 + rate * (t - 25) for m in ("m0", "m1")})
        progress.tick()
        if t - 25 < FIRST_SPAN_S:
            assert lines == [], f"an estimate after {t - 25} s of training"
    assert len(lines) == 1  # at t = 85 s
    first, line = lines[0].splitlines()
    plan = planned_steps(config, state)
    assert plan == 24_500_000
    recording = seconds_left(config, state)  # the preset's own starts, none recorded yet
    assert recording > 0
    minutes = round(plan / (2 * rate) / 60)  # 24.5M member-steps at 24,000 steps/s: about 17 min
    assert f"at 24,000 steps/s in all this run needs about {minutes} min of training" in first
    assert f"and about {round(recording / 60) if recording >= 90 else round(recording)}" in first
    left = (plan - 2 * (8192 + rate * 60)) / (2 * rate) + recording
    assert f"about {round(left / 60)} min left" in line and "its starts' recordings included" in line


def test_the_window_starts_again_after_a_recording(tmp_path: Path) -> None:
    """Training stopped while the run recorded its starts: the rate is measured afresh, not across the pause, and
    no line comes until it has been measured over a minute again."""
    config = apply_overrides(load_preset("quick"), {"population": {"size": 2, "cuts": [{"at": 1024, "keep": 1}]}})
    state = {"members": [{"name": "m0"}, {"name": "m1"}], "cuts": []}
    members = tmp_path / "members"
    members.mkdir()
    clock, lines = Clock(), []
    progress = PopulationProgress(config, state, members, say=lines.append, clock=clock)
    write_steps(members, {"m0": 100, "m1": 100})
    progress.tick()
    clock.now = 10.0
    write_steps(members, {"m0": 200, "m1": 200})
    progress.tick()
    progress.restart_window()
    clock.now = 500.0  # after a long recording: no rate over it
    progress.tick()
    clock.now = 501.0
    write_steps(members, {"m0": 300, "m1": 300})  # training again: the window begins
    progress.tick()
    clock.now = 501.0 + FIRST_SPAN_S - 1
    write_steps(members, {"m0": 350, "m1": 350})
    progress.tick()
    assert lines == []
    clock.now = 501.0 + FIRST_SPAN_S
    write_steps(members, {"m0": 400, "m1": 400})
    progress.tick()
    assert len(lines) == 1 and "at 3 steps/s in all" in lines[0]  # 200 member-steps in 60 s
    progress.restart_window()  # the next cut's recording, then its members' first rollouts 5 s apart
    clock.now = 690.0
    progress.tick()
    clock.now = 700.0
    write_steps(members, {"m0": 500, "m1": 400})
    progress.tick()
    clock.now = 705.0
    write_steps(members, {"m0": 500, "m1": 500})
    progress.tick()
    clock.now = 700.0 + FIRST_SPAN_S - 1
    write_steps(members, {"m0": 550, "m1": 550})
    progress.tick()
    assert len(lines) == 1  # not a rate over 5 s of one member's first rollout
    clock.now = 700.0 + FIRST_SPAN_S
    write_steps(members, {"m0": 600, "m1": 600})
    progress.tick()
    assert len(lines) == 2 and ", 5 steps/s in all" in lines[1]  # 300 member-steps in 60 s


def test_a_recording_not_made_yet_is_counted_from_the_runs_own() -> None:
    """The seconds the recordings still to come will take: their games at the seconds per game and core of the run's
    own recording of the same policy, else a rate measured on a reference machine."""
    from mission_gym.hardware import core_ids
    from mission_gym.launch.starts_stage import SECONDS_PER_GAME

    pop = {"size": 3, "cuts": [{"at": 1024, "keep": 2}, {"at": 1536, "keep": 1}]}
    restarts = [{"find": {"policy": "greedy", "games": 64}, "until": 1024},
                {"find": {"policy": "best", "games": 100}, "start": 1024, "until": 1536},
                {"find": {"policy": "best", "games": 300}, "start": 1536, "until": 2048}]  # fmt: skip
    config = apply_overrides(load_preset("quick"), {"population": pop, "restarts": restarts})
    cores = len(core_ids())
    assert seconds_left(config, {}) == pytest.approx(
        (64 * SECONDS_PER_GAME["greedy"] + 400 * SECONDS_PER_GAME["best"]) / cores
    )
    made = {"starts": [{"block": 0, "games": 64, "seconds": 8.0, "cores": 2}, {"block": 1, "games": 100, "seconds": 50.0,
                                                                            "cores": 2}]}  # fmt: skip
    assert seconds_left(config, made) == pytest.approx(300 * (50.0 * 2 / 100) / cores)
