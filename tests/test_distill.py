"""Distillation towards per-game teachers (mission_gym/ppo/distill.py): the KL term, the teacher each game gets, and a
student that moves towards its teacher."""

from __future__ import annotations

import numpy as np
import torch
from stable_baselines3.common.logger import KVWriter, Logger

from mission_gym.ppo.distill import Teacher, Teachers, all_situations, kl_to_teacher, linear_coef, situation
from mission_gym.ppo.lean import LeanPPO
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
        [], {"patrol+patrol": 0, "guard_objective+guard_objective": 1}, fallback=2, n_defenders=2, heads=(4, 11)
    )

    class Core:  # modes (patrol 0, guard 1, intercept 2) of four games' two defenders
        dm = np.zeros((4, 2, 8))

    from mission_gym.sim import layout as L

    Core.dm[:, :, L.D_MODE] = [[0, 0], [1, 1], [0, 1], [1, 0]]
    assert teachers.of_games(Core).tolist() == [0, 1, 2, 2]


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
    teacher = Teacher(teacher_model.policy, None, None)
    student = model(2)
    student.teachers = Teachers([teacher], {}, fallback=0, n_defenders=2, heads=(4, 11))
    student.distill_coef = linear_coef(5.0, 0, 10**9)
    kls: list[float] = []

    class Capture(KVWriter):
        def write(self, key_values, key_excluded, step=0):
            if "train/distill_kl" in key_values:
                kls.append(key_values["train/distill_kl"])

    student.set_logger(Logger(None, [Capture()]))
    student.learn(6 * 8 * 32)
    assert len(kls) == 5 and kls[-1] < 0.5 * kls[0]
