"""A population trained as one batched learner (``population.learner: batched``): the same plan, files and
interrupt-and-resume as members in processes of their own; its progress line counts the run's plan."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import warm_cli
from stable_baselines3 import PPO

from mission_gym.config.yaml_io import read_yaml
from mission_gym.launch.progress import planned_steps
from mission_gym.plan.presets import load_preset
from mission_gym.rundir.directory import RunDir
from mission_gym.settings.overrides import apply_overrides

CLI = [sys.executable, "-m", "mission_gym.scripts.train_ppo"]


def run_cli(args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return warm_cli.run(CLI + args, cwd, timeout)


def test_a_batched_population_cuts_clones_and_adopts_like_processes(tmp_path):
    pop = "population={size: 3, cuts: [{at: 512, keep: 1, clones: 1}], episodes: 4, learner: batched}"
    proc = run_cli(
        ["--preset", "quick", "--timesteps", "1024", "--run-name", "p", "--hyperparams", pop, "--no-progress"], tmp_path
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "one batched learner" in proc.stdout and "train together in this process" in proc.stdout
    run = tmp_path / "runs" / "p"
    cut, end = json.loads((run / "population.json").read_text())["cuts"]
    assert len(cut["scores"]) == 3 and len(cut["kept"]) == 2 and cut["clones"] == ["m3"]
    for name in cut["kept"]:  # each member is an ordinary run, its model SB3's own
        member = RunDir(run / "members" / name)
        meta = json.loads((member / "metadata.json").read_text())
        assert meta["status"] == "finished" and meta["timesteps"] >= 1024
        assert (member / "evaluations.csv").is_file() and member.checkpoints()
        PPO.load(member / "final_model.zip", device="cpu")
    assert (run / "best_model.zip").is_file() and json.loads((run / "metadata.json").read_text())["status"] == "finished"


def test_a_batched_population_stops_on_ctrl_c_and_resumes(tmp_path):
    pop = "population={size: 2, cuts: [{at: 8000, keep: 1}], episodes: 2, learner: batched}"
    args = ["--preset", "quick", "--timesteps", "16000", "--save-freq", "512", "--eval-freq", "0", "--run-name", "p"]
    proc = subprocess.Popen(CLI + [*args, "--hyperparams", pop, "--no-progress"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    members = [RunDir(tmp_path / "runs" / "p" / "members" / m) for m in ("m0", "m1")]
    deadline = time.monotonic() + 120
    while not all(m.checkpoints() for m in members):
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, "no member checkpoint in time"
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out + err
    for m in members:  # each member saved a checkpoint and released its lock
        assert json.loads((m / "metadata.json").read_text())["status"] == "interrupted"
        assert (m / ".lock").read_text() == ""
    done = run_cli(["--resume", "p", "--no-progress"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "runs" / "p" / "final_model.zip").is_file()


def test_the_plan_counts_every_stage_and_every_draw():
    config = apply_overrides(load_preset("cpu"), {})
    # 6 x 1.25M + 4 x 0.75M + 2 x 0.75M + 2 x 6.25M
    assert planned_steps(config, {"members": [], "cuts": []}) == 7_500_000 + 3_000_000 + 1_500_000 + 12_500_000
    drawn = {"members": [{"name": f"m{k}", "drawn_at": 2_000_000} for k in range(6, 10)], "cuts": []}
    assert planned_steps(config, drawn) == 24_500_000 + 4 * 2_000_000


def test_an_interrupted_gpu_preset_run_resumes_to_the_same_plan(tmp_path):
    """``heavy`` (its restarts from the starts it finds included) as one batched learner, as on a GPU, stopped by
    Ctrl-C once its first cut is recorded: the resumed run keeps that cut as it was and trains its plan on, the kept
    member and its clone to the end, nobody else."""
    pop = ("population={size: 3, cuts: [{at: 1024, keep: 1, clones: 1}], episodes: 4, final_episodes: 4, "
           "learner: batched}")  # fmt: skip
    args = ["--preset", "heavy", "--device", "cpu", "--timesteps", "16000", "--n-envs", "16", "--n-steps", "32",
            "--save-freq", "512", "--eval-freq", "0", "--run-name", "h", "--no-progress", "--hyperparams", pop,
            "restarts={find: {policy: greedy, games: 8, lookahead: '5,3,2,20'}, until: 1024}", "phases=[]",
            "curriculum=[]"]  # fmt: skip
    proc = subprocess.Popen(CLI + args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    state = tmp_path / "runs" / "h" / "population.json"
    deadline = time.monotonic() + 240
    while not (state.is_file() and json.loads(state.read_text())["cuts"]):
        assert proc.poll() is None, proc.stdout.read() + proc.stderr.read()
        assert time.monotonic() < deadline, "no cut in time"
        time.sleep(0.2)
    time.sleep(2)  # the kept member and its clone are training on
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out + err
    cut = json.loads(state.read_text())["cuts"][0]
    assert cut["kept"] == [cut["kept"][0], "m3"] and cut["clones"] == ["m3"]
    done = run_cli(["--resume", "h", "--no-progress"], tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    cuts = json.loads(state.read_text())["cuts"]
    assert cuts[0] == cut and len(cuts) == 2  # the cut stands; the end is the plan's second stage
    assert {s["member"] for s in cuts[1]["scores"]} == set(cut["kept"])  # the kept member and its clone, no one else
    for name in cut["kept"]:
        member = RunDir(tmp_path / "runs" / "h" / "members" / name)
        assert json.loads((member / "metadata.json").read_text())["status"] == "finished"
        found = read_yaml(member / "config.yaml")["restarts"]["states"]  # the run's own, found once before it trained
        assert found == str((tmp_path / "runs" / "h" / "starts" / "restarts0.npz").resolve()) and Path(found).is_file()
