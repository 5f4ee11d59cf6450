"""The trainer's leaner PPO (mission_gym/ppo/lean.py) computes SB3's update: to the bit with ``exact``, and within
float rounding with its sigmoid tanh and fused Adam; its models are SB3's."""

from __future__ import annotations

import pytest
import torch
from stable_baselines3 import PPO

from mission_gym.ppo.lean import FastTanh, LeanPPO
from mission_gym.vec.factory import make_vec_env


class ExactLeanPPO(LeanPPO):
    exact = True


def fit(cls: type, env_id: str, ent_coef: float, n_envs: int, kind: str, rollouts: int = 3) -> PPO:
    """A model of ``cls`` trained a few rollouts (its envs closed after)."""
    venv = make_vec_env(env_id, n_envs, kind, seed=3, normalize=True, normalize_reward=True)
    try:
        model = cls("MlpPolicy", venv, n_steps=32, batch_size=64, n_epochs=3, learning_rate=1e-3, ent_coef=ent_coef,
                    seed=3, device="cpu", policy_kwargs={"net_arch": [32, 32]})  # fmt: skip
        model.learn(rollouts * n_envs * 32)
        return model
    finally:
        venv.close()


def weights(model: PPO) -> dict[str, torch.Tensor]:
    """The policy's parameters and Adam's moments."""
    state = {k: v.clone() for k, v in model.policy.state_dict().items()}
    state.update({f"adam/{k}/{n}": s[n] for k, s in model.policy.optimizer.state_dict()["state"].items()
                  for n in ("exp_avg", "exp_avg_sq")})  # fmt: skip
    return state


def train(cls: type, env_id: str, ent_coef: float, n_envs: int, kind: str, rollouts: int = 3) -> dict[str, torch.Tensor]:
    return weights(fit(cls, env_id, ent_coef, n_envs, kind, rollouts))


@pytest.mark.parametrize(
    "env_id, ent_coef, n_envs, kind",
    [
        ("MissionGym-v0", 0.0, 8, "native"),  # the lean heads and sampling, the graph-free entropy
        ("MissionGym-v0", 0.01, 8, "native"),  # the entropy with its graph
        ("CartPole-v1", 0.0, 2, "dummy"),  # Discrete: SB3's own distribution, the lean minibatches
        ("Pendulum-v1", 0.0, 2, "dummy"),  # Box: the lean Gaussian, truncated episodes bootstrapped
        ("Pendulum-v1", 0.01, 2, "dummy"),  # the Gaussian's entropy with its graph
    ],
)
def test_exact_lean_ppo_trains_to_the_same_bits_as_sb3(env_id: str, ent_coef: float, n_envs: int, kind: str) -> None:
    torch.set_num_threads(1)
    sb3 = train(PPO, env_id, ent_coef, n_envs, kind)
    lean = train(ExactLeanPPO, env_id, ent_coef, n_envs, kind)
    assert sb3.keys() == lean.keys()
    assert [k for k in sb3 if not torch.equal(sb3[k], lean[k])] == []


@pytest.mark.parametrize("ent_coef", [0.0, 0.01])  # 0.01: the entropy's probabilities as exp, with their graph
def test_lean_ppo_stays_within_float_rounding_of_sb3(ent_coef: float) -> None:
    torch.set_num_threads(1)
    sb3 = train(PPO, "MissionGym-v0", ent_coef, 8, "native")
    lean = train(LeanPPO, "MissionGym-v0", ent_coef, 8, "native")
    diff = max((sb3[k] - lean[k]).abs().max().item() for k in sb3 if not k.startswith("adam/"))
    assert 0 < diff < 1e-5  # not the same bits (sigmoid tanh, fused Adam, exp for softmax), the same functions


def test_fast_tanh_is_tanh_to_float_rounding_with_tanhs_gradient() -> None:
    x = torch.linspace(-12, 12, 100_001, dtype=torch.float32, requires_grad=True)
    y = FastTanh()(x)
    assert (y - torch.tanh(x)).abs().max().item() < 3e-7
    (grad,) = torch.autograd.grad(y.sum(), x)
    assert torch.allclose(grad, 1 - torch.tanh(x.detach()) ** 2, atol=1e-6)
    small = x.detach()[::1000]  # a MuJoCo rollout's few rows: PyTorch's own tanh below min_elements
    assert torch.equal(FastTanh(min_elements=8192)(small), torch.tanh(small))
    assert not torch.equal(FastTanh()(small), torch.tanh(small))


