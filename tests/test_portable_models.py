"""Model files that load anywhere: a saved model pickles nothing of Mission Gym (its phased schedules are saved as
SB3's own and rebuilt from config.yaml on --resume), and the run logs SB3's standard evaluation tags."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import warm_cli
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.utils import ConstantSchedule

from mission_gym.plan.presets import load_preset
from mission_gym.ppo.schedules import PhasedSchedule
from mission_gym.rundir.directory import RunDir
from mission_gym.settings.overrides import apply_overrides
from mission_gym.settings.resolve import resolve
from mission_gym.training.build import ppo_kwargs
from mission_gym.training.portable import foreign_references
from mission_gym.training.trainer import Trainer

PHASES = [{"start": 128, "learning_rate": 1e-4, "ent_coef": 0.01}]
SB3_EVAL_TAGS = ("eval/mean_reward", "eval/mean_ep_length", "eval/success_rate")


def phased(tmp_path: Path, env: str = "CartPole-v1", **changes: object) -> Trainer:
    base = load_preset("quick").model_copy(update={"env": env, "vec_env": "dummy" if env != "MissionGym-v0" else "native"})
    config = apply_overrides(
        base,
        {"n_envs": 2, "n_steps": 64, "timesteps": 256, "eval_freq": 128, "save_freq": 128, "eval_episodes": 2,
         "lr_schedule": "linear", "phases": PHASES, **changes},
    )  # fmt: skip
    return Trainer.create(config, runs_dir=tmp_path, run_name="p", progress=False)


def test_saved_models_hold_no_mission_gym_object_and_resume_rebuilds_the_phases(tmp_path: Path) -> None:
    trainer = phased(tmp_path)
    assert isinstance(trainer.model.lr_schedule.value_schedule, PhasedSchedule)
    assert trainer.train(stop_at=128).status == "paused"
    run = tmp_path / "p"
    ckpt = RunDir(run).latest_checkpoint()[1]
    assert foreign_references(ckpt) == []
    # what SB3 would have written without the swap: the phased schedule, a mission_gym pickle
    policy, kwargs = ppo_kwargs(resolve(trainer.config).config)
    raw = PPO(policy, make_vec_env("CartPole-v1", n_envs=2), **kwargs)
    raw.save(tmp_path / "raw.zip")
    assert "learning_rate" in foreign_references(tmp_path / "raw.zip")
    # the file's stand-in is SB3's ConstantSchedule at the value it had; a resume gets the phases back from config.yaml
    loaded = PPO.load(ckpt)
    assert isinstance(loaded.learning_rate, ConstantSchedule)
    resumed = Trainer.resume(run, tmp_path, progress=False)
    schedule = resumed.model.lr_schedule.value_schedule
    assert isinstance(schedule, PhasedSchedule) and schedule.values == (3e-4, 1e-4)
    assert resumed.model.lr_schedule(0.25) == pytest.approx(1e-4 * (1 - (0.75 - 0.5) / 0.5))
    result = resumed.train()
    assert result.status == "finished"
    saved = [*run.glob("*.zip"), *run.glob("checkpoints/*.zip")]
    assert len(saved) == 4  # best, final and the two checkpoints kept
    for path in saved:
        assert foreign_references(path) == [], path


def test_sb3_standard_eval_tags_in_progress_csv_and_tensorboard(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    trainer = phased(tmp_path, env="MissionGym-v0")
    trainer.train()
    with open(tmp_path / "p" / "progress.csv") as f:
        rows = list(csv.DictReader(f))
    with open(tmp_path / "p" / "evaluations.csv") as f:
        evaluated = [int(r["timesteps"]) for r in csv.DictReader(f)]
    assert evaluated == [128, 256]
    for tag in SB3_EVAL_TAGS:
        steps = [int(float(r["time/total_timesteps"])) for r in rows if r.get(tag)]
        assert steps == evaluated, tag  # each evaluation in the row of the step it was made at
    acc = EventAccumulator(str(tmp_path / "p" / "tb"))
    acc.Reload()
    assert set(SB3_EVAL_TAGS) <= set(acc.Tags()["scalars"])
    assert len(acc.Scalars("eval/mean_reward")) == 2


LOAD_WITHOUT_MISSION_GYM = textwrap.dedent(
    """
    import importlib.util, sys
    import gymnasium as gym
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    assert importlib.util.find_spec("mission_gym") is None, "mission_gym must not be installed here"
    model = PPO.load(sys.argv[1], device="cpu")
    venv = VecNormalize.load(sys.argv[2], DummyVecEnv([lambda: gym.make("Hopper-v5")]))
    venv.training = False
    obs = venv.reset()
    total = 0.0
    for _ in range(50):
        action, _ = model.predict(obs, deterministic=True)
        obs, reward, done, info = venv.step(action)
        total += float(venv.get_original_reward()[0])
    print("ok", model.num_timesteps, round(total, 3))
    """
)


@pytest.mark.slow
def test_mujoco_model_loads_with_plain_sb3_where_mission_gym_is_not_installed(tmp_path: Path) -> None:
    """A fresh virtual environment with only torch, stable-baselines3 and gymnasium[mujoco] (no mission_gym) loads a
    Hopper-v5 model trained by train_ppo and runs it in plain ``gym.make("Hopper-v5")``."""
    pytest.importorskip("mujoco")
    train = [
        sys.executable, "-m", "mission_gym.scripts.train_ppo", "--preset", "mujoco", "--env", "Hopper-v5", "--vec-env",
        "dummy", "--n-envs", "2", "--n-steps", "64", "--timesteps", "256", "--eval-freq", "0", "--save-freq", "0",
        "--eval-episodes", "1", "--run-name", "h", "--no-progress",
    ]  # fmt: skip
    proc = warm_cli.run(train, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    run = tmp_path / "runs" / "h"
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    pip = [str(py), "-m", "pip", "install", "--quiet"]
    torch_version = __import__("torch").__version__.split("+")[0]
    subprocess.run([*pip, f"torch=={torch_version}"], check=True, env=clean, timeout=900)
    subprocess.run([*pip, "stable-baselines3", "gymnasium[mujoco]"], check=True, env=clean, timeout=900)
    script = tmp_path / "load.py"
    script.write_text(LOAD_WITHOUT_MISSION_GYM)
    out = subprocess.run(
        [str(py), str(script), str(run / "final_model.zip"), str(run / "final_vecnormalize.pkl")],
        cwd=tmp_path, env=clean, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ok 256 ")


def test_only_the_optional_trunk_policy_needs_the_package_to_load(tmp_path: Path) -> None:
    """``policy: trunk`` keeps its features extractor class (Mission Gym's) in the model's policy_kwargs."""
    trainer = phased(tmp_path, policy="trunk", phases=[])
    trainer.train()
    assert foreign_references(tmp_path / "p" / "final_model.zip") == ["policy_kwargs"]
