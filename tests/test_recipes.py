"""A recipe for the task, a tier for the machine: which recipe serves which task, how a tier sizes it, the policy each
kind of observation gets, and what another task refuses of Mission Gym's own settings."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import task_envs  # noqa: F401  (registers the tests' tasks)
import warm_cli

from mission_gym.config.yaml_io import ConfigError
from mission_gym.hardware import Hardware
from mission_gym.plan import presets, tiers
from mission_gym.plan.presets import compose_preset, load_preset, recipe_for
from mission_gym.scripts.train_ppo import main
from mission_gym.settings.memory import estimate_memory
from mission_gym.settings.sizing import shape_from_config
from mission_gym.vec import probe
from mission_gym.vec.wrappers import make_kwargs

CLI = [sys.executable, "-m", "mission_gym.scripts.train_ppo"]
TWO_CORES = Hardware(None, None, 2, 24.0)
HAS_MUJOCO = importlib.util.find_spec("mujoco") is not None


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test probes its tasks into a cache of its own."""
    monkeypatch.setenv("MISSION_GYM_CACHE", str(tmp_path / "cache"))


@pytest.mark.parametrize(
    "env, recipe",
    [
        ("MissionGym-v0", "mission"),
        ("CartPole-v1", "cartpole"),
        ("Pendulum-v1", "pendulum"),
        ("MountainCar-v0", "discrete"),  # no recipe of its own: the default of its kind
        ("MountainCarContinuous-v0", "mujoco"),
        ("task_envs:ImageTarget-v0", "pixels"),
        ("task_envs:DictGoal-v0", "mujoco"),
        ("task_envs:DictImage-v0", "pixels"),
    ],
)
def test_each_task_gets_its_recipe_or_its_kinds(env: str, recipe: str) -> None:
    choice = recipe_for(env)
    assert choice.name == recipe
    assert choice.why.startswith(f"recipe {recipe}: ")


@pytest.mark.skipif(not HAS_MUJOCO, reason="needs mujoco")
def test_a_shipped_task_recipe_wins_over_its_kinds() -> None:
    assert recipe_for("Hopper-v5").name == "hopper"
    assert recipe_for("Ant-v5").name == "ant"


def test_the_game_at_each_tier_keeps_its_recipe() -> None:
    """The tiers change the game's members and device only: cpu is the recipe as written."""
    recipe = load_preset("mission")
    for tier, members, device in (("cpu", 6, "cpu"), ("fast", 8, "auto"), ("heavy", 16, "auto"), ("beast", 32, "auto")):
        config = load_preset(tier)
        assert (config.population.size, config.device, config.recipe, config.tier) == (members, device, "mission", tier)
        same = {"population", "device", "recipe", "tier", "preset", "description"}
        assert config.model_dump(exclude=same) == recipe.model_dump(exclude=same)
        assert config.population.cuts == recipe.population.cuts


def test_a_tier_sizes_another_task_keeping_the_recipes_learning() -> None:
    recipe = load_preset("discrete")
    composed = compose_preset("cpu", env="MountainCar-v0", hardware=TWO_CORES)
    config = composed.config
    assert (config.env, config.recipe, config.tier, config.device) == ("MountainCar-v0", "discrete", "cpu", "cpu")
    assert config.rollout == recipe.rollout and config.batch_size == recipe.batch_size
    assert config.vec_env == "dummy"  # a classic-control step is far too cheap for a worker process
    assert config.policy == "mlp" and config.population.size == 1
    assert any(n.startswith("recipe discrete: no recipe is made for MountainCar-v0") for n in composed.notes)
    assert any(n.startswith("size: tier cpu") and "in this process" in n for n in composed.notes)


def test_a_gpu_tier_trains_seeds_side_by_side_with_mlp_learners_on_the_cpu() -> None:
    composed = compose_preset("heavy", env="CartPole-v1", hardware=Hardware(24.0, "card", 8, 64.0))
    config = composed.config
    assert (config.population.size, config.population.learner, config.population.cuts) == (4, "processes", [])
    assert config.device == "cpu" and config.num_threads == 2  # 8 cores, 2 for each of 4 seeds
    assert "4 seeds side by side" in composed.notes[1] and "learner on the CPU" in composed.notes[1]


