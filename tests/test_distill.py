"""Distillation towards per-game teachers (mission_gym/ppo/distill.py): the KL term, the teacher each game gets from
the situation its env reports, a student that moves towards its teacher, and a student trained in the batched learner
as it trains alone."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import warm_cli
from stable_baselines3.common.logger import KVWriter, Logger
from together_fixtures import alone_then_together

from mission_gym import ENV_ID
from mission_gym.agents.loading import Agent
from mission_gym.config.yaml_io import read_yaml
from mission_gym.envs import MissionVecEnv
from mission_gym.ppo.distill import Distillation, DistillTargets, Teachers, all_situations, linear_coef, situation
from mission_gym.ppo.lean import LeanPPO
from mission_gym.ppo.maths import ActionHeads, kl_to_teacher
from mission_gym.rundir.directory import RunDir
from mission_gym.sim import layout as L
from mission_gym.sim.core import situation_codes
from mission_gym.vec.factory import make_vec_env


def test_the_kl_is_zero_for_the_teacher_itself_and_its_gradient_moves_the_student_towards_it() -> None:
    torch.manual_seed(0)
    teacher = torch.log_softmax(torch.randn(64, 4, 11) * 2, dim=-1)
    assert kl_to_teacher(teacher.clone(), teacher).abs().max().item() < 1e-6
    logits = torch.randn(64, 4, 11, requires_grad=True)
    before = kl_to_teacher(torch.log_softmax(logits, -1), teacher).mean()
    before.backward()
    with torch.no_grad():
        after = kl_to_teacher(torch.log_softmax(logits - 0.5 * logits.grad, -1), teacher).mean()
    assert 0 < after < before


def test_each_game_gets_the_teacher_of_its_defenders_modes() -> None:
    assert all_situations(2) == sorted(
        [
            "guard_objective+guard_objective",
            "guard_objective+intercept",
            "guard_objective+patrol",
            "intercept+intercept",
            "intercept+patrol",
            "patrol+patrol",
        ]  # fmt: skip
    )
    assert situation(["patrol", "guard_objective"]) == "guard_objective+patrol"
    teachers = Teachers(
        [], {"patrol+patrol": 0, "guard_objective+guard_objective": 1}, fallback=2, n_defenders=2, heads=ActionHeads(4, 11)
    )
    modes = np.array([[0, 0], [1, 1], [0, 1], [1, 0]])  # (patrol 0, guard 1, intercept 2) of four games' two defenders
    assert teachers.of_situations(situation_codes(modes)).tolist() == [0, 1, 2, 2]
    env = MissionVecEnv(16, seed=0)  # what the env reports is its games' modes, whatever the defenders' order
    env.reset()
    names = [situation(env.core.defender_modes(i)) for i in range(16)]
    codes = {
        situation([L.MODES[m] for m in c]): situation_codes(np.array([c]))[0]
        for c in [(a, b) for a in range(3) for b in range(3)]
    }
    assert env.situations().tolist() == [codes[n] for n in names]


def test_linear_coef_falls_to_zero() -> None:
    coef = linear_coef(2.0, 1000, 3000)
    assert coef(1000) == 2.0 and coef(2000) == 1.0 and coef(3000) == 0.0 and coef(10_000) == 0.0


def test_a_student_moves_towards_its_teacher() -> None:
    """With the KL's coefficient high, a student's KL to its teacher falls over a few updates (PPO's own loss
    alone does not aim there)."""
    torch.set_num_threads(1)

    def model(seed: int) -> LeanPPO:
        venv = make_vec_env("MissionGym-v0", 8, "native", seed=seed, normalize=True, normalize_reward=True)
        m = LeanPPO("MlpPolicy", venv, n_steps=32, batch_size=64, n_epochs=4, learning_rate=1e-3, seed=seed,
                    device="cpu", policy_kwargs={"net_arch": [32, 32]})  # fmt: skip
        return m

    teacher_model = model(1)
    with torch.no_grad():  # a teacher with decided preferences, the same in every state
        teacher_model.policy.action_net.weight.zero_()
        teacher_model.policy.action_net.bias.copy_(torch.randn(44, generator=torch.Generator().manual_seed(0)) * 3)
    teacher = Agent(teacher_model.policy, None, ENV_ID, {}, Path("teacher"))
    student = model(2)
    term = Distillation(
        Teachers([teacher], {}, fallback=0, n_defenders=2, heads=ActionHeads(4, 11)), linear_coef(5.0, 0, 10**9)
    )
    student.distillation = term
    kls: list[float] = []

    class Capture(KVWriter):
        def write(self, key_values, key_excluded, step=0):
            if "train/distill_kl" in key_values:
                kls.append(key_values["train/distill_kl"])

    student.set_logger(Logger(None, [Capture()]))
    student.learn(6 * 8 * 32, callback=DistillTargets(term))
    assert len(kls) == 5 and kls[-1] < 0.5 * kls[0]


CLI = [sys.executable, "-m", "mission_gym.scripts.train_ppo"]


def _cli(args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return warm_cli.run(CLI + args, cwd, timeout)


def _columns(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_a_student_in_the_batched_learner_follows_the_student_trained_alone(tmp_path) -> None:
    """A distillation's student trains in the batched learner (its teachers' KL in the batched update) as it trains
    alone, to float rounding, beside a member that is no student."""
    made = _cli(["--preset", "quick", "--seed", "7", "--timesteps", "1024", "--run-name", "t", "--no-progress"], tmp_path)
    assert made.returncode == 0, made.stderr
    from mission_gym.plan.command import config_for_argv

    teacher = str(tmp_path / "runs" / "t" / "final_model.zip")
    student = config_for_argv(["--preset", "quick", "--timesteps", "1024", "--seed", "0", "--hyperparams",
                               f"distill={{teachers: [{{model: {teacher}}}], kl_coef: 2.0, until: 1024}}"])  # fmt: skip
    plain = config_for_argv(["--preset", "quick", "--timesteps", "1024", "--seed", "5"])
    from mission_gym.ppo.batched.stack import batchable

    covered = []
    results = alone_then_together(
        [student, plain], tmp_path, stop_at=768, before=lambda ts: covered.extend(batchable(t.model) for t in ts)
    )
    assert covered == [None, None]  # both in the batch, the student too
    for diff, _ in results:
        assert diff < 1e-5
    rows = _columns(tmp_path / "together" / "m0" / "progress.csv")
    kls = [float(r["train/distill_kl"]) for r in rows if r.get("train/distill_kl")]
    assert kls and all(k > 0 for k in kls)  # the student did learn from its teacher in the batch


@pytest.mark.parametrize("learner", ["processes", "batched"])
def test_a_population_cut_makes_students_of_each_situations_best(tmp_path, learner):
    pop = (f"population={{size: 3, cuts: [{{at: 512, keep: 1, clones: 1, distill: {{steps: 512, min_games: 1}}}}], "
           f"episodes: 8, learner: {learner}}}")  # fmt: skip
    proc = _cli(
        ["--preset", "quick", "--timesteps", "1536", "--run-name", "d", "--hyperparams", pop, "--no-progress"], tmp_path
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = tmp_path / "runs" / "d"
    cut = json.loads((run / "population.json").read_text())["cuts"][0]
    assert cut["teachers"] and all(t["games"] >= 1 for t in cut["teachers"].values())
    assert "learn from each situation's teacher" in proc.stdout
    for name in cut["kept"]:  # the kept member and its clone: students, the KL logged while its weight is above 0
        config = read_yaml(run / "members" / name / "config.yaml")
        assert config["distill"]["start"] == 512 and config["distill"]["until"] == 1024
        assert {k for t in config["distill"]["teachers"] for k in t["situations"]} == set(cut["teachers"])
        rows = [r for r in _columns(run / "members" / name / "progress.csv") if r.get("train/distill_coef")]
        coefs = [float(r["train/distill_coef"]) for r in rows]
        assert coefs and coefs[0] > 0 and coefs == sorted(coefs, reverse=True)  # falling to 0 by step 1,024
        assert all(int(float(r["time/total_timesteps"])) <= 1024 + 256 for r in rows)
    assert (run / "final_model.zip").is_file()


def test_a_student_of_two_runs_gets_each_situation_measured_and_resumes_after_sigkill(tmp_path, monkeypatch):
    for seed in (0, 1):
        made = _cli(["--preset", "quick", "--seed", str(seed), "--run-name", f"t{seed}", "--no-progress"], tmp_path)
        assert made.returncode == 0, made.stderr
    teachers = [{"model": str(tmp_path / "runs" / f"t{s}" / "final_model.zip")} for s in (0, 1)]
    preset = {"base": "quick", "timesteps": 8192, "save_freq": 256, "eval_freq": 0,
              "distill": {"teachers": teachers, "kl_coef": 1.0, "until": 6000}}  # fmt: skip
    (tmp_path / "student.yaml").write_text(json.dumps(preset))
    args = ["--preset", str(tmp_path / "student.yaml"), "--run-name", "s", "--no-progress"]
    proc = subprocess.Popen(CLI + args, cwd=tmp_path, env={**os.environ, "MISSION_GYM_ASSIGN_GAMES": "24"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    run = RunDir(tmp_path / "runs" / "s")
    deadline = time.monotonic() + 240
    while not run.checkpoints() or run.latest_checkpoint()[0] < 1024:
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, "no checkpoint in time"
        time.sleep(0.2)
    proc.kill()  # SIGKILL: no chance to save; the newest checkpoint is what a resume has
    proc.communicate(timeout=60)
    killed_at = run.latest_checkpoint()[0]
    config = read_yaml(run / "config.yaml")
    listed = [k for t in config["distill"]["teachers"] for k in t["situations"]]
    assert listed and len(listed) == len(set(listed))  # each measured situation has one teacher
    done = _cli(["--resume", "s", "--no-progress"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = _columns(run / "progress.csv")
    kl_steps = [int(float(r["time/total_timesteps"])) for r in rows if r.get("train/distill_kl")]
    assert killed_at < 6000 and max(kl_steps) > killed_at  # the KL went on after the resume
    assert (run / "final_model.zip").is_file()
