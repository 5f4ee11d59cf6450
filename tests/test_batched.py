"""The batched learner (mission_gym/ppo/batched.py): a member trained inside the batch follows the same member
trained alone (LeanPPO, its own process's generators) to within float rounding, whatever its batch-mates' seeds and
hyperparameters; a member that stops leaves the others unchanged."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from stable_baselines3.common.callbacks import BaseCallback, CallbackList
from together_fixtures import alone_then_together

from mission_gym.ppo.batched.learner import BatchedLearner, Member
from mission_gym.ppo.batched.stack import batchable
from mission_gym.ppo.batched.update import BatchedAdam, clip_grad_norms
from mission_gym.ppo.lean import LeanPPO
from mission_gym.training.build import member_streams
from mission_gym.vec.factory import make_vec_env

STEPS = 32
#: the batch's matrix products round otherwise than a lone member's: a few float32 ulps after three updates
TOLERANCE = 1e-5


def build(env_id: str, seed: int, kwargs: dict[str, Any]) -> LeanPPO:
    kind, n_envs = ("native", 8) if env_id == "MissionGym-v0" else ("dummy", 2)
    venv = make_vec_env(env_id, n_envs, kind, seed=seed, normalize=True, normalize_reward=True)
    model = LeanPPO("MlpPolicy", venv, n_steps=STEPS, batch_size=64, n_epochs=3, seed=seed, device="cpu",
                    policy_kwargs={"net_arch": [32, 32]}, **kwargs)  # fmt: skip
    return model


def snapshot(model: Any) -> dict[str, torch.Tensor]:
    """The weights, Adam's moments and steps, and the VecNormalize statistics (relative to their scale)."""
    state = {k: v.clone() for k, v in model.policy.state_dict().items()}
    for k, s in model.policy.optimizer.state_dict()["state"].items():
        state.update({f"adam/{k}/{n}": s[n].clone() for n in ("exp_avg", "exp_avg_sq", "step")})
    norm = model.get_vec_normalize_env()
    for name, rms in (("obs", norm.obs_rms), ("ret", norm.ret_rms)):
        scale = max(1.0, float(np.abs(rms.var).max()))
        state.update({f"{name}/mean": torch.as_tensor(rms.mean) / scale, f"{name}/var": torch.as_tensor(rms.var) / scale})
    return state


def member(model: Any, timesteps: int, callbacks: list[BaseCallback] | None = None) -> Member:
    gen, rs = member_streams(model)  # right after the build, as the trainer takes them
    total, callback = model._setup_learn(timesteps, CallbackList(callbacks or []), True, "run", False)
    callback.on_training_start(locals(), globals())
    return Member(model, callback, total, gen, rs)


def max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max((a[k].float() - b[k].float()).abs().max().item() for k in a)


# two members with other seeds and hyperparameters: what one member is given must not reach the other
SPECS = [
    (3, {"learning_rate": 1e-3, "ent_coef": 0.0}),
    (5, {"learning_rate": 3e-4, "ent_coef": 0.01, "clip_range": 0.1, "vf_coef": 0.7, "max_grad_norm": 0.3}),
]


@pytest.mark.parametrize(
    "env_id",
    ["MissionGym-v0", "CartPole-v1", "Pendulum-v1"],  # equal categorical heads; Discrete; a Gaussian
)
def test_a_member_in_the_batch_follows_the_member_trained_alone(env_id: str) -> None:
    torch.set_num_threads(1)
    rollouts = 3
    alone = []
    for seed, kwargs in SPECS:
        model = build(env_id, seed, kwargs)
        model.learn(rollouts * model.n_envs * STEPS)
        alone.append((snapshot(model), model.rollout_buffer.actions.copy(), model.num_timesteps))
        model.env.close()
    members = [
        member(build(env_id, seed, kwargs), rollouts * (8 if env_id == "MissionGym-v0" else 2) * STEPS)
        for seed, kwargs in SPECS
    ]
    learner = BatchedLearner(members)
    learner.learn()
    for i, ((state, actions, steps), m) in enumerate(zip(alone, members)):
        assert m.status == "finished" and m.model.num_timesteps == steps
        # the last rollout drew the same actions (a Gaussian's: the same draws from a mean a few ulps off)
        drawn = learner.storage.flat()[1][i].numpy()  # in the lone buffer's flattened (env-major) order
        np.testing.assert_allclose(drawn, actions, atol=TOLERANCE if env_id == "Pendulum-v1" else 0)
        assert max_diff(state, snapshot(m.model)) < TOLERANCE
        m.model.env.close()


