"""What is winnable: ``evaluate --best-of N`` (a policy's own sampled plays), ``--defenders MODE+MODE`` (one
situation's held-out games) and ``--policy lookahead`` (a privileged search over a policy's plays), and the saved
states the lookahead and the restarts copy games by."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import warm_cli

from mission_gym.agents.lookahead import Lookahead, LookaheadBudget, lookahead_results
from mission_gym.baselines import GreedyPolicy
from mission_gym.config import ConfigError
from mission_gym.envs import MissionVecEnv
from mission_gym.evaluation import evaluate_mission, held_out_seeds, situation_seeds
from mission_gym.extras.starts import StartStates, lost_seeds, record_lookahead_states
from mission_gym.sim.core import STATE_ARRAYS, MissionCore
from mission_gym.sim.layout import A_STOP

EVALUATE = [sys.executable, "-m", "mission_gym.scripts.evaluate"]
# a hand-built game: no tags, 5 s of capture wins; a policy that stands still half the time and otherwise moves in a
# random direction: its most likely action (stand still) stalls, its sampled plays wander and mostly stall too
EASY = {"engagement": {"tag": {"enabled": False}, "capture": {"time_to_capture": 5.0}}}


def wanderer(seed: int = 0):
    rng = np.random.default_rng(seed)

    def propose(obs: np.ndarray) -> np.ndarray:
        moves = rng.integers(1, 9, size=(obs.shape[0], 4))
        return np.where(rng.random(moves.shape) < 0.5, moves, A_STOP)

    return propose


def test_the_lookahead_wins_a_hand_built_game_its_policys_greedy_play_loses() -> None:
    seeds = held_out_seeds(3)
    greedy = evaluate_mission(lambda obs: np.full((obs.shape[0], 4), A_STOP), 3, seeds, env_kwargs=EASY)
    sampled = evaluate_mission(wanderer(1), 3, seeds, env_kwargs=EASY)
    assert greedy.win_rate == 0.0 and sampled.win_rate < 1.0
    games = lookahead_results(
        wanderer(), seeds, EASY, LookaheadBudget(every=10, candidates=6, copies=2, horizon=20), threads=2
    )
    assert [g["outcome"] for g in games] == ["captured"] * 3  # every game, where the policy's greedy play won none


def test_the_lookaheads_won_games_are_recorded_as_restart_states(tmp_path: Path) -> None:
    """``record_states.py --policy lookahead``: the lookahead's games, a state at each of its decisions from the
    game's start, only the games it won; the first state of each is the game as its seed starts it."""
    seeds = held_out_seeds(3)
    budget = LookaheadBudget(every=10, candidates=6, copies=2, horizon=20)
    out = tmp_path / "lookahead.npz"
    saved = record_lookahead_states(wanderer(), out, EASY, seeds, budget, threads=2)
    states = StartStates(out)
    with np.load(out) as data:
        games, to_end = data["game"], data["to_end"]
    assert saved == to_end.size and sorted(set(games.tolist())) == [0, 1, 2]  # the lookahead wins all three
    fresh = MissionVecEnv(3, **EASY)
    fresh.seed_envs(seeds)
    fresh.reset()
    for g in range(3):
        ends = to_end[games == g]
        assert (np.diff(ends) == -budget.every).all() and ends[-1] <= budget.every  # every decision to the last
        first = np.flatnonzero(games == g)[0]
        assert all(np.array_equal(states.arrays[name][first], getattr(fresh.core, name)[g]) for name in states.arrays)


def test_only_the_games_the_policy_loses_are_searched_for_states() -> None:
    """``record_states.py --lost-only``: the seeds whose game the policy's own play loses, in their order; a policy
    that loses none of them is refused."""
    seeds = held_out_seeds(8)
    played = evaluate_mission(wanderer(1), 8, seeds, env_kwargs=EASY)
    lost = lost_seeds(wanderer(1), seeds, EASY, threads=2)
    assert lost == [seed for seed, won in zip(seeds, played.won) if not won] and 0 < len(lost) < 8
    greedy = GreedyPolicy(MissionVecEnv(1, **EASY).core.config)  # heads for the zone: wins every game of EASY
    with pytest.raises(ConfigError, match="won all 8 games"):
        lost_seeds(greedy, seeds, EASY)


