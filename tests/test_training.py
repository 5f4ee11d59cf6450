"""The trainer's library: presets, batch sizing, vec-env kinds, run files, load_agent, branching, MuJoCo.

Tiny networks and a few hundred steps; the command line (signals, resume, bad input) is in test_train_cli.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from stable_baselines3.common.vec_env import VecMonitor, VecNormalize

from mission_gym.agents import load_agent
from mission_gym.config import ConfigError, read_yaml
from mission_gym.plan.presets import AutoPreset, load_preset, preset_names, presets_dir
from mission_gym.rundir.directory import RunDir, saved_with, vecnormalize_path
from mission_gym.settings.minibatch import check_batch_size, choose_batch_size, divisors
from mission_gym.settings.overrides import apply_overrides, split_hyperparams
from mission_gym.settings.schema import Phase, TrainConfig
from mission_gym.training.trainer import Trainer
from mission_gym.vec.factory import ENV_ID as MISSION_ENV_ID
from mission_gym.vec.factory import make_vec_env

SHIPPED = ["acrobot", "ant", "atari", "auto", "beast", "cartpole", "cpu", "discrete", "fast", "halfcheetah", "heavy",
           "hopper", "humanoid", "mission", "mujoco", "pendulum", "pixels", "quick", "walker2d"]  # fmt: skip
GPU_MEMBERS = {"fast": 8, "heavy": 16, "beast": 32}  # the cpu recipe scaled: two members per core of the tier
SHORT_MISSION = {"world": {"physics": {"episode_seconds": 2.5}}}  # 10-step episodes


def tiny(**changes: object) -> TrainConfig:
    """A CartPole configuration that trains in a second or two."""
    base = load_preset("quick").model_copy(update={"env": "CartPole-v1", "vec_env": "dummy", "n_envs": 2, "n_steps": 64})
    return apply_overrides(base, {"timesteps": 256, "eval_freq": 128, "save_freq": 128, "eval_episodes": 2, **changes})


# --- presets ----------------------------------------------------------------------------------------------------
def test_shipped_presets_are_all_there():
    assert preset_names() == SHIPPED
    assert (Path(__file__).parents[1] / "presets" / "fast.yaml").is_file()  # the top-level link


@pytest.mark.parametrize("name", SHIPPED)
def test_every_preset_loads_and_validates(name):
    config = load_preset(name)
    assert isinstance(config, TrainConfig)
    batch = choose_batch_size(config.rollout, config.target_batch, config.min_batch)
    assert config.rollout % batch == 0


@pytest.mark.parametrize("name", sorted(GPU_MEMBERS))
def test_gpu_presets_are_the_cpu_recipe_with_their_members(name):
    gpu, cpu = load_preset(name), load_preset("cpu")
    assert gpu.population.size == GPU_MEMBERS[name] and gpu.device == "auto" and cpu.device == "cpu"
    # everything a member learns with is the cpu preset's: its members train what the cpu preset's do
    same = {"preset", "description", "device", "population", "tier"}
    assert gpu.model_dump(exclude=same) == cpu.model_dump(exclude=same)
    assert gpu.population.model_dump(exclude={"size"}) == cpu.population.model_dump(exclude={"size"})


@pytest.mark.parametrize(
    "name, env, zoo",
    [
        ("hopper", "Hopper-v5", None),  # the mujoco recipe, batched
        ("walker2d", "Walker2d-v5", None),  # hopper's form
        ("ant", "Ant-v5", None),  # hopper's form
        ("halfcheetah", "HalfCheetah-v5", (0.98, 0.92, 0.1, 0.000401762, 0.58096, 0.8)),
    ],
)
def test_mujoco_presets_batch_their_task_on_the_native_env(name, env, zoo):
    """hopper, walker2d, ant, halfcheetah: 1M steps of their task (halfcheetah 2M), 8 envs on the native MuJoCo env;
    halfcheetah carries rl-baselines3-zoo's values for its task (gamma, lambda, clip, entropy, value, gradient norm)."""
    config = load_preset(name)
    steps = 2_000_000 if name == "halfcheetah" else 1_000_000
    assert (config.env, config.timesteps, config.n_envs, config.vec_env) == (env, steps, 8, "native")
    assert config.normalize and config.normalize_reward and config.device == "cpu"
    if zoo is None:
        mujoco = load_preset("mujoco")
        assert config.rollout == mujoco.rollout and config.learning_rate == mujoco.learning_rate
    else:
        got = (config.gamma, config.gae_lambda, config.clip_range, config.ent_coef, config.vf_coef, config.max_grad_norm)
        assert got == zoo
        assert config.hyperparams["policy_kwargs"] == {"log_std_init": -2} and not config.ortho_init