def test_workers_when_the_probe_measured_them_faster(monkeypatch: pytest.MonkeyPatch) -> None:
    """``subproc`` only where worker processes were measured faster than this process, with the rollout kept and
    the envs a multiple of the cores."""
    slow = probe.TaskProfile("MountainCar-v0", "vector", "discrete", 400.0, 1e5, 16, 3e7, 1.8, 4, 2e8)
    monkeypatch.setattr(probe, "task_profile", lambda *a, **k: slow)
    monkeypatch.setattr(probe, "known_profile", lambda *a, **k: slow)  # what the estimate reads: the probe's
    config = compose_preset("cpu", env="MountainCar-v0", hardware=Hardware(None, None, 4, 24.0)).config
    assert config.vec_env == "subproc" and config.n_envs % 4 == 0 and config.rollout == load_preset("discrete").rollout
    est = estimate_memory(shape_from_config(config, cores=4))
    assert est.worker_bytes == pytest.approx(config.n_envs * 3e7 + 2e8)
    cheap = probe.TaskProfile("MountainCar-v0", "vector", "discrete", 400.0, 1e5, 16, 3e7, 1.1, 4, 2e8)
    monkeypatch.setattr(probe, "task_profile", lambda *a, **k: cheap)
    assert compose_preset("cpu", env="MountainCar-v0", hardware=Hardware(None, None, 4, 24.0)).config.vec_env == "dummy"


def test_auto_on_a_machine_with_little_ram_takes_the_largest_size_that_fits(monkeypatch: pytest.MonkeyPatch) -> None:
    """A voxel observation (13.7 MB a step): auto's rollout would not fit 24 GiB; it takes the largest that does and
    says so, and what it takes fits the estimate."""
    monkeypatch.setattr(presets, "_host_gb", lambda: 24.0)
    monkeypatch.setattr(presets, "detect_hardware", lambda: TWO_CORES)
    composed = compose_preset("auto", env="task_envs:Voxels-v0")
    config = composed.config
    assert config.rollout < load_preset("discrete").rollout
    assert estimate_memory(shape_from_config(config)).host_bytes <= 0.85 * 24 * 2**30
    assert any(n.startswith("memory: ") for n in composed.notes), composed.notes
    assert config.rollout % config.batch_size == 0


def test_the_estimate_of_a_voxel_task_is_planned_before_anything_is_allocated() -> None:
    config = load_preset("cpu", env="task_envs:Voxels-v0")
    est = estimate_memory(shape_from_config(config))
    step = 17 * 49 * 71 * 58 * 4
    assert est.host["rollout buffer"] >= config.rollout * step
    assert est.params > 17 * 49 * 71 * 58 * 64  # the MLP's first layer alone


def test_policy_follows_the_observations() -> None:
    for env, policy in (
        ("task_envs:ImageTarget-v0", "cnn"),
        ("task_envs:DictGoal-v0", "multi_input"),
        ("task_envs:DictImage-v0", "multi_input"),
    ):
        assert load_preset("cpu", env=env).policy == policy
    pixels = load_preset("cpu", env="task_envs:ImageTarget-v0")
    assert not pixels.normalize and pixels.frame_stack == 4
    est = estimate_memory(shape_from_config(pixels))
    from stable_baselines3 import PPO

    from mission_gym.vec.factory import make_vec_env

    venv = make_vec_env("task_envs:ImageTarget-v0", 1, "dummy", frame_stack=4)
    model = PPO("CnnPolicy", venv, policy_kwargs={"net_arch": []})
    assert est.params == sum(p.numel() for p in model.policy.parameters())  # counted on the meta device, exactly
    venv.close()


