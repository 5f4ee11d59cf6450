"""Training games started from a winner's recorded states (mission_gym/extras/restarts.py): the states of won games
only, a restart that puts a recorded game in an env (in the env's own random stream), and a run that logs how far
back its restarts start."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mission_gym.baselines import GreedyPolicy
from mission_gym.config import ConfigError
from mission_gym.envs import MissionVecEnv
from mission_gym.envs.mission_env import make_config
from mission_gym.extras.restarts import RESTORED, Restarter, StartStates, record_states

GAMES = 64


@pytest.fixture(scope="module")
def states_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """States of the scripted greedy fleet's won games (it wins about one game in ten)."""
    out = tmp_path_factory.mktemp("states") / "greedy.npz"
    saved = record_states(GreedyPolicy(make_config(None, None, None, {})), out, {}, games=GAMES, every=5)
    assert saved > 0
    return out


def test_only_won_games_are_kept_with_their_steps_to_the_end(states_file: Path) -> None:
    with np.load(states_file) as data:
        to_end, games = data["to_end"], data["game"]
        assert set(data.files) == {"game", "to_end", *RESTORED}
    assert (to_end > 0).all() and len(set(games.tolist())) < GAMES
    for g in set(games.tolist()):  # every 5 steps of each kept game, down to its last steps
        ends = np.sort(to_end[games == g])
        assert ends[0] <= 5 and (np.diff(ends) == 5).all()


def test_a_restart_puts_a_recorded_game_in_the_env_in_its_own_random_stream(states_file: Path) -> None:
    states = StartStates(states_file)
    env = MissionVecEnv(4, seed=0)
    env.reset()
    restarter = Restarter(env.core, states, share=1.0, back=20, step=10, seed=0)
    own = env.core.rng.copy()
    restarter(np.array([1, 3]))
    near = set(states.near(20, 10).tolist())
    for i in (1, 3):
        match = [k for k in near if np.array_equal(env.core.u[i], states.arrays["u"][k])]
        assert match and np.array_equal(env.core.ev[i], states.arrays["ev"][match[0]])
    assert restarter.restarted.tolist() == [False, True, False, True]
    assert np.array_equal(env.core.rng, own)  # the env keeps its own stream
    with pytest.raises(ConfigError, match="not a states file"):
        StartStates(states_file.with_suffix(".missing.npz"))


def test_a_run_restarts_from_states_and_logs_how_far_back(tmp_path: Path, states_file: Path) -> None:
    preset = tmp_path / "p.yaml"
    preset.write_text(
        f"base: quick\ntimesteps: 4096\nn_envs: 16\nrestarts: {{states: {states_file}, share: 1.0, back: 10, step: 10, "
        "advance_at: 0.01, until: 3000}\n"
    )
    proc = subprocess.run([sys.executable, "-m", "mission_gym.scripts.train_ppo", "--preset", str(preset), "--run-name", "r",
                           "--no-progress"], cwd=tmp_path, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with open(tmp_path / "runs" / "r" / "progress.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("restarts/back")]
    assert rows and all(int(float(r["time/total_timesteps"])) <= 3000 + 16 * 64 for r in rows)


def test_a_cut_whose_draws_would_restart_from_a_best_that_won_nothing_draws_without_restarts(tmp_path: Path) -> None:
    """A quick population's members win no game: the draws' restarts have no won game to start from, so the cut says
    so in one line and draws as it would without them."""
    pop = ("population={size: 2, cuts: [{at: 512, keep: 1, redraw_below: 0.5, redraws: 1, redraw_restarts: {share: 0.5}}], "
           "episodes: 4}")  # fmt: skip
    proc = subprocess.run([sys.executable, "-m", "mission_gym.scripts.train_ppo", "--preset", "quick", "--timesteps", "1024",
                           "--run-name", "p", "--hyperparams", pop, "--no-progress"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no restarts for the draws" in proc.stdout and "m2 drawn" in proc.stdout
    drawn = (tmp_path / "runs" / "p" / "members" / "m2.yaml").read_text()
    assert "restarts: null" in drawn
