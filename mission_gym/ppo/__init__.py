"""The PPO algorithm: :class:`~mission_gym.ppo.lean.LeanPPO` (SB3's PPO with less overhead), its arithmetic written
once for every learner (:mod:`~mission_gym.ppo.maths`), its entropy and schedules, a distillation's loss term
(:mod:`~mission_gym.ppo.distill`) and the batched learner that trains several members as one
(:mod:`~mission_gym.ppo.batched`). The training session around it (building a run, the trainer, its callbacks) is
:mod:`mission_gym.training`.
"""