def test_a_preset_may_start_from_another(tmp_path):
    (tmp_path / "mine.yaml").write_text("base: cpu\nseed: 7\npopulation: {size: 10}\n")
    mine = load_preset(tmp_path / "mine.yaml")
    assert mine.seed == 7 and mine.population.size == 10 and mine.population.cuts == load_preset("cpu").population.cuts
    (tmp_path / "loop.yaml").write_text("base: loop\n")
    with pytest.raises(ConfigError, match="start from each other"):
        load_preset(tmp_path / "loop.yaml")


def test_auto_resolves_by_hardware(monkeypatch):
    from mission_gym.hardware import Hardware
    from mission_gym.plan import presets as auto

    rules = AutoPreset.model_validate(read_yaml(presets_dir() / "auto.yaml"))
    monkeypatch.setattr(auto, "detect_hardware", lambda: Hardware(None, None, 2, 16.0))
    assert load_preset("auto").preset == rules.cpu
    monkeypatch.setattr(auto, "detect_hardware", lambda: Hardware(24.0, "fake", 16, 64.0))
    assert load_preset("auto").preset in rules.gpu


@pytest.mark.parametrize(
    "text, key",
    [
        ("n_envs: 4\nn_stepz: 8\n", "n_stepz: unknown key"),
        ("n_envs: four\n", "n_envs"),
        ("n_envs: 0\n", "n_envs"),
        ("learning_rate: -3e-4\n", "learning_rate"),
        ("gamma: 1.5\n", "gamma"),
        ("network_arch: '512,x'\n", "network_arch"),
        ("device: tpu\n", "device"),
        ("normalize: false\nnormalize_reward: true\n", "normalize_reward"),
    ],
)
def test_bad_preset_names_file_and_key(tmp_path, text, key):
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_preset(path)
    assert str(path) in str(err.value) and key in str(err.value)


def test_user_preset_and_yaml_floats(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("learning_rate: 3e-4\nnetwork_arch: '32, 32'\nn_envs: 2\n")
    config = load_preset(path)
    assert config.learning_rate == pytest.approx(3e-4) and config.network_arch == [32, 32]
    assert config.preset == str(path)


def test_unknown_preset_suggests():
    with pytest.raises(ConfigError, match="did you mean 'heavy'"):
        load_preset("heavvy")


def test_hyperparams_split_and_suggest():
    fields, extra = split_hyperparams({"learning_rate": 1e-4, "normalize_advantage": False})
    assert fields == {"learning_rate": 1e-4} and extra == {"normalize_advantage": False}
    with pytest.raises(ConfigError, match="did you mean 'ent_coef'"):
        split_hyperparams({"ent_coeff": 0.1})


# --- batch size -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "rollout, target, floor, expected",
    [
        (4096, 2048, 64, 2048),
        (4096, 3000, 64, 2048),
        (1000, 300, 64, 250),
        (96, 4096, 64, 96),
        (4099, 2048, 64, 4099),
        (32, 16, 64, 32),
    ],
)
def test_choose_batch_size(rollout, target, floor, expected):
    got = choose_batch_size(rollout, target, floor)
    assert got == expected and rollout % got == 0


def test_divisors():
    assert divisors(12) == [1, 2, 3, 4, 6, 12]


def test_explicit_batch_size_lists_nearest_divisors():
    assert check_batch_size(512, 4096, 16, 256) == 512
    with pytest.raises(ConfigError) as err:
        check_batch_size(1000, 4096, 16, 256)
    assert "nearest valid: 256, 512, 1024, 2048 (or auto)" in str(err.value) and "4096" in str(err.value)


# --- vec envs ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind, env_id", [("native", "MissionGym-v0"), ("dummy", "MissionGym-v0"), ("subproc", "CartPole-v1")])
def test_vec_env_kinds(kind, env_id):
    kwargs = SHORT_MISSION if env_id == "MissionGym-v0" else {}
    venv = make_vec_env(env_id, 2, kind, seed=3, env_kwargs=kwargs, normalize=True, normalize_reward=True)
    try:
        assert isinstance(venv, VecNormalize) and isinstance(venv.venv, VecMonitor)
        obs = venv.reset()
        assert obs.shape == (2, *venv.observation_space.shape)
        ended = []
        for _ in range(12):
            obs, rewards, dones, infos = venv.step(np.array([venv.action_space.sample() for _ in range(2)]))
            ended += [info for info, done in zip(infos, dones) if done]
        if env_id == "MissionGym-v0":
            assert ended and all("episode" in i and "episode_metrics" in i for i in ended)
    finally:
        venv.close()


def test_native_is_mission_gym_and_the_tasks_with_a_batched_env_only():
    from mission_gym.vec.factory import resolve_kind

    assert resolve_kind("auto", "MissionGym-v0", 16, 2) == "native"
    assert resolve_kind("auto", "MountainCar-v0", 8, 2) == "subproc"
    assert resolve_kind("auto", "MountainCar-v0", 8, 1) == "dummy"
    with pytest.raises(ConfigError, match="native"):
        resolve_kind("native", "MountainCar-v0", 4, 2)