def test_a_game_setting_on_another_task_is_refused(tmp_path: Path, cli_here) -> None:
    curriculum = "curriculum=[{setting: engagement.capture.time_to_capture, value: 5, until: 1024}]"
    for args in (
        ["--env", "CartPole-v1", "--hyperparams", curriculum],
        ["--preset", "mission", "--env", "CartPole-v1"],
        ["--preset", "quick", "--env", "CartPole-v1", "--hyperparams", "restarts={states: x.npz, until: 1000}"],
    ):
        code, out, err = cli_here(main, [*args, "--no-progress"])
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert "CartPole-v1" in err and ("Mission Gym" in err or "MissionGym-v0" in err), err
        assert not (tmp_path / "runs").exists()


def test_an_unknown_kind_of_space_is_one_line(cli_here, monkeypatch: pytest.MonkeyPatch) -> None:
    odd = probe.TaskProfile("X-v0", "other", "other", 10.0, 0.0, 8)
    monkeypatch.setattr(probe, "task_profile", lambda *a, **k: odd)
    with pytest.raises(ConfigError, match="other actions with other observations have no recipe"):
        recipe_for("MountainCar-v0")


def test_fit_to_memory_keeps_what_fits() -> None:
    composed = compose_preset("cpu", env="CartPole-v1", hardware=TWO_CORES)
    assert tiers.fit_to_memory(composed, 64.0, lambda c: estimate_memory(shape_from_config(c))) is composed


@pytest.mark.parametrize("env, policy_class", [
    ("task_envs:ImageTarget-v0", "ActorCriticCnnPolicy"),
    ("task_envs:DictGoal-v0", "MultiInputActorCriticPolicy"),
    ("task_envs:DictImage-v0", "MultiInputActorCriticPolicy"),
    ("CartPole-v1", "ActorCriticPolicy"),
])  # fmt: skip
def test_each_observation_kind_trains_and_loads_with_plain_sb3(tmp_path: Path, env: str, policy_class: str) -> None:
    shutil.copy(Path(__file__).with_name("task_envs.py"), tmp_path / "task_envs.py")
    args = [*CLI, "--env", env, "--timesteps", "512", "--n-steps", "32", "--n-epochs", "1", "--eval-freq", "256",
            "--eval-episodes", "2", "--run-name", "r", "--no-progress"]  # fmt: skip
    proc = warm_cli.run(args, tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert "note: recipe " in proc.stdout and "note: size: tier cpu" in proc.stdout
    run = tmp_path / "runs" / "r"
    from stable_baselines3 import PPO

    sys.path.insert(0, str(tmp_path))
    try:
        model = PPO.load(run / "final_model.zip", device="cpu")
        assert type(model.policy).__name__ == policy_class
        from mission_gym.agents import load_agent

        agent = load_agent(run, trust_pickle=False)  # the safe files: no pickle read
        assert agent.safe and type(agent.policy).__name__ == policy_class
    finally:
        sys.path.remove(str(tmp_path))
    evaluated = warm_cli.run([sys.executable, "-m", "mission_gym.scripts.evaluate", str(run), "--episodes", "2"], tmp_path)
    assert evaluated.returncode == 0, evaluated.stderr


def test_one_env_stacked_is_what_the_vector_env_stacks() -> None:
    """Watching or recording an agent stacks a single env's frames as training's VecFrameStack stacked them."""
    import gymnasium as gym

    from mission_gym.vec.factory import make_vec_env
    from mission_gym.vec.wrappers import FrameStack

    venv = make_vec_env("task_envs:ImageTarget-v0", 1, "dummy", seed=5, frame_stack=4)
    single = FrameStack(gym.make("task_envs:ImageTarget-v0"), 4)
    stacked, _ = single.reset(seed=5)
    batch = venv.reset()
    assert single.observation_space == venv.observation_space
    for action in (0, 1, 1, 0, 1, 0):
        assert (stacked == batch[0]).all()
        stacked, *_ = single.step(action)
        batch, *_ = venv.step(np.array([action]))
    venv.close()


def test_a_wrapper_is_named_never_a_path_a_file_gives(cli_here) -> None:
    from mission_gym.vec.wrappers import wrapper_entries

    assert wrapper_entries(["atari", {"gymnasium.wrappers.ResizeObservation": {"shape": [64, 64]}}])[1][1] == {
        "shape": [64, 64]
    }
    for bad in (["os.system"], ["atar"], [{"a": 1, "b": 2}]):
        with pytest.raises(ConfigError, match="env_wrapper"):
            wrapper_entries(bad)
    code, _, err = cli_here(main, ["--preset", "quick", "--env", "CartPole-v1", "--hyperparams", "env_wrapper=[atar]"])
    assert code == 2 and "did you mean 'atari'?" in err and len(err.strip().splitlines()) == 1


@pytest.mark.skipif(importlib.util.find_spec("ale_py") is None, reason="needs ale-py")
def test_an_ale_game_gets_the_atari_recipe() -> None:
    config = load_preset("cpu", env="BreakoutNoFrameskip-v4")
    assert (config.recipe, config.env_wrapper, config.frame_stack, config.policy) == ("atari", ["atari"], 4, "cnn")
    assert not config.normalize


def test_a_probe_is_kept_for_the_next_run_unless_the_machine_was_busy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe, "_others_busy", lambda cores: None)
    monkeypatch.setattr(probe, "_PROBED", {})  # what this process probed before, busy or not
    first = probe.task_profile("MountainCar-v0", cores=1)
    assert first.error is None and probe.cache_path().is_file()
    probe._PROBED.clear()
    assert probe.task_profile("MountainCar-v0", cores=1) == first  # read back from the file, not measured again
    monkeypatch.setattr(probe, "_others_busy", lambda cores: "1.5 of 2 cores busy")
    busy = probe.task_profile("Acrobot-v1", cores=1)
    assert busy.error == "other work kept 1.5 of 2 cores busy" and busy.step_us is not None
    assert probe.profile_key("Acrobot-v1", {}, (), 1) not in probe._read_cache()


