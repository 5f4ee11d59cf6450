"""Population runs and ``--stop-at``: members side by side, cuts by a fresh evaluation, the winner's files in the
run directory, Ctrl-C and ``--resume`` of a population, and pausing a single run."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import warm_cli

from mission_gym.config.yaml_io import ConfigError, read_yaml
from mission_gym.hardware import available_cores
from mission_gym.launch.members import member_seeds, stages
from mission_gym.plan.presets import load_preset
from mission_gym.rundir.directory import RunDir
from mission_gym.rundir.evaluations import EvalRecord
from mission_gym.settings.overrides import apply_overrides

CLI = [sys.executable, "-m", "mission_gym.scripts.train_ppo"]
CARTPOLE = ["--preset", "quick", "--env", "CartPole-v1", "--vec-env", "dummy", "--n-envs", "2", "--n-steps", "64"]
CARTPOLE += ["--eval-freq", "0", "--save-freq", "128", "--no-progress"]


def run_cli(args: list[str], cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess:
    return warm_cli.run(CLI + args, cwd, timeout)


def test_population_config_is_checked():
    base = load_preset("quick")
    ok = apply_overrides(base, {"population": {"size": 4, "cuts": [{"at": 614, "keep": 2}, {"at": 1229, "keep": 1}]}})
    assert stages(ok) == [(614, 2), (1229, 1), (2048, 1)]
    assert stages(base) == [(2048, 1)] and base.population.size == 1
    with pytest.raises(ConfigError, match="keep 2 at 1,024 must be fewer than the 2 members"):
        apply_overrides(base, {"population": {"size": 2, "cuts": [{"at": 1024, "keep": 2}]}})
    with pytest.raises(ConfigError, match="'at' must increase"):
        apply_overrides(base, {"population": {"size": 4, "cuts": [{"at": 1229, "keep": 2}, {"at": 614, "keep": 1}]}})
    with pytest.raises(ConfigError, match="step 2,048 is not inside"):
        apply_overrides(base, {"population": {"size": 4, "cuts": [{"at": 2048, "keep": 2}]}})
    # clones fill the places of members cut: the population never grows
    cloned = {"size": 3, "cuts": [{"at": 614, "keep": 1, "clones": 2}, {"at": 1229, "keep": 2}]}
    assert stages(apply_overrides(base, {"population": cloned})) == [(614, 1), (1229, 2), (2048, 1)]
    with pytest.raises(ConfigError, match="keep 2 \\+ clones 2 at 1,024 must be at most the 3 members"):
        apply_overrides(base, {"population": {"size": 3, "cuts": [{"at": 1024, "keep": 2, "clones": 2}]}})
    with pytest.raises(ConfigError, match="clones"):
        apply_overrides(base, {"population": {"size": 3, "cuts": [{"at": 1024, "keep": 1, "clones": -1}]}})
    with pytest.raises(ConfigError, match="final_episodes"):
        apply_overrides(base, {"population": {"size": 2, "final_episodes": 0}})
    redraw = {"at": 1024, "keep": 1, "redraw_below": 0.5, "redraws": 2}
    assert apply_overrides(base, {"population": {"size": 2, "cuts": [redraw]}}).population.cuts[0].redraws == 2
    with pytest.raises(ConfigError, match="redraw_below and redraws go together"):
        apply_overrides(base, {"population": {"size": 2, "cuts": [{**redraw, "redraws": 0}]}})
    with pytest.raises(ConfigError, match="redraw_below"):
        apply_overrides(base, {"population": {"size": 2, "cuts": [{**redraw, "redraw_below": 1.5}]}})


def test_member_seeds_are_distinct_reproducible_and_start_with_the_run_seed():
    seeds = member_seeds(7, 5)
    assert seeds[0] == 7 and len(set(seeds)) == 5 and seeds == member_seeds(7, 5)
    assert member_seeds(8, 5)[1:] != seeds[1:] and member_seeds(7, 1) == [7]


def test_stop_at_pauses_and_resume_finishes(tmp_path):
    paused = run_cli([*CARTPOLE, "--timesteps", "512", "--run-name", "s", "--stop-at", "256"], tmp_path)
    assert paused.returncode == 0, paused.stderr
    run = RunDir(tmp_path / "runs" / "s")
    meta = json.loads((run / "metadata.json").read_text())
    step = run.latest_checkpoint()[0]
    assert meta["status"] == "paused" and 256 <= step < 512 and meta["timesteps"] == step
    assert not (run / "final_model.zip").exists() and "--resume" in paused.stdout
    done = run_cli(["--resume", "s", "--no-progress"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads((run / "metadata.json").read_text())["status"] == "finished"
    assert (run / "final_model.zip").is_file()


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--stop-at", "0"], "--stop-at 0"),
        (["--stop-at", "5000"], "below the run's 2,048"),
        (["--hyperparams", "population={size: 2}", "--stop-at", "100"], "--stop-at does not apply to a population"),
        (["--hyperparams", "population={size: 2, cuts: [{at: 1024, keep: 3}]}"], "must be fewer than the 2 members"),
        (["--hyperparams", "population={size: 2, episods: 3}"], "episods"),
        (["--hyperparams", "population={size: 2, variants: [{}, {gamma: 2}]}"], "population.variants"),
        (["--hyperparams", "population={size: 2, variants: [{}, {gama: 0.9}]}"], "variants.1.gama: unknown key"),
        (["--hyperparams", "population={size: 2, variants: [{seed: 4}]}"], "seed belong to the whole population"),
        (["--hyperparams", "population={size: 2, variants: [{}, {}, {}]}"], "3 variants for 2 members"),
    ],
)
def test_bad_population_and_stop_at_input(tmp_path, monkeypatch, capsys, args, expected):
    from mission_gym.scripts.train_ppo import main

    monkeypatch.chdir(tmp_path)
    code = main(["--preset", "quick", "--no-progress", *args])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert expected in err, err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_population_run_cuts_and_adopts_the_best_member(tmp_path):
    pop = "population={size: 3, cuts: [{at: 512, keep: 2}], episodes: 4}"
    proc = run_cli(
        ["--preset", "quick", "--timesteps", "1024", "--run-name", "p", "--hyperparams", pop, "--no-progress"], tmp_path
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = tmp_path / "runs" / "p"
    state = json.loads((run / "population.json").read_text())
    assert [m["name"] for m in state["members"]] == ["m0", "m1", "m2"] and state["members"][0]["seed"] == 0
    cut, end = state["cuts"]
    assert cut["step"] == 512 and len(cut["scores"]) == 3 and len(cut["kept"]) == 2
    best_at_cut = max(cut["scores"], key=lambda s: EvalRecord(**s["record"]).score())
    assert best_at_cut["member"] in cut["kept"]
    dropped = ({"m0", "m1", "m2"} - set(cut["kept"])).pop()
    assert not (run / "members" / dropped / "final_model.zip").exists()  # a member cut early is not finished
    assert {s["member"] for s in end["scores"]} == set(cut["kept"]) and len(end["scores"]) == 4  # best + final each
    best = end["best"]
    assert all(EvalRecord(**best["record"]).score() >= EvalRecord(**s["record"]).score() for s in end["scores"])
    # the run directory holds the winner's files, so every tool treats it like any other run
    winner = run / "members" / best["member"]
    assert (run / "best_model.zip").read_bytes() == (winner / best["model"]).read_bytes()
    for name in ("final_model.zip", "progress.csv", "evaluations.csv", "best_vecnormalize.pkl"):
        assert (run / name).read_bytes() == (winner / name).read_bytes(), name
    assert RunDir(run).checkpoints() and list((run / "tb").iterdir())
    meta = json.loads((run / "metadata.json").read_text())
    assert meta["status"] == "finished" and meta["winner"]["member"] == best["member"] and meta["timesteps"] >= 1024
    assert f"best: member {best['member']}'s" in proc.stdout
    from mission_gym.agents import load_agent

    agent = load_agent(run)  # the winner's safe files came with it
    assert agent.model_path == run / "best_model.zip" and agent.env_id == "MissionGym-v0" and agent.safe


def test_resume_plays_fresh_games_and_trains_the_same_twice(tmp_path):
    from stable_baselines3 import PPO

    from mission_gym.training.trainer import Trainer

    paused = run_cli([*CARTPOLE, "--timesteps", "1024", "--run-name", "a", "--seed", "5", "--stop-at", "256"], tmp_path)
    assert paused.returncode == 0, paused.stderr
    runs = tmp_path / "runs"
    step = RunDir(runs / "a").latest_checkpoint()[0]
    # PPO.load reseeds with the first session's seed; the resumed session must seed its own games
    trainer = Trainer.resume("a", runs_dir=runs, progress=False)
    try:
        assert trainer.model.get_env().unwrapped._seeds == [5 + step, 6 + step]
    finally:
        trainer.close()  # its env, and the run's lock: the resumes below are other processes
    shutil.copytree(runs / "a", runs / "b")
    shutil.copytree(runs / "a", runs / "c")
    config = (runs / "c" / "config.yaml").read_text()
    (runs / "c" / "config.yaml").write_text(config.replace("seed: 5\n", "seed: 6\n"))
    for name in "abc":
        done = run_cli(["--resume", name, "--no-progress"], tmp_path)
        assert done.returncode == 0, done.stderr
    weights = {n: PPO.load(runs / n / "final_model.zip").policy.state_dict() for n in "abc"}
    assert all(torch.equal(weights["a"][k], weights["b"][k]) for k in weights["a"])
    assert not all(torch.equal(weights["a"][k], weights["c"][k]) for k in weights["a"])  # another seed, other games


def test_population_clones_the_best_member_with_a_seed_of_its_own(tmp_path):
    from stable_baselines3 import PPO

    from mission_gym.config.yaml_io import read_yaml

    pop = "population={size: 3, cuts: [{at: 614, keep: 2}, {at: 1229, keep: 1, clones: 1}], episodes: 4, "
    pop += "final_episodes: 6, final_checkpoints: true, variants: [{}, {gamma: 0.95}]}"  # m0, m2 the run's; m1 its own
    proc = run_cli(
        ["--preset", "quick", "--timesteps", "2048", "--run-name", "p", "--hyperparams", pop, "--no-progress"], tmp_path
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run, members = tmp_path / "runs" / "p", tmp_path / "runs" / "p" / "members"
    state = json.loads((run / "population.json").read_text())
    first, second, end = state["cuts"]
    source = second["kept"][0]
    best_at_cut = max(second["scores"], key=lambda s: EvalRecord(**s["record"]).score())["member"]
    assert source == best_at_cut and second["clones"] == ["m3"] and second["kept"] == [source, "m3"]
    assert state["members"][3] == {"name": "m3", "seed": member_seeds(0, 4)[3], "clone_of": source, "step": 1229}
    assert f"{source} also carries on as m3" in proc.stdout
    # the members' recipes: variants[k % 2] over the run's configuration (quick's gamma is 0.99)
    recipes = {m: read_yaml(members / f"{m}.yaml") for m in ("m0", "m1", "m2", "m3")}
    assert [recipes[m]["gamma"] for m in ("m0", "m1", "m2")] == [0.99, 0.95, 0.99]
    assert read_yaml(members / "m1" / "config.yaml")["gamma"] == 0.95  # what the member trained with
    # the clone is its source's configuration (its variant too) with its own seed, started from the source's
    # checkpoint at the cut
    own, theirs = read_yaml(members / "m3" / "config.yaml"), read_yaml(members / source / "config.yaml")
    assert own["seed"] == member_seeds(0, 4)[3] and {**own, "seed": theirs["seed"]} == theirs
    assert {**recipes["m3"], "seed": recipes[source]["seed"]} == recipes[source]
    at_cut = RunDir(members / source).latest_checkpoint()  # the run ended: a checkpoint at or after the cut
    cut_ckpt = [p for s, p in RunDir(members / "m3").checkpoints() if s < at_cut[0]]
    assert cut_ckpt and cut_ckpt[-1].read_bytes() == (members / source / "checkpoints" / cut_ckpt[-1].name).read_bytes()
    meta = json.loads((members / "m3" / "metadata.json").read_text())
    assert meta["run"] == "m3" and meta["clone_of"] == {"member": source, "step": 1229} and meta["status"] == "finished"
    assert json.loads((members / "m3" / "lineage.json").read_text())["clone_of"]["member"] == source
    a = PPO.load(members / source / "final_model.zip").policy.state_dict()
    b = PPO.load(members / "m3" / "final_model.zip").policy.state_dict()
    assert not all(torch.equal(a[k], b[k]) for k in a)  # it played other games from the cut on
    # the end scores every survivor's best, final and kept checkpoints on final_episodes games
    assert {s["member"] for s in end["scores"]} == {source, "m3"}
    assert all(EvalRecord(**s["record"]).n_episodes == 6 for s in end["scores"])
    assert {s["model"] for s in end["scores"] if s["member"] == "m3"} >= {"best_model.zip", "final_model.zip"}
    assert any(s["model"].startswith("checkpoints/") for s in end["scores"])


def test_a_cut_whose_best_wins_too_little_draws_new_members_once(tmp_path):
    from mission_gym.config.yaml_io import read_yaml

    # 1,024 steps of quick win nothing: below redraw_below, so two members are drawn, trained to the cut, compared
    cut = "{at: 1024, keep: 1, redraw_below: 1.0, redraws: 2}"
    pop = f"population={{size: 2, cuts: [{cut}], episodes: 4, variants: [{{}}, {{gamma: 0.95}}]}}"
    args = ["--preset", "quick", "--timesteps", "2048", "--run-name", "p", "--hyperparams", pop, "--no-progress"]
    proc = run_cli(args, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run, members = tmp_path / "runs" / "p", tmp_path / "runs" / "p" / "members"
    state = json.loads((run / "population.json").read_text())
    first, end = state["cuts"]
    assert first["drawn"] == ["m2", "m3"] and "m2, m3 drawn (new seeds) train to it" in proc.stdout
    assert {s["member"] for s in first["scores"]} == {"m0", "m1", "m2", "m3"} and len(first["kept"]) == 1
    assert state["members"][2:] == [
        {"name": "m2", "seed": member_seeds(0, 4)[2], "drawn_at": 1024},
        {"name": "m3", "seed": member_seeds(0, 4)[3], "drawn_at": 1024},
    ]
    # their recipes by index as at the start (variants[k % 2]), trained from scratch with their own seeds
    assert [read_yaml(members / m / "config.yaml")["gamma"] for m in ("m2", "m3")] == [0.99, 0.95]
    assert read_yaml(members / "m3" / "config.yaml")["seed"] == member_seeds(0, 4)[3]
    assert not json.loads((members / "m2" / "metadata.json").read_text()).get("clone_of")
    assert RunDir(members / "m2").checkpoints()[0][0] <= 1024  # its own first checkpoint, not a copied one
    # a later session that finds the drawn members does not draw again
    (run / "final_model.zip").unlink()
    (run / "population.json").write_text(json.dumps({**state, "cuts": []}))
    again = run_cli(["--resume", "p", "--no-progress"], tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    resumed = json.loads((run / "population.json").read_text())
    assert len(resumed["members"]) == 4 and "drawn (new seeds)" not in again.stdout
    assert resumed["cuts"][0]["drawn"] == ["m2", "m3"] and len(resumed["cuts"][0]["scores"]) == 4


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity (Linux)")
def test_population_runs_no_more_members_at_once_than_cores(tmp_path):
    # on one core the members take turns: each one's session ends before the next one's starts
    pop = "population={size: 3, cuts: [], episodes: 2}"
    args = [*CARTPOLE, "--timesteps", "256", "--run-name", "p", "--hyperparams", pop]
    one_core = min(os.sched_getaffinity(0))
    proc = subprocess.run(
        CLI + args,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        preexec_fn=lambda: os.sched_setaffinity(0, {one_core}),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sessions = []
    for m in ("m0", "m1", "m2"):
        meta = json.loads((tmp_path / "runs" / "p" / "members" / m / "metadata.json").read_text())
        assert meta["status"] == "finished" and [s["threads"] for s in meta["sessions"]] == [1]
        sessions += meta["sessions"]
    spans = sorted((s["started"], s["ended"]) for s in sessions)
    assert len(spans) == 3 and all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans


def test_population_interrupt_then_resume(tmp_path, cli_here):
    pop = "population={size: 2, cuts: [{at: 3000, keep: 1}], episodes: 2}"
    args = [*CARTPOLE, "--timesteps", "4000", "--run-name", "p", "--hyperparams", pop]
    proc = subprocess.Popen(CLI + args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    members = [RunDir(tmp_path / "runs" / "p" / "members" / m) for m in ("m0", "m1")]
    deadline = time.monotonic() + 120
    while not all(m.checkpoints() for m in members):
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, "no member checkpoint in time"
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out + err
    for m in members:  # on a loaded machine a member may reach the cut (and pause there) before the signal
        status = json.loads((m / "metadata.json").read_text())["status"]
        assert status == "interrupted" or (status == "paused" and m.latest_checkpoint()[0] >= 3000), status
    run = tmp_path / "runs" / "p"
    assert json.loads((run / "metadata.json").read_text())["status"] == "interrupted"
    assert json.loads((run / "population.json").read_text())["cuts"] == []
    from mission_gym.scripts.train_ppo import main

    code, _, err = cli_here(main, ["--resume", "p", "--timesteps", "1000"])  # the cuts are fixed by the run's plan
    assert code == 2 and "population run" in err and err.count("\n") == 1
    done = run_cli(["--resume", "p", "--no-progress"], tmp_path)  # members carry on from their checkpoints
    assert done.returncode == 0, done.stdout + done.stderr
    cut, end = json.loads((run / "population.json").read_text())["cuts"]
    assert cut["step"] == 3000 and len(cut["kept"]) == 1 and end["best"]["member"] == cut["kept"][0]
    for m in members:
        sessions = json.loads((m / "metadata.json").read_text())["sessions"]
        assert len(sessions) >= 2 and sessions[1]["start_timesteps"] == sessions[0]["end_timesteps"]
    assert (run / "final_model.zip").is_file()


def test_population_runs_on_ray_with_the_same_plan(tmp_path):
    pytest.importorskip("ray")
    pop = "population={size: 2, cuts: [{at: 512, keep: 1}], episodes: 2}"
    args = ["--preset", "quick", "--timesteps", "1024", "--run-name", "r", "--hyperparams", pop, "--backend", "ray"]
    proc = run_cli([*args, "--no-progress"], tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("Started a local Ray instance") + proc.stderr.count("Started a local Ray instance") == 1
    run = tmp_path / "runs" / "r"
    cut, end = json.loads((run / "population.json").read_text())["cuts"]
    assert cut["step"] == 512 and len(cut["kept"]) == 1 and end["best"]["member"] == cut["kept"][0]
    assert (run / "best_model.zip").is_file() and json.loads((run / "metadata.json").read_text())["status"] == "finished"
    assert "submitted m0" in proc.stdout and "on Ray" in proc.stdout


def test_scoring_on_several_cores_plays_the_same_games_as_one(tmp_path):
    """A cut's scores are the same whether its models are played here or by worker processes side by side, and no
    worker outlives the scoring."""
    import psutil

    from mission_gym.launch.scoring import saved_timesteps, score_models, scoring_workers

    proc = run_cli(["--preset", "quick", "--timesteps", "1024", "--save-freq", "512", "--run-name", "r"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = RunDir(tmp_path / "runs" / "r")
    models = [(path, saved_timesteps(path)) for _, path in run.checkpoints()]
    assert [step for step, _ in run.checkpoints()] == [step for _, step in models] and len(models) >= 2
    env_kwargs = load_preset("quick").env_kwargs
    here = score_models(models, "MissionGym-v0", env_kwargs, 6, workers=1)
    before = {p.pid for p in psutil.Process().children(recursive=True)}  # e.g. earlier tests' forkservers
    side_by_side = score_models(models, "MissionGym-v0", env_kwargs, 6, workers=2)

    def played(records: list[EvalRecord]) -> list[dict]:
        return [{k: v for k, v in r.__dict__.items() if k != "eval_s"} for r in records]

    assert played(side_by_side) == played(here)
    assert [r.timesteps for r in here] == [step for _, step in models]
    left = [p.cmdline() for p in psutil.Process().children(recursive=True) if p.pid not in before]
    assert all("resource_tracker" in " ".join(c) for c in left), left  # multiprocessing's, ends with this process
    # one worker per core while each has enough games to pay for its start
    assert scoring_workers(32, 200, 16) == 10 and scoring_workers(8, 200, 2) == 2 and scoring_workers(2, 200, 16) == 1
    assert scoring_workers(6, 1000, 2) == 2 and scoring_workers(3, 4, 8) == 1


@pytest.mark.parametrize("learner", ["processes", "batched"])
def test_a_cut_can_give_the_members_that_carry_on_more_envs(tmp_path, learner, cli_here):
    """``cuts[].n_envs``: the kept member and its clone carry on from their checkpoints with 8 envs instead of 4 (a
    rollout twice as long each iteration), in either learner; a size that does not split into minibatches is refused."""
    pop = f"population={{size: 3, cuts: [{{at: 512, keep: 1, clones: 1, n_envs: 8}}], episodes: 4, learner: {learner}}}"
    proc = run_cli(["--preset", "quick", "--timesteps", "2048", "--run-name", "p", "--hyperparams", pop,
                    "--no-progress"], tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = tmp_path / "runs" / "p"
    cut = json.loads((run / "population.json").read_text())["cuts"][0]
    assert "carry on with 8 envs each" in proc.stdout
    for name in cut["kept"]:
        member = run / "members" / name
        assert read_yaml(member / "config.yaml")["n_envs"] == 8
        steps = [int(float(r["time/total_timesteps"])) for r in csv.DictReader(open(member / "progress.csv"))]
        assert steps[-1] - steps[-2] == 8 * 64  # a rollout of 8 envs x 64 steps after the cut
        assert json.loads((member / "metadata.json").read_text())["status"] == "finished"
    bad = "population={size: 3, cuts: [{at: 512, keep: 1, n_envs: 3}]}"
    from mission_gym.scripts.train_ppo import main

    code, _, err = cli_here(main, ["--preset", "quick", "--timesteps", "2048", "--run-name", "q", "--hyperparams", bad])
    assert code == 2 and "n_envs 3 x n_steps 64 is not a multiple of batch_size" in err


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="members are forked warm on Linux only")
def test_members_on_a_core_each_are_forked_warm_and_train_as_a_new_process_does(tmp_path):
    from stable_baselines3 import PPO

    pop = "population={size: 2, cuts: [], episodes: 2}"
    proc = run_cli(["--preset", "quick", "--timesteps", "512", "--run-name", "p", "--hyperparams", pop], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("forked warm) log") == 2, proc.stdout
    members = tmp_path / "runs" / "p" / "members"
    log = (members / "m0.log").read_text()
    assert log.startswith(f"$ {sys.executable} -m mission_gym.scripts.train_ppo --preset ") and "run " in log
    # the member's own configuration trained by a new process (not forked warm as run_cli's are): the same weights to
    # the bit
    solo_args = ["--preset", str(members / "m0.yaml"), "--run-name", "solo", "--num-threads", "1", "--no-progress"]
    solo = subprocess.run(CLI + solo_args, cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert solo.returncode == 0, solo.stdout + solo.stderr
    warm = PPO.load(members / "m0" / "final_model.zip").policy.state_dict()
    alone = PPO.load(tmp_path / "runs" / "solo" / "final_model.zip").policy.state_dict()
    assert all(torch.equal(warm[k], alone[k]) for k in warm)


@pytest.mark.skipif(not sys.platform.startswith("linux") or available_cores() < 2, reason="forked warm on 2 cores")
def test_members_of_two_cores_are_forked_warm_and_train_as_a_new_process_does(tmp_path):
    """Members of two cores each (their learner's torch threads and their env's numba threads set by the member, not
    by the thread caps of one its forkserver loaded torch with) train as a new process on two cores does."""
    from stable_baselines3 import PPO

    pop = "population={size: 2, cuts: [], episodes: 2}"
    args = ["--preset", "quick", "--timesteps", "512", "--run-name", "p", "--num-threads", "2", "--hyperparams", pop]
    proc = run_cli(args, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("cores 0,1, forked warm) log") == 2, proc.stdout
    members = tmp_path / "runs" / "p" / "members"
    solo_args = ["--preset", str(members / "m1.yaml"), "--run-name", "solo", "--num-threads", "2", "--no-progress"]
    solo = subprocess.run(CLI + solo_args, cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert solo.returncode == 0 and "(device cpu, 2 learner threads)" in solo.stdout, solo.stdout + solo.stderr
    warm = PPO.load(members / "m1" / "final_model.zip").policy.state_dict()
    alone = PPO.load(tmp_path / "runs" / "solo" / "final_model.zip").policy.state_dict()
    assert all(torch.equal(warm[k], alone[k]) for k in warm)