# --- a run and its files ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory) -> Path:
    runs = tmp_path_factory.mktemp("runs")
    result = Trainer.create(tiny(), runs_dir=runs, run_name="cp", notes="first", progress=False).train()
    assert result.status == "finished" and result.exit_code == 0
    assert result.timesteps == 256 and result.fps > 0 and result.final_eval is not None
    return runs / "cp"


def test_a_callback_stopping_training_at_the_final_evaluation_leaves_the_run_finished(tmp_path):
    """A search prunes at any evaluation it is shown; at the final one there is no training left to stop."""
    from stable_baselines3.common.callbacks import BaseCallback

    from mission_gym.training.callbacks import StopTraining

    class StopAlways(BaseCallback):
        def _on_step(self) -> bool:
            raise StopTraining("stop")

    # eval_freq past the end: the only evaluation is the final one
    result = Trainer.create(tiny(eval_freq=1000), runs_dir=tmp_path, run_name="r", progress=False).train(
        callback_after_eval=StopAlways()
    )
    assert result.status == "finished" and result.final_eval is not None
    assert (tmp_path / "r" / "final_model.zip").is_file()


def test_run_directory_is_complete(cartpole_run):
    run = RunDir(cartpole_run)
    for name in ("config.yaml", "command.txt", "metadata.json", "lineage.json", "best_model.zip", "final_model.zip"):
        assert (cartpole_run / name).is_file(), name
    assert all(p.is_file() for p in saved_with(cartpole_run / "final_model.zip"))
    assert all(p.is_file() for p in saved_with(cartpole_run / "best_model.zip"))
    assert [s for s, _ in run.checkpoints()] == [128, 256]  # every 128 steps, newest 2 kept
    assert all(p.is_file() for _, ckpt in run.checkpoints() for p in saved_with(ckpt))
    # pruning took the files beside each checkpoint it deleted
    assert sorted(p.name for p in run.checkpoints_dir.iterdir()) == sorted(
        p.name for _, ckpt in run.checkpoints() for p in [ckpt, *saved_with(ckpt)]
    )
    assert list((cartpole_run / "tb").iterdir())
    config = TrainConfig.model_validate(read_yaml(cartpole_run / "config.yaml"))
    assert config.batch_size == 128 and config.vec_env == "dummy"  # resolved, not "auto"
    meta = json.loads((cartpole_run / "metadata.json").read_text())
    assert meta["status"] == "finished" and meta["timesteps"] == 256 and meta["versions"]["stable_baselines3"]
    lineage = json.loads((cartpole_run / "lineage.json").read_text())
    assert lineage["root"] == "cp" and lineage["parent"] is None and lineage["notes"] == "first"
    assert lineage["action_space"] == "Discrete(2)"


def test_progress_and_evaluations(cartpole_run):
    import csv

    rows = list(csv.DictReader(open(cartpole_run / "progress.csv")))
    steps = [int(float(r["time/total_timesteps"])) for r in rows if r["time/total_timesteps"]]
    assert steps == [128, 256]  # one row per step: the final update and evaluation join the last row
    assert rows[1]["time/rollout_s"] and rows[1]["time/train_s"] and rows[1]["rollout/ep_rew_mean"]
    assert rows[1]["eval/mean_return"] and rows[0]["time/train_s"]  # a row holds the update made of its rollout
    evals = list(csv.DictReader(open(cartpole_run / "evaluations.csv")))
    assert [int(r["timesteps"]) for r in evals] == [128, 256]
    assert {"timesteps", "win_rate", "mean_return", "std_return", "mean_ep_length", "n_episodes"} <= set(evals[0])


@pytest.mark.parametrize("which", ["name", "dir", "final", "checkpoint"])
def test_load_agent(cartpole_run, which):
    src = {
        "name": "cp",
        "dir": str(cartpole_run),
        "final": str(cartpole_run / "final_model.zip"),
        "checkpoint": str(cartpole_run / "checkpoints" / "ckpt_128_steps.zip"),
    }[which]
    agent = load_agent(src, runs_dir=cartpole_run.parent)
    assert agent.env_id == "CartPole-v1" and agent.env_kwargs == {} and agent.stats is not None and agent.safe
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    assert agent.predict(obs).shape == (64,)
    # the same actions as SB3's own loading of the zip and the pickled VecNormalize beside it
    import pickle

    from stable_baselines3 import PPO

    with open(vecnormalize_path(agent.model_path), "rb") as f:
        vecnorm = pickle.load(f)
    np.testing.assert_array_equal(agent.normalize(obs), vecnorm.normalize_obs(obs))
    raw = PPO.load(agent.model_path).predict(vecnorm.normalize_obs(obs), deterministic=True)[0]
    np.testing.assert_array_equal(agent.predict(obs), raw)