def test_an_ale_game_that_skips_frames_itself_is_made_without_under_the_atari_wrapper() -> None:
    """SB3's AtariWrapper skips 4 frames itself: ALE's v5 ids (4 frames of their own) would act every 16."""
    pytest.importorskip("ale_py")
    from mission_gym.vec.factory import EnvFactory

    env = EnvFactory("ALE/Breakout-v5", {}, env_wrapper=("atari",))()
    try:
        assert env.unwrapped._frameskip == 1 and env.observation_space.shape == (84, 84, 1)
    finally:
        env.close()
    for env_id, kwargs, wrappers, skip in (
        ("ALE/Breakout-v5", {}, (), None),  # no atari wrapper: the id's own
        ("ALE/Breakout-v5", {"frameskip": 2}, ("atari",), 2),  # the user's
        ("BreakoutNoFrameskip-v4", {}, ("atari",), None),  # skips none: nothing to change
    ):
        assert make_kwargs(env_id, kwargs, wrappers).get("frameskip") == skip


def test_a_size_given_on_the_command_line_is_said_beside_the_tiers() -> None:
    from mission_gym.plan.notes import size_changes
    from mission_gym.settings.overrides import apply_overrides

    tier = compose_preset("cpu", env="CartPole-v1", hardware=TWO_CORES).config
    assert size_changes(tier, tier) == []
    given = apply_overrides(tier, {"n_envs": 4, "n_steps": 64})
    (line,) = size_changes(tier, given)
    assert line == (f"size as given: n_envs 4 (the tier's {tier.n_envs}), n_steps 64 (the tier's {tier.n_steps}); "
                    "rollout 4 x 64 = 256 steps")  # fmt: skip


def test_an_unknown_id_names_the_extras_that_register_more(monkeypatch: pytest.MonkeyPatch) -> None:
    from mission_gym.vec import factory

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ale_py" else real(name, *a))
    monkeypatch.setattr(factory, "ensure_registered", lambda env_id: False)
    with pytest.raises(ConfigError, match=r"'ALE/Pong-v5' is not a registered.*pip install 'mission_gym\[atari\]'"):
        factory.check_env_id("ALE/Pong-v5")
