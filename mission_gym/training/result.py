"""What a training session did (:class:`TrainResult`): its status and exit code, its steps and time, its final
evaluation; the trainer returns it and records it in ``metadata.json``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mission_gym.rundir.evaluations import EvalRecord


@dataclass
class TrainResult:
    """What a training session did.

    :param status: ``finished``, ``paused`` (``stop_at``), ``stopped`` (a callback raised
        :class:`~mission_gym.training.callbacks.StopTraining`), ``interrupted`` or ``crashed``
    :param exit_code: 0, 130 (SIGINT), 143 (SIGTERM) or 1
    """

    run_dir: Path
    status: str
    exit_code: int
    timesteps: int
    target_timesteps: int
    session_steps: int
    wall_s: float
    learn_s: float
    rollout_s: float
    train_s: float
    eval_s: float
    save_s: float
    final_eval: EvalRecord | None = None
    checkpoint: Path | None = None
    message: str = ""

    @property
    def fps(self) -> float:
        """Env steps per second of training wall time (evaluation and saving included)."""
        return self.session_steps / self.learn_s if self.learn_s > 0 else 0.0

    @property
    def shares(self) -> dict[str, float]:
        """Fractions of the training wall time: rollout (env + inference), update (PPO), other (eval, saving, logging)."""
        if self.learn_s <= 0:
            return {"rollout": 0.0, "update": 0.0, "other": 0.0}
        rollout, update = self.rollout_s / self.learn_s, self.train_s / self.learn_s
        return {"rollout": rollout, "update": update, "other": max(0.0, 1.0 - rollout - update)}

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "final_eval"}
        out.update(fps=self.fps, shares=self.shares, run_dir=str(self.run_dir), checkpoint=str(self.checkpoint or ""))
        out["final_eval"] = None if self.final_eval is None else self.final_eval.row() | {"outcomes": self.final_eval.outcomes}
        return out

    def summary(self) -> str:
        s = self.shares
        lines = [
            f"{self.status}: {self.timesteps:,} / {self.target_timesteps:,} steps in {self.run_dir}",
            f"  wall {self.wall_s:.1f} s (training {self.learn_s:.1f} s)   {self.fps:,.0f} steps/s",
            f"  time: update {100 * s['update']:.0f}%  rollout {100 * s['rollout']:.0f}%  "
            f"eval/save/other {100 * s['other']:.0f}%",
        ]
        ev = self.final_eval
        if ev is not None:
            lines.append(
                f"  final eval ({ev.n_episodes} episodes): {ev.win_text()}return {ev.mean_return:.2f} ± {ev.std_return:.2f}  "
                f"length {ev.mean_ep_length:.0f}"
            )
        if self.checkpoint is not None:
            lines.append(f"  checkpoint {self.checkpoint}")
        if self.message:
            lines.append(f"  {self.message}")
        return "\n".join(lines)