def test_the_lookahead_does_not_depend_on_the_order_of_its_candidates() -> None:
    venv = MissionVecEnv(3, **EASY)
    venv.seed_envs(held_out_seeds(3))
    venv.reset()
    budget = LookaheadBudget(every=5, candidates=5, copies=3, horizon=10)
    prefixes = Lookahead(wanderer(), budget, seed=3).prefixes(venv.core, [0, 1, 2])
    order = np.array([3, 0, 4, 2, 1])
    wins, returns = Lookahead(wanderer(7), budget, seed=3).scores(venv.core, [0, 1, 2], prefixes)
    wins_p, returns_p = Lookahead(wanderer(7), budget, seed=3).scores(venv.core, [0, 1, 2], prefixes[:, order])
    # each candidate scored on the same copies whatever its place (the proposals after a prefix differ by draw only)
    assert returns.std() > 0
    chosen = Lookahead(wanderer(), budget).choose(prefixes, wins, returns)
    chosen_p = Lookahead(wanderer(), budget).choose(prefixes[:, order], wins[:, order], returns[:, order])
    assert np.array_equal(chosen, chosen_p)
    scripted = Lookahead(lambda obs: np.full((obs.shape[0], 4), A_STOP), budget, seed=3)  # nothing drawn after the prefix
    a = scripted.scores(venv.core, [0, 1, 2], prefixes)
    b = scripted.__class__(scripted.propose, budget, seed=3).scores(venv.core, [0, 1, 2], prefixes[:, order])
    assert np.array_equal(a[0][:, order], b[0]) and np.allclose(a[1][:, order], b[1])
    assert wins_p.shape == wins.shape and returns_p.shape == returns.shape


def test_states_saved_from_a_won_game_restore_to_the_same_game_to_the_bit() -> None:
    """A game the greedy baseline wins, saved at step 30 and restored into another env of another core: the same
    actions replay it to the same won end, every array to the bit."""
    venv = MissionVecEnv(1, **EASY)
    venv.seed_envs(held_out_seeds(1))
    venv.reset()
    core = venv.core
    greedy = GreedyPolicy(core.config)
    actions, saved = [], None
    while core.outcome(0) is None:
        if len(actions) == 30:
            saved = core.save_state(0)
        actions.append(greedy(core.obs).astype(np.int64))
        core.step(actions[-1])
    assert core.outcome(0) == "captured" and saved is not None
    end = {name: getattr(core, name)[0].copy() for name in STATE_ARRAYS}
    other = MissionCore(core.config, n_envs=3)
    other.restore_state(2, saved)
    for a in actions[30:]:
        other.step(np.repeat(a, 3, axis=0))
    assert other.outcome(2) == "captured"
    for name in STATE_ARRAYS:
        assert np.array_equal(getattr(other, name)[2], end[name]), name


def test_situation_seeds_are_held_out_games_of_that_situation() -> None:
    seeds = situation_seeds("guard_objective+guard_objective", 12)
    assert seeds == sorted(seeds) and seeds[0] >= 900_000_000
    venv = MissionVecEnv(12)
    venv.seed_envs(seeds)
    venv.reset()
    assert all(sorted(venv.core.defender_modes(i)) == ["guard_objective"] * 2 for i in range(12))
    assert situation_seeds("patrol+guard_objective", 5) == situation_seeds("guard_objective+patrol", 5)


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    runs = tmp_path_factory.mktemp("runs")
    cmd = [sys.executable, "-m", "mission_gym.scripts.train_ppo", "--preset", "quick", "--timesteps", "1024",
           "--runs-dir", str(runs), "--run-name", "q", "--no-progress"]  # fmt: skip
    proc = warm_cli.run(cmd)
    assert proc.returncode == 0, proc.stderr
    return runs / "q"


def _evaluate(args: list[str], tmp_path: Path) -> dict:
    out = tmp_path / "r.json"
    proc = warm_cli.run([*EVALUATE, *args, "--json", str(out)], timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text())


def test_best_of_1_with_its_deterministic_play_equals_evaluate(model: Path, tmp_path: Path) -> None:
    plain = _evaluate([str(model), "--episodes", "40"], tmp_path)
    best = _evaluate([str(model), "--episodes", "40", "--best-of", "1"], tmp_path)
    table = best.pop("best_of")
    assert best == plain  # the deterministic play is evaluate's, to the digit
    assert table["plays"] == 1 and table["rows"]["all"]["deterministic"] == plain["win_rate"]
    assert table["rows"]["all"]["some_play"] == table["rows"]["all"]["sampled"]  # one play: some play is that play
    assert sum(row["games"] for key, row in table["rows"].items() if key != "all") == 40


