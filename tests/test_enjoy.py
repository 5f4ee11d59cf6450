"""mission-enjoy headless (SDL's dummy video driver): a baseline and a trained agent play live in the window, closing
the window stops it, and a missing pygame is one line naming the extra."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pygame = pytest.importorskip("pygame", reason="mission-enjoy's window needs pygame (pip install 'mission_gym[play]')")

import gymnasium as gym  # noqa: E402

from mission_gym.baselines import make_policy  # noqa: E402
from mission_gym.envs import MissionEnv  # noqa: E402
from mission_gym.plan.presets import load_preset  # noqa: E402
from mission_gym.scripts import enjoy  # noqa: E402
from mission_gym.training.trainer import Trainer  # noqa: E402


@pytest.fixture(autouse=True)
def headless(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    monkeypatch.setenv("SDL_AUDIODRIVER", "dummy")


def test_baseline_plays_in_the_window(capsys: pytest.CaptureFixture[str]) -> None:
    assert enjoy.main(["--policy", "greedy", "--episodes", "2", "--max-steps", "15", "--fps", "1000"]) == 0
    out = capsys.readouterr().out
    assert "greedy baseline on MissionGym-v0" in out
    assert "episode 1: return" in out and "episode 2: return" in out and "2 episodes, mean return" in out


def test_trained_agent_plays_a_whole_episode(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trainer = Trainer.create(load_preset("quick"), runs_dir=tmp_path, run_name="q", progress=False)
    trainer.train()
    assert enjoy.main([str(tmp_path / "q"), "--episodes", "1", "--fps", "1000", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "episode 1: return" in out and any(o in out for o in ("captured", "all_disabled", "timeout", "stalled"))


def test_closing_the_window_stops_playing(capsys: pytest.CaptureFixture[str]) -> None:
    env = gym.make("MissionGym-v0", render_mode="human")
    greedy = make_policy("greedy", env.unwrapped.config)
    steps = []

    def policy(obs):  # the user closes the window on the 5th step
        steps.append(1)
        if len(steps) == 5:
            pygame.event.post(pygame.event.Event(pygame.QUIT))
        return greedy(obs[None])[0]

    env.unwrapped.metadata = {**env.unwrapped.metadata, "render_fps": 1000}
    assert enjoy.play(env, policy, episodes=0, seed=0, max_steps=None) == []
    assert len(steps) == 5 and isinstance(env.unwrapped, MissionEnv) and env.unwrapped.window_closed
    assert "window closed" in capsys.readouterr().out
    env.close()


def test_bad_input_and_missing_pygame(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert enjoy.main(["--policy", "greedy", "--episodes", "-1"]) == 2
    assert "need --episodes >= 0" in capsys.readouterr().err
    assert enjoy.main(["no_such_run", "--runs-dir", "/nonexistent"]) == 2
    assert "no run 'no_such_run'" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "pygame", None)
    assert enjoy.main(["--policy", "greedy"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "error: mission-enjoy needs pygame, which is not installed: pip install 'mission_gym[play]'"