def test_a_target_kl_stops_each_members_update_on_its_own() -> None:
    """``target_kl`` ends a member's update at the minibatch whose KL passes 1.5x it, as LeanPPO's loop breaks; the
    batch masks that member's later steps and goes on with the other."""
    torch.set_num_threads(1)
    specs = [(3, {"learning_rate": 3e-3, "target_kl": 0.002}), (5, {"learning_rate": 1e-3})]
    alone = []
    for seed, kwargs in specs:
        model = build("MissionGym-v0", seed, kwargs)
        model.learn(2 * 8 * STEPS)
        alone.append((snapshot(model), model._n_updates))
        model.env.close()
    members = [member(build("MissionGym-v0", seed, kwargs), 2 * 8 * STEPS) for seed, kwargs in specs]
    BatchedLearner(members).learn()
    (state0, updates0), (state1, updates1) = alone
    assert updates0 < 2 * 3 == updates1  # the first member's updates did stop early
    assert [m.model._n_updates for m in members] == [updates0, updates1]
    assert max_diff(state0, snapshot(members[0].model)) < TOLERANCE
    assert max_diff(state1, snapshot(members[1].model)) < TOLERANCE


class StopAt(BaseCallback):
    def __init__(self, steps: int) -> None:
        super().__init__()
        self.steps = steps

    def _on_step(self) -> bool:
        return self.model.num_timesteps < self.steps


def test_a_member_that_stops_leaves_the_batch_and_the_others_go_on() -> None:
    torch.set_num_threads(1)
    seed, kwargs = SPECS[1]
    lone = build("MissionGym-v0", seed, kwargs)
    lone.learn(3 * 8 * STEPS)
    expected = snapshot(lone)
    stopping = member(build("MissionGym-v0", 3, {}), 3 * 8 * STEPS, [StopAt(8 * STEPS + 8 * 5)])
    going_on = member(build("MissionGym-v0", seed, kwargs), 3 * 8 * STEPS)
    BatchedLearner([stopping, going_on]).learn()
    assert stopping.status == "stopped" and stopping.model.num_timesteps == 8 * STEPS + 8 * 5
    assert going_on.status == "finished"
    assert max_diff(expected, snapshot(going_on.model)) < TOLERANCE


def test_batched_adam_and_clipping_are_torchs_per_member() -> None:
    torch.manual_seed(0)
    params = [torch.randn(3, 4, 5), torch.randn(3, 5)]
    grads = [[torch.randn_like(p) * 3 for p in params] for _ in range(4)]
    lr, max_norm = torch.tensor([1e-3, 3e-4, 1e-2]), torch.tensor([0.5, 10.0, 0.1])
    stacked = [p.clone() for p in params]
    adam = BatchedAdam(stacked, (0.9, 0.999), 1e-5)
    for g in grads:
        g = [x.clone() for x in g]
        clip_grad_norms(g, max_norm)
        adam.step(g, lr)
    for i in range(3):
        own = [torch.nn.Parameter(p[i].clone()) for p in params]
        opt = torch.optim.Adam(own, lr=float(lr[i]), eps=1e-5)
        for g in grads:
            for p, x in zip(own, g):
                p.grad = x[i].clone()
            torch.nn.utils.clip_grad_norm_(own, float(max_norm[i]))
            opt.step()
        for p, s in zip(own, stacked):
            torch.testing.assert_close(p.detach(), s[i], atol=1e-6, rtol=1e-5)


def test_what_the_batch_does_not_cover_is_named() -> None:
    venv = make_vec_env("MissionGym-v0", 2, "native", seed=0)
    try:
        plain = LeanPPO("MlpPolicy", venv, n_steps=8, batch_size=16, device="cpu")
        assert batchable(plain) is None
        from mission_gym.extras.trunk import trunk_policy

        policy, kwargs = trunk_policy({"net_arch": [16, 16], "activation_fn": torch.nn.Tanh})
        trunk = LeanPPO(policy, venv, n_steps=8, batch_size=16, device="cpu", policy_kwargs=kwargs)
        assert "features extractor MlpTrunk" in (batchable(trunk) or "")
    finally:
        venv.close()