def test_load_agent_unknown_run(cartpole_run):
    with pytest.raises(FileNotFoundError, match="did you mean 'cp'"):
        load_agent("cpx", runs_dir=cartpole_run.parent)


def test_branch_applies_new_hyperparameters(cartpole_run, tmp_path):
    parent = cartpole_run / "final_model.zip"
    config = tiny(learning_rate=1e-4, clip_range=0.1, ent_coef=0.05, n_epochs=3, gamma=0.95, eval_freq=0, save_freq=0)
    trainer = Trainer.create(config, runs_dir=tmp_path, parent_checkpoint=parent, branch_name="low-lr", progress=False)
    model = trainer.model
    assert model.lr_schedule(1.0) == pytest.approx(1e-4) and model.clip_range(1.0) == pytest.approx(0.1)
    assert (model.ent_coef, model.n_epochs, model.gamma) == (0.05, 3, 0.95)
    from stable_baselines3 import PPO

    parent_model = PPO.load(parent)
    for key, value in parent_model.policy.state_dict().items():
        assert np.allclose(value.numpy(), model.policy.state_dict()[key].numpy()), key
    assert trainer.train().status == "finished"
    final = PPO.load(tmp_path / "low-lr" / "final_model.zip")
    assert final.lr_schedule(0.5) == pytest.approx(1e-4) and final.n_epochs == 3 and final.ent_coef == 0.05
    assert final.policy.optimizer.param_groups[0]["lr"] == pytest.approx(1e-4)
    lineage = json.loads((tmp_path / "low-lr" / "lineage.json").read_text())
    assert lineage["branch"] == "low-lr" and lineage["root"] == "cp" and lineage["parent"]["run"] == "cp"
    assert lineage["parent"]["timesteps"] == 256


def test_branch_refuses_other_spaces(cartpole_run, tmp_path):
    config = tiny(env="Acrobot-v1")
    with pytest.raises(ConfigError, match="observation space .*\\(4,\\).* vs .*\\(6,\\)"):
        Trainer.create(config, runs_dir=tmp_path, parent_checkpoint=cartpole_run / "final_model.zip", branch_name="b")
    assert not (tmp_path / "b").exists()


def test_branch_refuses_other_network(cartpole_run, tmp_path):
    with pytest.raises(ConfigError, match="network"):
        Trainer.create(
            tiny(network_arch=[32]), runs_dir=tmp_path, parent_checkpoint=cartpole_run / "best_model.zip", branch_name="b"
        )
    assert not (tmp_path / "b").exists()


def test_mission_metrics_are_logged_per_rollout(tmp_path):
    config = tiny(env="MissionGym-v0", vec_env="native", env_kwargs=SHORT_MISSION, eval_freq=0, save_freq=0, timesteps=128)
    result = Trainer.create(config, runs_dir=tmp_path, run_name="m", progress=False).train()
    assert result.final_eval is not None and result.final_eval.win_rate is not None
    import csv

    row = list(csv.DictReader(open(tmp_path / "m" / "progress.csv")))[0]
    # 2 envs x 64 steps of 10-step episodes: ~12 episodes ended in the rollout, all averaged
    assert float(row["mission/episodes"]) >= 10
    assert float(row["mission/outcome_timeout"]) + float(row["mission/outcome_stalled"]) + float(
        row["mission/outcome_captured"]
    ) + float(row["mission/outcome_all_disabled"]) == pytest.approx(1.0)
    assert "mission/win_rate" in row and "reward/time" in row and "mission/steps" in row
    assert float(row["mission/steps"]) <= 10


def test_mujoco_hopper_trains(tmp_path):
    pytest.importorskip("mujoco")
    config = tiny(env="Hopper-v5", eval_episodes=1, eval_freq=0, save_freq=0, timesteps=128)
    result = Trainer.create(config, runs_dir=tmp_path, run_name="hop", progress=False).train()
    assert result.status == "finished" and result.timesteps == 128
    agent = load_agent(tmp_path / "hop")
    assert agent.env_id == "Hopper-v5" and agent.safe and agent.predict(np.zeros(11)).shape == (3,)