@pytest.mark.parametrize(
    "env_id, n_envs, kind, min_elements", [("MissionGym-v0", 128, "native", 0), ("Pendulum-v1", 8, "dummy", 8192)]
)
def test_tanh_takes_the_sigmoid_form_by_the_rollouts_width(env_id: str, n_envs: int, kind: str, min_elements: int) -> None:
    """A Mission Gym member (128 envs x 64 units) computes every tanh in the sigmoid form, as its runs were measured;
    a rollout of a few rows (MuJoCo's 8 envs) keeps PyTorch's tanh on its small inputs."""
    venv = make_vec_env(env_id, n_envs, kind, seed=0, normalize=False, normalize_reward=False)
    try:
        model = LeanPPO("MlpPolicy", venv, n_steps=8, batch_size=8, device="cpu")
        layers = [m for m in model.policy.modules() if isinstance(m, FastTanh)]
        assert layers and {m.min_elements for m in layers} == {min_elements}
    finally:
        venv.close()


def test_a_lean_model_is_sb3s_own(tmp_path) -> None:
    venv = make_vec_env("CartPole-v1", 2, "dummy", seed=0)
    model = LeanPPO("MlpPolicy", venv, n_steps=32, batch_size=32, n_epochs=1, seed=0, device="cpu")
    assert any(isinstance(m, FastTanh) for m in model.policy.modules())  # the live policy computes the fast tanh
    model.learn(64)
    model.save(tmp_path / "m.zip")
    venv.close()
    plain = PPO.load(tmp_path / "m.zip", device="cpu")  # SB3's PPO, SB3's modules: nothing of mission_gym
    assert type(plain.policy).__module__.startswith("stable_baselines3")
    assert not any(type(m).__module__.startswith("mission_gym") for m in plain.policy.modules())
    resumed = LeanPPO.load(tmp_path / "m.zip", device="cpu")
    assert any(isinstance(m, FastTanh) for m in resumed.policy.modules())
    assert all(torch.equal(a, b) for a, b in zip(plain.policy.state_dict().values(), resumed.policy.state_dict().values()))


class CompiledLeanPPO(LeanPPO):
    compile_update = True


def test_a_compiled_update_stays_within_float_rounding_of_the_eager_one(tmp_path) -> None:
    """``compile_update`` computes the same update through torch.compile; its compiled function is not saved with
    the model."""
    torch.set_num_threads(1)
    eager = train(LeanPPO, "Pendulum-v1", 0.0, 2, "dummy")
    model = fit(CompiledLeanPPO, "Pendulum-v1", 0.0, 2, "dummy")  # one compile: a cold one is most of this test
    assert model._compiled is not None
    compiled = weights(model)
    diff = max((eager[k] - compiled[k]).abs().max().item() for k in eager if not k.startswith("adam/"))
    assert diff < 1e-5
    model.save(tmp_path / "m.zip")
    assert LeanPPO.load(tmp_path / "m.zip", device="cpu")._compiled is None


def test_an_update_that_cannot_compile_warns_and_runs_eager(monkeypatch) -> None:
    """Without a C++ compiler torch.compile fails at its first call: one warning, and the update eager to the bit."""
    import mission_gym.ppo.lean as lean

    def no_compiler(fn):
        def fails(*args, **kwargs):
            raise RuntimeError("InductorError: no C++ compiler")

        return fails

    torch.set_num_threads(1)
    eager = train(LeanPPO, "Pendulum-v1", 0.0, 2, "dummy")
    monkeypatch.setattr(lean.th, "compile", no_compiler)
    with pytest.warns(UserWarning, match="compile_update: torch.compile failed") as caught:
        fallback = train(CompiledLeanPPO, "Pendulum-v1", 0.0, 2, "dummy")
    assert len([w for w in caught if "compile_update" in str(w.message)]) == 1
    assert [k for k in eager if not torch.equal(eager[k], fallback[k])] == []