def test_runs_trained_together_follow_each_run_trained_alone(tmp_path) -> None:
    """``train_together`` (a population's members in one process) gives each run the checkpoint its own
    ``Trainer.train`` gives it, to within float rounding, and each run its own files."""
    from mission_gym.plan.command import config_for_argv

    configs = [config_for_argv(["--preset", "quick", "--timesteps", "1024", "--seed", str(s)]) for s in (0, 5)]
    for diff, result in alone_then_together(configs, tmp_path, stop_at=512):
        assert result.status == "paused" and result.timesteps == 516
        assert diff < TOLERANCE
        assert (result.run_dir / "progress.csv").is_file() and (result.run_dir / ".lock").read_text() == ""  # released


def test_a_phase_that_changes_n_epochs_changes_it_alone_and_in_the_batch(tmp_path) -> None:
    """From a phase's start its ``n_epochs`` is every update's count, alone and in the batch (which rebuilds its
    update for it), and each run trained together still follows its lone run."""
    import csv

    from mission_gym.plan.command import config_for_argv

    phases = "phases=[{start: 512, n_epochs: 1}]"
    configs = [
        config_for_argv(["--preset", "quick", "--timesteps", "2048", "--seed", str(s), "--hyperparams", phases])
        for s in (0, 5)
    ]
    for diff, result in alone_then_together(configs, tmp_path, stop_at=1024):
        assert result.status == "paused" and diff < TOLERANCE
        for run in (result.run_dir, tmp_path / "alone" / result.run_dir.name):
            # quick's n_epochs 2 for the update after the first 256-step rollout; the update at step 512 is the phase's
            with open(run / "progress.csv") as f:
                used = [row["train/n_epochs"] for row in csv.DictReader(f) if row.get("train/n_epochs")]
            assert used == ["2", "1", "1", "1"], (run, used)


def test_the_stacked_normaliser_is_each_members_vecnormalize_to_the_bit() -> None:
    """``MemberEnvs`` steps the members' games as one core and normalises their observations and rewards as one
    stacked computation; member by member it returns what that member's own ``VecNormalize(VecMonitor(MissionVecEnv))``
    returns, and leaves its statistics where that wrapper leaves them. Tolerance: none (the same bits)."""
    from mission_gym.vec.grouped import MemberEnvs

    seeds, n_envs = [3, 5, 8], 16

    def envs() -> list[Any]:
        return [make_vec_env("MissionGym-v0", n_envs, "native", seed=s, normalize=True, normalize_reward=True) for s in seeds]

    grouped_envs, alone = envs(), envs()
    first = [env.reset() for env in grouped_envs]
    assert all(np.array_equal(a, env.reset()) for a, env in zip(first, alone))
    grouped = MemberEnvs(grouped_envs, threads=2)
    grouped.start_rollout(first)
    rng = np.random.default_rng(0)
    for _ in range(300):  # several episodes end and restart in the meantime
        actions = rng.integers(0, 11, size=(len(seeds), n_envs, 4))
        obs, rewards, dones, infos = grouped.step(actions)
        for i, env in enumerate(alone):
            o, r, d, info = env.step(actions[i])
            assert np.array_equal(obs[i], o) and np.array_equal(rewards[i], r) and np.array_equal(dones[i], d)
            for k in np.flatnonzero(d):
                assert np.array_equal(infos[i][k]["terminal_observation"], info[k]["terminal_observation"])
    grouped.end_rollout()
    for mine, own in zip(grouped_envs, alone):
        for name in ("obs_rms", "ret_rms"):
            a, b = getattr(mine, name), getattr(own, name)
            assert np.array_equal(a.mean, b.mean) and np.array_equal(a.var, b.var) and a.count == b.count
        assert np.array_equal(mine.returns, own.returns)
        assert np.array_equal(mine.get_original_obs(), own.get_original_obs())