# --- phases -----------------------------------------------------------------------------------------------------
def test_phased_schedule_restarts_and_decays():
    from mission_gym.ppo.schedules import PhasedSchedule, entropy_schedule, epochs_schedule, learning_rate_schedule

    lr = PhasedSchedule((0.0, 0.6), (1e-3, 3e-4), "linear")
    assert lr(1.0) == pytest.approx(1e-3) and lr(1 - 0.3) == pytest.approx(5e-4)  # halfway through phase 0
    assert lr(1 - 0.6) == pytest.approx(3e-4) and lr(1 - 0.8) == pytest.approx(1.5e-4) and lr(0.0) == pytest.approx(0.0)
    assert PhasedSchedule((0.0, 0.5), (2.0, 1.0), "constant")(0.49) == 1.0
    # without phases: SB3's own linear schedule and constants, as before
    plain = learning_rate_schedule(1e-3, "linear")
    assert not isinstance(plain, PhasedSchedule) and plain(0.25) == pytest.approx(2.5e-4)
    assert learning_rate_schedule(1e-3, "constant") == 1e-3
    # phases start at env steps (here of a 100-step run)
    phases = [Phase(start=50, ent_coef=0.01), Phase(start=75, learning_rate=1e-4)]
    assert entropy_schedule(0.0, phases, 100)(0.3) == 0.01  # the later phase keeps the earlier entropy
    assert learning_rate_schedule(1e-3, "linear", phases, 100)(0.4) == pytest.approx(1e-3 * (1 - 0.1 / 0.25))
    assert entropy_schedule(0.01, [Phase(start=50, learning_rate=1e-4)], 100) is None
    epochs = epochs_schedule(8, [Phase(start=30, n_epochs=4), Phase(start=60, ent_coef=0.0)], 100)
    assert [epochs(r) for r in (1.0, 0.71, 0.7, 0.1)] == [8, 8, 4, 4]  # from 30 on, kept by the phase at 60
    assert epochs_schedule(8, phases, 100) is None
    # a phase may change the schedule kind: constant, then a linear decay
    mixed = learning_rate_schedule(1e-3, "constant", [Phase(start=40, learning_rate=3e-4, lr_schedule="linear")], 100)
    assert mixed(0.61) == 1e-3 and mixed(0.6) == pytest.approx(3e-4) and mixed(0.3) == pytest.approx(1.5e-4)
    kept = learning_rate_schedule(1e-3, "constant", [Phase(start=40, lr_schedule="linear"), Phase(start=70)], 100)
    assert kept.kinds == ("constant", "linear", "linear") and kept(0.15) == pytest.approx(1e-3 * 0.5)
    with pytest.raises(ValueError, match="constant or linear"):
        PhasedSchedule((0.0, 0.5), (1.0, 1.0), ("constant", "cosine"))
    with pytest.raises(ValueError, match="increase"):
        PhasedSchedule((0.0, 0.5, 0.5), (1.0, 1.0, 1.0))


def test_phases_validate():
    with pytest.raises(ValueError, match="start"):
        Phase(start=0)
    with pytest.raises(ValueError, match="must increase"):
        tiny(phases=[{"start": 150}, {"start": 80}])
    with pytest.raises(ValueError, match="extra|not permitted"):
        Phase(start=50, gamma=0.9)


def test_schedule_positions_are_env_steps():
    from mission_gym.plan.notes import schedule_changes

    mode = "engagement.defenders.mode_probs"
    config = tiny(
        env=MISSION_ENV_ID,
        timesteps=9_000_000,
        phases=[{"start": 3_000_000, "learning_rate": 3e-4}, {"start": 4_500_000}],
        curriculum=[{"setting": f"{mode}.guard_objective", "value": 0.5, "start": 3_000_000, "until": 9_000_000},
                    {"setting": f"{mode}.patrol", "value": 0.3, "start": 3_000_000, "until": 9_000_000}],
        population={"size": 4, "cuts": [{"at": 2_000_000, "keep": 2}, {"at": 2_750_000, "keep": 1}]},
    )  # fmt: skip
    assert [p.start for p in config.phases] == [3_000_000, 4_500_000] and config.fraction(4_500_000) == 0.5
    # --timesteps keeps every position at its step: a shorter run is the first part of the longer one, and what would
    # start at or after its end is left out, with a line that says so
    short = apply_overrides(config, {"timesteps": 4_000_000})
    assert [p.start for p in short.phases] == [3_000_000] and [c.at for c in short.population.cuts] == [2_000_000, 2_750_000]
    assert [(c.start, c.until) for c in short.curriculum] == [(3_000_000, 9_000_000)] * 2  # ramps cut off at the end
    (line,) = schedule_changes(config, short)
    assert "timesteps 4,000,000 (preset 9,000,000)" in line and "phases[1].start 4,500,000" in line
    assert "ramps cut off at the end: curriculum[0].until 9,000,000" in line
    longer = apply_overrides(config, {"timesteps": 18_000_000})
    assert longer.phases == config.phases and longer.population == config.population
    assert schedule_changes(config, config) == []
    # the shipped cpu preset names its steps; its variants merge their curriculum steps into the run's
    cpu = load_preset("cpu")
    assert [c.at for c in cpu.population.cuts] == [1_250_000, 2_000_000, 2_750_000]
    assert [p.start for p in cpu.phases] == [3_000_000, 5_000_000]
    # fractions (runs made before positions were steps) are refused with what they would be in steps
    fraction = r"phases\[0\].start: schedule positions are env steps, got the fraction 0.25 \(0.25 of 9,000,000 is 2,250,000\)"
    with pytest.raises(ValueError, match=fraction):
        apply_overrides(config, {"phases": [{"start": 0.25}]})
    with pytest.raises(ValueError, match="step 9,500,000 is not inside the run's 9,000,000 timesteps"):
        apply_overrides(config, {"phases": [{"start": 9_500_000}]})
    with pytest.raises(ValueError, match=r"population.cuts\[0\].at: step 9,000,000 is not inside"):
        apply_overrides(config, {"population": {"size": 2, "cuts": [{"at": 9_000_000, "keep": 1}]}})