def test_one_situation_and_the_lookahead_from_the_command_line(model: Path, tmp_path: Path) -> None:
    one = _evaluate([str(model), "--episodes", "6", "--defenders", "guard_objective+guard_objective"], tmp_path)
    assert set(one["by_defender_modes"]) == {"guard_objective+guard_objective"} and one["episodes"] == 6
    ahead = _evaluate([str(model), "--episodes", "2", "--policy", "lookahead", "--lookahead-budget", "10,2,2,10"], tmp_path)
    assert ahead["episodes"] == 2 and ahead["policy"].startswith("lookahead over")
    # the flag's earlier names still work, with a note
    out = tmp_path / "old.json"
    old = [*EVALUATE, str(model), "--episodes", "2", "--policy", "search", "--search-budget", "10,2,2,10", "--json", str(out)]
    proc = subprocess.run(old, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "--policy search is now --policy lookahead" in proc.stderr
    assert json.loads(out.read_text()) == ahead


@pytest.mark.parametrize(
    "args, message",
    [
        (["--defenders", "guard_objective+gard"], "'gard' is not a defender mode; valid: patrol, guard_objective, intercept"),
        (["--defenders", "patrol"], "names 1 defenders; this game has 2"),
        (["--policy", "lookahead", "--lookahead-budget", "20,8"], "lookahead budget '20,8' is not valid"),
        (["--env-kwargs", "scenario=no/such.yaml"], "--env-kwargs:"),
        (["--env-kwargs", "reward.win_bonus"], "--env-kwargs: expected key=value"),
        (["--best-of", "0"], "--best-of must be >= 1 (got 0)"),
    ],
)
def test_bad_ceiling_flags_are_one_line_and_exit_2(
    args: list[str], message: str, cli_here: Callable[..., tuple[int, str, str]]
) -> None:
    from mission_gym.scripts.evaluate import main

    code, _, err = cli_here(main, ["some-run", *args])
    assert code == 2 and message in err
    assert len([line for line in err.splitlines() if line.startswith("error")]) == 1


def test_a_scripted_baseline_plays_the_scenario_env_kwargs_name(tmp_path: Path) -> None:
    """``evaluate --policy greedy --env-kwargs scenario=FILE`` plays that scenario's held-out games (the games
    ``evaluate_mission`` plays with the greedy fleet of that scenario), not the default game."""
    scenario = Path(__file__).resolve().parent.parent / "docs" / "scenarios" / "two_drones.yaml"
    args = ["--policy", "greedy", "--episodes", "40", "--env-kwargs", f"scenario={scenario}"]
    got = _evaluate(args, tmp_path)
    kwargs = {"scenario": str(scenario)}
    greedy = GreedyPolicy(MissionVecEnv(1, **kwargs).core.config)
    want = evaluate_mission(greedy, 40, held_out_seeds(40), "greedy", kwargs)
    assert got["scenario"] == "two_drones" and got["won"] == want.won and got["returns"] == pytest.approx(want.returns)
    default = _evaluate(["--policy", "greedy", "--episodes", "40"], tmp_path)
    assert default["scenario"] == "default" and default["returns"] != got["returns"]


def test_a_model_plays_another_scenario_of_its_counts_and_refuses_one_of_others(model: Path, tmp_path: Path) -> None:
    """A model evaluated with ``--env-kwargs`` plays that game over its run's own settings when its unit counts are
    the model's (how an agent carries over to a moved map), and is refused in one line when they are not."""
    moved = tmp_path / "moved.yaml"
    moved.write_text("name: moved\nobjective: {x: 60.0, y: 150.0, radius: 15.0}\n")
    got = _evaluate([str(model), "--episodes", "8", "--env-kwargs", f"scenario={moved}"], tmp_path)
    assert got["scenario"] == "moved" and got["episodes"] == 8
    drones = Path(__file__).resolve().parent.parent / "docs" / "scenarios" / "two_drones.yaml"
    proc = subprocess.run([*EVALUATE, str(model), "--env-kwargs", f"scenario={drones}"], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "a model plays only scenarios with its unit counts" in proc.stderr
