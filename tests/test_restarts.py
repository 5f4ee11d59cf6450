"""Training games started from recorded states (mission_gym/extras/restarts.py, mission_gym/extras/starts.py): the
states of won games only, a restart that puts a recorded game in an env (in the env's own random stream), a run that
logs how far back its restarts start, states refused on another scenario, and a run that finds its own."""

from __future__ import annotations

import csv
import importlib.util
import json
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
import warm_cli
from together_fixtures import alone_then_together

from mission_gym.baselines import GreedyPolicy
from mission_gym.config import ConfigError
from mission_gym.envs import MissionVecEnv
from mission_gym.envs.mission_env import make_config
from mission_gym.extras.restarts import Restarter, found_seed
from mission_gym.extras.starts import RESTORED, StartStates, find_starts, record_states, worst_situation
from mission_gym.scripts.train_ppo import main as train_main
from mission_gym.settings.starts import FindStarts

CliHere = Callable[..., tuple[int, str, str]]

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
        assert set(data.files) == {"game", "to_end", "scenario", "fingerprint", *RESTORED}
        assert (
            str(data["scenario"]) == "default"
            and str(data["fingerprint"]) == make_config(None, None, None, {}).scenario_fingerprint()
        )
    assert (to_end > 0).all() and len(set(games.tolist())) < GAMES
    for g in set(games.tolist()):  # every 5 steps of each kept game, down to its last steps
        ends = np.sort(to_end[games == g])
        assert ends[0] <= 5 and (np.diff(ends) == 5).all()


def test_the_start_moves_back_through_every_game_and_a_shorter_one_restarts_from_its_first_state(
    states_file: Path,
) -> None:
    """``back`` steps before each game's end while the game is that long; a game shorter than that starts from its
    first recorded state, so every won game remains a start however far back the start has moved."""
    states = StartStates(states_file)
    with np.load(states_file) as data:
        games, to_end = data["game"], data["to_end"]
    lengths = {g: to_end[games == g].max() for g in set(games.tolist())}
    shortest, longest = min(lengths.values()), max(lengths.values())
    assert shortest < longest  # won games of several lengths
    for back in (10, int(shortest) + 10, int(longest)):
        got = states.near(back, 5)
        by_game = {int(g): to_end[got][games[got] == g] for g in set(games[got].tolist())}
        assert set(by_game) == set(lengths)  # every won game
        for g, ends in by_game.items():
            if lengths[g] > back - 5:  # long enough: its states in the window
                assert ((ends <= back) & (ends > back - 5)).all()
            else:  # shorter: its first state
                assert list(ends) == [lengths[g]]