def test_population_variants_are_typed_and_merge_into_the_run():
    from mission_gym.settings.schema import Variant
    from mission_gym.settings.variants import apply_variant

    cpu = load_preset("cpu")
    chasers = cpu.population.variants[2]
    assert isinstance(chasers, Variant) and cpu.population.variants[0].model_dump(exclude_unset=True) == {}
    member = apply_variant(cpu, chasers, 2)
    assert (
        apply_variant(
            apply_overrides(cpu, {"seed": 1}), apply_overrides(cpu, {"seed": 1}).population.variants[2], 2
        ).curriculum
        == member.curriculum
    )
    # the variant's three steps join the run's three (new (setting, start) pairs); the run's own are unchanged
    assert member.curriculum[:3] == cpu.curriculum and len(member.curriculum) == 6
    assert [c.value for c in member.curriculum[3:]] == [1.0, 0.0, 0.0]
    # a step with the same (setting, start) changes that step only
    capture = {"setting": "engagement.capture.time_to_capture", "value": 4, "until": 1_000_000}
    one = apply_variant(cpu, {"curriculum": [capture]}, 0)
    assert one.curriculum[0].value == 4 and one.curriculum[0].until == 1_000_000 and one.curriculum[1:] == cpu.curriculum[1:]
    assert apply_variant(cpu, {"gamma": 0.95, "hyperparams": {"normalize_advantage": False}}, 1).gamma == 0.95
    with pytest.raises(ConfigError, match=r"population.variants\[1\]: gamma"):
        apply_variant(cpu, {"gamma": 2}, 1)
    with pytest.raises(ConfigError, match=r"variants\[0\]: seed belong to the whole population"):
        apply_overrides(cpu, {"population.variants": [{"seed": 3}]})
    with pytest.raises(ConfigError, match="gama"):
        apply_overrides(cpu, {"population.variants[2]": {"gama": 0.9}})
    # another env takes none of the game's settings: the game's configuration refuses it in one line, naming them
    with pytest.raises(ConfigError, match="env_kwargs is for MissionGym-v0, not for env 'Hopper-v5'"):
        apply_overrides(cpu, {"env": "Hopper-v5"})
    with pytest.raises(
        ConfigError, match=r"curriculum, restarts, population.variants\[2\].curriculum, .* are settings of Mission"
    ):
        apply_overrides(cpu, {"env": "Hopper-v5", "env_kwargs": {}})


def test_overrides_set_fields_paths_and_list_items():
    cpu = load_preset("cpu")
    deep = apply_overrides(cpu, {"population.final_episodes": 2000})
    assert deep.population.final_episodes == 2000 and deep.population.cuts == cpu.population.cuts
    assert apply_overrides(cpu, {"population": {"size": 1}}).population.cuts == []  # a plain key sets the whole value
    item = apply_overrides(cpu, {"curriculum[0].value": 4})
    assert item.curriculum[0].value == 4 and item.curriculum[1:] == cpu.curriculum[1:]
    assert apply_overrides(cpu, {"phases[1].learning_rate": 1e-4}).phases[1].learning_rate == 1e-4
    with pytest.raises(ConfigError, match=r"curriculum\[7\] does not exist"):
        apply_overrides(cpu, {"curriculum[7].value": 4})
    with pytest.raises(ConfigError, match="did you mean 'population'"):
        apply_overrides(cpu, {"populaton.size": 2})


