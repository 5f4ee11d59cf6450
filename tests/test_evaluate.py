"""``evaluate``: held-out seeds, the Wilson interval, the breakdown by the defenders' modes, the CLI and its errors."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest

from mission_gym.baselines import make_policy
from mission_gym.config import load_config
from mission_gym.envs import MissionVecEnv
from mission_gym.evaluation import HELD_OUT_SEED_BASE, evaluate_mission, held_out_seeds, wilson_interval


def test_wilson_interval_known_values():
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson_interval(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert wilson_interval(200, 200)[1] == 1.0 and wilson_interval(200, 200)[0] == pytest.approx(0.9812, abs=1e-4)


def test_breakdown_by_defender_modes_matches_each_seeds_game():
    seeds = held_out_seeds(30)
    result = evaluate_mission(make_policy("greedy", load_config(), seed=0), 30, seeds, "greedy")
    venv = MissionVecEnv(30)  # the same seeds draw the same defender modes at reset
    venv.seed_envs(seeds)
    venv.reset()
    drawn = Counter("+".join(sorted(venv.core.defender_modes(i))) for i in range(30))
    assert {key: row["episodes"] for key, row in result.by_defender_modes.items()} == dict(drawn)
    assert len(drawn) > 1
    assert sum(row["wins"] for row in result.by_defender_modes.values()) == round(result.win_rate * 30)
    merged: Counter[str] = Counter()
    for row in result.by_defender_modes.values():
        assert row["win_rate"] == row["wins"] / row["episodes"]
        merged.update(row["outcomes"])
    assert dict(merged) == result.outcomes
    counts = [row["episodes"] for row in result.by_defender_modes.values()]
    assert counts == sorted(counts, reverse=True)


def test_cli_writes_json_and_prints_the_breakdown(tmp_path):
    out = tmp_path / "greedy.json"
    cmd = [sys.executable, "-m", "mission_gym.scripts.evaluate", "--policy", "greedy", "--episodes", "24", "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "win rate" in proc.stdout and "by the defenders' modes:" in proc.stdout
    data = json.loads(out.read_text())
    assert data["episodes"] == 24 and data["seeds"][0] == HELD_OUT_SEED_BASE
    assert sum(data["outcomes"].values()) == 24
    assert sum(row["episodes"] for row in data["by_defender_modes"].values()) == 24
    lo, hi = data["win_ci95"]
    assert lo <= data["win_rate"] <= hi


@pytest.mark.parametrize(
    "args,message",
    [
        (["--policy", "greedy", "--episodes", "0"], "--episodes must be >= 1 (got 0)"),
        (["no-such-run", "--runs-dir", "."], "no run 'no-such-run'"),
        (["--policy", "gredy"], "did you mean 'greedy'?"),
        ([], "give either a model"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(args, message, cli_here):
    from mission_gym.scripts.evaluate import main

    code, _, err = cli_here(main, args)
    assert code == 2
    assert message in err
    assert len([line for line in err.splitlines() if line.startswith("error")]) == 1


def test_wins_by_guards_sum_the_modes_rows_by_their_guards() -> None:
    from mission_gym.evaluation import by_guards

    rows = {
        "patrol+patrol": {"wins": 9, "episodes": 10},
        "guard_objective+patrol": {"wins": 5, "episodes": 8},
        "guard_objective+intercept": {"wins": 1, "episodes": 2},
        "guard_objective+guard_objective": {"wins": 0, "episodes": 3},
        "intercept+patrol": {"wins": 4, "episodes": 4},
    }
    assert by_guards(rows) == {0: (13, 14), 1: (6, 10), 2: (0, 3)}