def test_a_restart_puts_a_recorded_game_in_the_env_in_its_own_random_stream(states_file: Path) -> None:
    states = StartStates(states_file)
    env = MissionVecEnv(4, seed=0)
    env.reset()
    restarter = Restarter(env.num_envs, states, share=1.0, back=20, step=10, seed=0)
    own = env.core.rng.copy()
    restarter(np.array([1, 3]), env.core)
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
    proc = warm_cli.run([sys.executable, "-m", "mission_gym.scripts.train_ppo", "--preset", str(preset), "--run-name", "r",
                         "--no-progress"], cwd=tmp_path, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with open(tmp_path / "runs" / "r" / "progress.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("restarts/back")]
    assert rows and all(int(float(r["time/total_timesteps"])) <= 3000 + 16 * 64 for r in rows)


def test_a_list_of_restarts_restarts_from_each_in_its_span_and_none_between(tmp_path: Path, states_file: Path) -> None:
    """Two blocks in one session: the first to step 1,500, none between, the second (its own start, 50 steps back)
    from 2,500; the rollouts that start inside a span log its restarts, the others none."""
    preset = tmp_path / "p.yaml"
    preset.write_text(
        f"base: quick\ntimesteps: 4096\nn_envs: 16\nrestarts:\n"
        f"  - {{states: {states_file}, share: 1.0, back: 10, step: 10, advance_at: 0.01, until: 1500}}\n"
        f"  - {{states: {states_file}, share: 1.0, back: 50, step: 5, advance_at: 1.0, start: 2500, until: 4000}}\n"
    )
    proc = warm_cli.run([sys.executable, "-m", "mission_gym.scripts.train_ppo", "--preset", str(preset), "--run-name", "r",
                         "--no-progress"], cwd=tmp_path, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with open(tmp_path / "runs" / "r" / "progress.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    back = {int(float(r["time/total_timesteps"])) - 1024: r.get("restarts/back") for r in rows}  # by rollout start
    assert sorted(back) == [0, 1024, 2048, 3072] and back[2048] == "" and back[3072] == "50"
    assert back[0] in ("10", "20") and back[1024] in ("10", "20", "30")  # the first block's, moving back or not


def test_a_cut_whose_draws_would_restart_from_a_best_that_won_nothing_draws_without_restarts(tmp_path: Path) -> None:
    """A quick population's members win no game: the draws' restarts have no won game to start from, so the cut says
    so in one line and draws as it would without them."""
    pop = ("population={size: 2, cuts: [{at: 512, keep: 1, redraw_below: 0.5, redraws: 1, redraw_restarts: {share: 0.5}}], "
           "episodes: 4}")  # fmt: skip
    proc = warm_cli.run([sys.executable, "-m", "mission_gym.scripts.train_ppo", "--preset", "quick", "--timesteps", "1024",
                         "--run-name", "p", "--hyperparams", pop, "--no-progress"], cwd=tmp_path,
                        timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no restarts for the draws" in proc.stdout and "m2 drawn" in proc.stdout
    drawn = (tmp_path / "runs" / "p" / "members" / "m2.yaml").read_text()
    assert "restarts: null" in drawn


def test_record_states_tool_writes_a_states_file_or_says_in_one_line_why_not(tmp_path: Path, cli_here: CliHere) -> None:
    """tools/record_states.py on a quick run: a states file a run can name, or (a barely trained fleet wins no game)
    one line and nothing written; bad input is one line, exit 2 (its main in this process: no interpreter and torch
    to start for each)."""
    tool = Path(__file__).resolve().parent.parent / "tools" / "record_states.py"
    train = [sys.executable, "-m", "mission_gym.scripts.train_ppo", "--preset", "quick", "--timesteps", "1024", "--run-name",
             "q", "--no-progress"]  # fmt: skip
    assert warm_cli.run(train, cwd=tmp_path, timeout=300).returncode == 0
    out = tmp_path / "s.npz"
    proc = warm_cli.run([sys.executable, str(tool), "runs/q", str(out), "--games", "16"], cwd=tmp_path,
                        timeout=300)  # fmt: skip
    if proc.returncode == 0:
        assert StartStates(out).to_end.size > 0 and "states of won games written" in proc.stdout
    else:
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "won none of 16 games" in proc.stderr
        assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]  # nothing written, not even a temporary file
    spec = importlib.util.spec_from_file_location("record_states_tool", tool)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tool_main, threads = module.main, torch.get_num_threads()
    bad_search = (["runs/q", "s.npz", "--policy", "lookahead", "--lookahead-budget", "20,8"], "'20,8' is not valid")
    old_name = (["runs/q", "s.npz", "--policy", "search", "--search-budget", "20,8"], "'20,8' is not valid")
    lost_alone = (["runs/q", "s.npz", "--lost-only"], "--lost-only needs --policy lookahead")
    for bad, says in ((["runs/q", "s.txt"], "must end in .npz"), (["runs/q", "s.npz", "--games", "0"], "'0' is not"),
                      (["runs/none", "s.npz"], "none"), (["runs/q", "s.npz", "--defenders", "guard+patrol"], "'guard' is not"),
                      bad_search, old_name, lost_alone):  # fmt: skip
        code, _, err = cli_here(tool_main, bad)
        assert code == 2 and err.count("\n") == 1 and says in err, err
    torch.set_num_threads(threads)


def test_states_of_another_scenario_are_refused_in_one_line(tmp_path: Path, states_file: Path) -> None:
    """The greedy fleet's games have four attackers; a run with three cannot start from them."""
    three = "[{type: UGV_A, x: 20, y: 20, heading: 45}, {type: UGV_B, x: 20, y: 180, heading: -45}, " \
            "{type: UAV_A, x: 10, y: 100, heading: 0, altitude: 1}]"  # fmt: skip
    preset = tmp_path / "p.yaml"
    preset.write_text(f"base: quick\ntimesteps: 2048\nenv_kwargs: {{scenario: {{attackers: {three}}}}}\n"
                      f"restarts: {{states: {states_file}, until: 1000}}\n")  # fmt: skip
    proc = warm_cli.run([sys.executable, "-m", "mission_gym.scripts.train_ppo", "--preset", str(preset), "--run-name", "r",
                         "--no-progress"], cwd=tmp_path, timeout=300)  # fmt: skip
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stdout + proc.stderr
    assert "another scenario" in proc.stderr and "restarts: null" in proc.stderr
    assert not (tmp_path / "runs" / "r").exists()  # refused before the run directory is made


def test_runs_with_restarts_trained_together_follow_each_run_trained_alone(tmp_path: Path, states_file: Path) -> None:
    """The batched learner steps every member's games in one core and calls each member's restarts there, on its
    own games: each run's checkpoint is the one it reaches alone (to within float rounding)."""
    from mission_gym.plan.command import config_for_argv
    from mission_gym.vec.grouped import covered

    restarts = f"restarts={{states: {states_file}, share: 0.5, back: 10, step: 10, advance_at: 0.01, until: 2048}}"
    configs = [config_for_argv(["--preset", "quick", "--timesteps", "2048", "--seed", str(s), "--hyperparams", restarts])
               for s in (0, 5)]  # fmt: skip

    def stepped_as_one(trainers: list) -> None:
        assert covered([t.model.env for t in trainers])  # one core for both, the restarts included

    for diff, result in alone_then_together(configs, tmp_path, stop_at=1024, before=stepped_as_one):
        assert diff < 1e-5
        with open(result.run_dir / "progress.csv", newline="") as f:
            rates = [r["restarts/win_rate"] for r in csv.DictReader(f) if r.get("restarts/win_rate")]
        assert rates  # restarted games were played to their end in the batch


def test_a_member_drawn_at_a_cut_keeps_its_recipes_later_restarts() -> None:
    """The draw's block (the best's won games until the cut) replaces the recipe's earlier blocks; a block that
    begins at the cut or later stays, so a drawn member trains through it as the others do."""
    from mission_gym.launch.restart_stage import drawn_restarts

    draw = {"states": "best.npz", "until": 2_000_000}
    early = {"states": "starts/restarts0.npz", "until": 2_000_000}
    late = {"states": "search.npz", "start": 2_750_000, "until": 7_000_000}
    assert drawn_restarts(draw, [early, late], 2_000_000) == [draw, late]
    assert drawn_restarts(draw, early, 2_000_000) == draw
    assert drawn_restarts(draw, None, 2_000_000) == draw


def test_an_interrupted_run_resumes_with_the_late_restarts(tmp_path: Path, states_file: Path) -> None:
    """A run stopped before its second block's span resumes into it: the rollouts from there restart from the second
    block's states (its own start, 50 steps back)."""
    preset = tmp_path / "p.yaml"
    preset.write_text(
        f"base: quick\ntimesteps: 4096\nn_envs: 16\nsave_freq: 1024\nrestarts:\n"
        f"  - {{states: {states_file}, share: 1.0, back: 10, step: 10, until: 1000}}\n"
        f"  - {{states: {states_file}, share: 1.0, back: 50, step: 5, advance_at: 1.0, start: 2500, until: 4096}}\n"
    )
    train = [sys.executable, "-m", "mission_gym.scripts.train_ppo", "--no-progress"]
    first = warm_cli.run([*train, "--preset", str(preset), "--run-name", "r", "--stop-at", "2048"], cwd=tmp_path,
                         timeout=300)  # fmt: skip
    assert first.returncode == 0, first.stdout + first.stderr
    again = warm_cli.run([*train, "--resume", "r"], cwd=tmp_path, timeout=300)
    assert again.returncode == 0 and "resuming" in again.stdout, again.stdout + again.stderr
    with open(tmp_path / "runs" / "r" / "progress.csv", newline="") as f:
        back = {int(float(r["time/total_timesteps"])) - 1024: r.get("restarts/back") for r in csv.DictReader(f)}
    between = [back[t] for t in back if 1000 <= t < 2500]
    late = [back[t] for t in back if t >= 2500]  # only rollouts of the resumed session begin there
    assert between and set(between) == {""} and late and all(int(b) >= 50 for b in late), back


TRAIN = [sys.executable, "-m", "mission_gym.scripts.train_ppo", "--no-progress"]
# the default fleet and defenders with the objective, spawns and patrols moved: another scenario of the same counts
MOVED = ("{name: moved, objective: {x: 60.0, y: 150.0, radius: 15.0}, defenders: [{type: DEF_UGV, x: 60, y: 135, "
         "heading: 90, waypoints: [[50, 140], [70, 140], [70, 160], [50, 160]]}, {type: DEF_UGV, x: 60, y: 165, "
         "heading: -90, waypoints: [[45, 155], [75, 155], [75, 145], [45, 145]]}]}")  # fmt: skip


@pytest.mark.parametrize("said", [True, False])
def test_states_of_another_scenario_with_the_same_counts_or_of_none_said_are_refused(
    tmp_path: Path, states_file: Path, said: bool, cli_here: CliHere
) -> None:
    """The default game's states on a scenario with the default counts (the arrays fit, the games do not), or a file
    that does not say what it was recorded on (as before states files named theirs): one line naming both, exit 2,
    nothing written."""
    states = states_file
    if not said:
        with np.load(states_file) as data:
            old = {k: data[k] for k in data.files if k not in ("scenario", "fingerprint")}
        states = tmp_path / "old.npz"
        np.savez_compressed(states, **old)
    scenario = f"env_kwargs: {{scenario: {MOVED}}}\n" if said else ""
    preset = tmp_path / "p.yaml"
    preset.write_text(f"base: quick\ntimesteps: 2048\n{scenario}restarts: {{states: {states}, until: 1000}}\n")
    code, _, err = cli_here(train_main, ["--preset", str(preset), "--run-name", "r", "--no-progress"])
    assert code == 2 and err.count("\n") == 1, err
    if said:
        assert "recorded on scenario 'default'" in err and "this run's 'moved'" in err
    else:
        assert "does not say which scenario it was recorded on (this run plays 'default'" in err
    assert "restarts: null" in err and not (tmp_path / "runs").exists()  # refused before anything is made


def test_the_situation_a_policy_loses_most_is_found_on_its_own_games() -> None:
    """Greedy's own play ranked by situation: the situation it wins least; none for a game of one situation."""
    from mission_gym.evaluation import evaluate_mission
    from mission_gym.extras.starts import RANKED_SHARE, RANKING_GAMES, RECORD_SEED_BASE

    config, games = make_config(None, None, None, {}), RANKING_GAMES // 4  # a quarter still ranks all six situations
    worst = worst_situation(GreedyPolicy(config), {}, threads=2, games=games)
    seeds = [RECORD_SEED_BASE + k for k in range(games)]
    rows = evaluate_mission(GreedyPolicy(config), len(seeds), seeds).by_defender_modes
    ranked = {k: r["win_rate"] for k, r in rows.items() if r["episodes"] >= RANKED_SHARE * games}
    assert len(ranked) == 6 and worst == min(((k, v) for k, v in ranked.items()), key=lambda kv: kv[1])
    one = {"scenario": {"randomization": {"defender_modes": False}}}
    assert worst_situation(GreedyPolicy(make_config(None, None, None, one)), one, threads=2, games=games) is None


def test_a_recording_of_the_games_a_policy_loses_plays_only_those(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``situation: lost``: the lookahead plays the first record games greedy's own play loses, and wins some of them;
    a policy that loses none records an empty file (its block starts nothing)."""
    import mission_gym.extras.starts as starts
    from mission_gym.evaluation import evaluate_mission

    config = make_config(None, None, None, {})
    seeds = [starts.RECORD_SEED_BASE + k for k in range(starts.RANKING_GAMES)]
    lost = [s for s, won in zip(seeds, evaluate_mission(GreedyPolicy(config), len(seeds), seeds).won) if not won]
    played: list[list[int]] = []
    real = starts._record_lookahead
    recorded = lambda p, blocks, *a: played.extend(s for _, s in blocks) or real(p, blocks, *a)  # noqa: E731
    monkeypatch.setattr(starts, "_record_lookahead", recorded)
    find = FindStarts(policy="greedy", games=24, lookahead="10,2,2,20", situation="lost")
    (found,) = find_starts(find, tmp_path / "lost.npz", {}, 7, threads=2)
    assert played == [lost[:24]] and found.games == 24
    assert f"{len(lost):,} of {len(seeds):,} games lost by its own play" in found.line()
    with np.load(tmp_path / "lost.npz") as got:
        assert found.won == len(set(got["game"].tolist())) > 0

    class WinsAll:
        def predict(self, obs: np.ndarray, deterministic: bool = True) -> np.ndarray:
            raise AssertionError("not asked to play: it lost no game")

    monkeypatch.setattr(starts, "lost_seeds", lambda *a, **k: [])
    best = FindStarts(policy="best", games=4, situation="lost")
    (none,) = find_starts(best, [starts.Owner(WinsAll(), tmp_path / "none.npz")], {}, 7, threads=2)
    assert none.games == none.won == none.states == 0 and "no states" in none.line()
    with np.load(tmp_path / "none.npz") as empty:
        assert empty["game"].size == 0


def test_a_population_finds_its_own_starts_once_and_a_kill_while_it_records_resumes_to_the_same_states(
    tmp_path: Path,
) -> None:
    """A quick population whose restarts find their own states: the lookahead over greedy before any member trains,
    then over the cut's best member. Killed (-9) while it records the first, it leaves no states file; resumed, it
    records them again, the same as one recording of that seed, and records each block once; its members restart
    from them."""
    preset = tmp_path / "p.yaml"
    preset.write_text(
        "base: quick\ntimesteps: 2048\nn_envs: 16\npopulation: {size: 2, cuts: [{at: 1024, keep: 1}], episodes: 4}\n"
        "restarts:\n"
        "  - {find: {policy: greedy, games: 48, lookahead: '10,2,2,20'}, share: 1.0, back: 10, step: 10, "
        "advance_at: 0.01, until: 1024}\n"
        "  - {find: {policy: best, games: 4, lookahead: '5,2,2,10'}, share: 0.5, start: 1024, until: 2048}\n"
    )
    run = tmp_path / "runs" / "p"
    proc = subprocess.Popen([*TRAIN, "--preset", str(preset), "--run-name", "p"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    assert proc.stdout is not None
    for line in proc.stdout:
        if "finding the starts of restarts[0]" in line:
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait(timeout=60)
    assert not (run / "starts" / "restarts0.npz").exists()
    assert [p.name for p in (run / "starts").iterdir()] == [] if (run / "starts").exists() else True
    again = warm_cli.run([*TRAIN, "--resume", "p"], cwd=tmp_path, timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.count("finding the starts of restarts[0]") == 1
    assert again.stdout.count("finding the starts of restarts[1]") == 1
    found = json.loads((run / "population.json").read_text())["starts"]
    assert [(f["block"], f["step"]) for f in found] == [(0, 0), (1, 1024)] and found[0]["won"] > 0
    once = tmp_path / "once.npz"
    find = FindStarts(policy="greedy", games=48, lookahead="10,2,2,20")
    find_starts(find, once, {}, found_seed(0, 0), threads=2)  # the same games to the bit on any number of threads
    with np.load(run / "starts" / "restarts0.npz") as got, np.load(once) as want:
        assert got.files == want.files and all(np.array_equal(got[k], want[k]) for k in want.files)
    for member in ("m0", "m1"):  # each restarted from the run's own states (the hook was on: its start is logged)
        with open(run / "members" / member / "progress.csv", newline="") as f:
            assert any(r.get("restarts/back") for r in csv.DictReader(f))
    assert "Starts the run found" in (run / "dashboard.html").read_text()


@pytest.mark.parametrize(
    "restarts, message",
    [
        ("{find: {policy: best}, until: 1000}", "find with policy best needs a start after 0"),
        ("{share: 0.5, until: 1000}", "give each block its states (a file) or find"),
        ("{find: {policy: greedy, lookahead: '20,8'}, until: 1000}", "lookahead budget '20,8' is not valid"),
        ("{find: {policy: greedy, situation: hardest}, until: 1000}", "situation"),
        ("{find: {policy: best}, start: 1500, until: 2000}", "a population finds its starts at its start or at a cut"),
    ],
)
def test_bad_found_starts_are_one_line_and_exit_2(tmp_path: Path, restarts: str, message: str, cli_here: CliHere) -> None:
    preset = tmp_path / "p.yaml"
    preset.write_text(f"base: quick\npopulation: {{size: 2, cuts: [{{at: 1024, keep: 1}}]}}\nrestarts: {restarts}\n")
    code, _, err = cli_here(train_main, ["--preset", str(preset), "--run-name", "r", "--no-progress"])
    assert code == 2 and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "runs").exists()