def test_curriculum_ramps_to_the_real_game():
    from mission_gym.config import load_config
    from mission_gym.extras.curriculum import Curriculum
    from mission_gym.settings.game import CurriculumStep

    step = CurriculumStep(setting="engagement.capture.time_to_capture", value=5.0, until=50)
    cur = Curriculum(load_config(), [step], 100)
    assert cur.values(0.0) == {step.setting: 5.0} and cur.values(0.25) == {step.setting: pytest.approx(10.0)}
    assert cur.values(0.5) == cur.values(0.9) == {step.setting: 15.0}
    assert cur.config_at(0.1).engagement.capture.time_to_capture == pytest.approx(7.0)
    repeat = Curriculum(load_config(), [CurriculumStep(setting="world.physics.action_repeat", value=1, until=100)], 100)
    assert repeat.values(0.3)["world.physics.action_repeat"] == 2.0  # 1 + 4 * 0.3 = 2.2, whole steps for an integer
    assert repeat.config_at(0.3).world.physics.action_repeat == 2
    with pytest.raises(ConfigError, match="not a number"):
        Curriculum(load_config(), [CurriculumStep(setting="engagement.capture.contested", value=1.0, until=50)], 100)
    # settings valid only together move together: the defenders' mode probabilities sum to 1 all along the ramp
    modes = "engagement.defenders.mode_probs."
    guard = [
        CurriculumStep(setting=modes + "guard_objective", value=0.6, until=80),
        CurriculumStep(setting=modes + "patrol", value=0.25, until=80),
        CurriculumStep(setting=modes + "intercept", value=0.15, until=80),
    ]
    probs = Curriculum(load_config(), guard, 100).config_at(0.4).engagement.defenders.mode_probs
    assert (probs.guard_objective, probs.patrol, probs.intercept) == pytest.approx((0.45, 0.375, 0.175))
    with pytest.raises(ConfigError, match=r"at step 50 is not valid: .*sum to 1 \(got 1\.1125\)"):
        Curriculum(load_config(), [guard[0], CurriculumStep(setting=modes + "patrol", value=0.2, until=50)], 100)
    with pytest.raises(ConfigError, match="at the start is not valid: .*sum to 1"):
        Curriculum(load_config(), guard[:2], 100)
    with pytest.raises(ValueError, match="until"):
        CurriculumStep(setting="x", value=1.0, until=0)
    # `--preset cpu --env Hopper-v5` sizes Hopper's own recipe: none of the game's curriculum or env arguments
    hopper = load_preset("cpu", env="Hopper-v5")
    assert load_preset("cpu").curriculum and hopper.curriculum == [] and hopper.env_kwargs == {} and hopper.recipe == "hopper"
    assert apply_overrides(load_preset("cpu"), {"seed": 3}).env_kwargs == load_preset("cpu").env_kwargs
    merged = apply_overrides(load_preset("cpu"), {"env_kwargs": {"reward": {"win_bonus": 100}}}).env_kwargs
    assert merged == {**load_preset("cpu").env_kwargs, "reward": {"win_bonus": 100}}  # merged into the preset's
    with pytest.raises(ConfigError, match="CartPole-v1"):
        apply_overrides(load_preset("cpu"), {"env": "CartPole-v1", "curriculum": [step.model_dump()]})
    with pytest.raises(ValueError, match="the steps of engagement.capture.time_to_capture overlap"):
        tiny(env="MissionGym-v0", vec_env="native", curriculum=[step.model_dump(), step.model_dump()])


def test_a_curriculum_step_may_start_later_and_a_setting_may_have_several():
    from mission_gym.config import load_config
    from mission_gym.extras.curriculum import Curriculum
    from mission_gym.settings.game import CurriculumStep

    modes = "engagement.defenders.mode_probs."
    early = [  # chasers only at first, the game's own 0.5 / 0.3 / 0.2 by 40%
        CurriculumStep(setting=modes + "patrol", value=1.0, until=40),
        CurriculumStep(setting=modes + "guard_objective", value=0.0, until=40),
        CurriculumStep(setting=modes + "intercept", value=0.0, until=40),
    ]
    late = [  # more guards from 60%, back to the game's own by the end
        CurriculumStep(setting=modes + "guard_objective", value=0.5, start=60, until=100),
        CurriculumStep(setting=modes + "patrol", value=0.3, start=60, until=100),
    ]
    cur = Curriculum(load_config(), early + late, 100)

    def probs(progress: float) -> tuple[float, float, float]:
        p = cur.config_at(progress).engagement.defenders.mode_probs
        return p.patrol, p.guard_objective, p.intercept

    assert probs(0.0) == (1.0, 0.0, 0.0) and probs(0.2) == pytest.approx((0.75, 0.15, 0.1))
    assert probs(0.4) == probs(0.5) == probs(0.599) == pytest.approx((0.5, 0.3, 0.2))  # the game's own in between
    assert probs(0.6) == pytest.approx((0.3, 0.5, 0.2)) and probs(0.8) == pytest.approx((0.4, 0.4, 0.2))
    assert probs(1.0) == pytest.approx((0.5, 0.3, 0.2))
    # a step that starts later leaves the game alone before it, and the first step's formula is unchanged by it
    only_late = Curriculum(load_config(), late, 100)
    assert only_late.values(0.3) == {modes + "guard_objective": 0.3, modes + "patrol": 0.5}
    capture = CurriculumStep(setting="engagement.capture.time_to_capture", value=5.0, until=40)
    ramp = Curriculum(load_config(), [capture], 100)
    assert all(ramp.values(p)[capture.setting] == 5.0 + 10.0 * min(p / 0.4, 1.0) for p in (0.0, 0.123, 0.3999, 0.7))
    with pytest.raises(ValueError, match="must start before its until"):
        CurriculumStep(setting=capture.setting, value=5.0, start=50, until=50)
    with pytest.raises(ValueError, match=r"overlap, got \(start, until\) \[\(0, 40\), \(30, 90\)\]"):
        tiny(
            env="MissionGym-v0",
            vec_env="native",
            curriculum=[capture.model_dump(), {**capture.model_dump(), "start": 30, "until": 90}],
        )
    # the ramp's values are checked at every step's start too: guards 0.5 without patrol 0.3 do not sum to 1
    with pytest.raises(ConfigError, match="at step 60 is not valid: .*sum to 1"):
        Curriculum(load_config(), late[:1], 100)
    spaced = tiny(env="MissionGym-v0", vec_env="native", curriculum=[s.model_dump() for s in early + late])
    assert len(spaced.curriculum) == 5


def test_curriculum_plays_an_easier_game_while_evaluation_plays_the_real_one(tmp_path):
    import csv

    from mission_gym.extras.curriculum import mission_core
    from mission_gym.sim import layout

    key = "engagement.capture.time_to_capture"
    config = load_preset("quick").model_copy(update={"n_envs": 4, "n_steps": 32})
    config = apply_overrides(
        config,
        {
            "timesteps": 512,
            "eval_freq": 256,
            "eval_episodes": 2,
            "save_freq": 0,
            "curriculum": [{"setting": key, "value": 3.0, "until": 256}],
        },
    )
    trainer = Trainer.create(config, runs_dir=tmp_path, run_name="cur", progress=False)
    seen = []
    core = mission_core(trainer.model.get_env())
    step_batch = core.step

    def spy(actions):  # the capture time the training games are stepped with
        seen.append(float(core.static.cfg[layout.C_CAPTURE_TIME]))
        return step_batch(actions)

    core.step = spy
    assert trainer.train().status == "finished"
    rows = [r for r in csv.DictReader(open(tmp_path / "cur" / "progress.csv")) if r.get(f"curriculum/{key}")]
    ramp = [float(r[f"curriculum/{key}"]) for r in rows]
    # 4 rollouts of 128 steps start at progress 0, 0.25, 0.5, 0.75: 3 -> 9 -> 15 -> 15
    assert ramp == pytest.approx([3.0, 9.0, 15.0, 15.0])
    assert seen[0] == 3.0 and seen[-1] == 15.0 and sorted(set(seen)) == [3.0, 9.0, 15.0]
    assert read_yaml(tmp_path / "cur" / "config.yaml")["env_kwargs"] == {}  # evaluation and the saved agent: the real game
    assert load_agent(tmp_path / "cur", device="cpu").env_kwargs == {}
    # a ramp to step 800 in a run of 512, resumed to 1024: the first games play 3 + 12 * 512 / 800 = 10.68 s
    ramp = {"setting": key, "value": 3.0, "until": 800}
    config = apply_overrides(config, {"timesteps": 512, "save_freq": 512, "curriculum": [ramp]})
    Trainer.create(config, runs_dir=tmp_path, run_name="res", progress=False).train()
    resumed = Trainer.resume("res", runs_dir=tmp_path, overrides={"timesteps": 1024}, progress=False)
    core = mission_core(resumed.model.get_env())
    assert core.config.engagement.capture.time_to_capture == pytest.approx(10.68)
    assert resumed.train().status == "finished"
    assert core.config.engagement.capture.time_to_capture == pytest.approx(15.0)


def test_phases_change_learning_rate_and_entropy_during_a_run(tmp_path):
    import csv

    phases = [{"start": 256, "learning_rate": 5e-4, "ent_coef": 0.02}]
    config = tiny(timesteps=512, eval_freq=0, save_freq=0, learning_rate=1e-3, lr_schedule="linear", ent_coef=0.0)
    config = apply_overrides(config, {"phases": phases})
    result = Trainer.create(config, runs_dir=tmp_path, run_name="ph", progress=False).train()
    assert result.status == "finished"
    rows = [r for r in csv.DictReader(open(tmp_path / "ph" / "progress.csv")) if r.get("train/learning_rate")]
    lrs = [float(r["train/learning_rate"]) for r in rows]
    ents = [float(r["train/ent_coef"]) for r in rows]
    # 4 updates of 128 steps: progress 0.25, 0.5 (phase 2 starts), 0.75, 1.0
    assert lrs == pytest.approx([1e-3 * 0.5, 5e-4, 2.5e-4, 0.0]) and ents == [0.0, 0.02, 0.02, 0.02]
    from stable_baselines3 import PPO

    assert PPO.load(load_agent(tmp_path / "ph", device="cpu").model_path).ent_coef == 0.02
