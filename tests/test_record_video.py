"""record_video writes mp4 and gif files with the expected frame count and size; bad input is one line, exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from mission_gym.agents import load_policy
from mission_gym.dashboard.frames import frame_sets
from mission_gym.dashboard.video import FilmStrip, iter_frames, record_eval_frames, record_video
from mission_gym.scripts import record_video as cli


def test_mp4_through_the_cli(tmp_path: Path) -> None:
    out = tmp_path / "videos" / "greedy.mp4"
    cmd = [sys.executable, "-m", "mission_gym.scripts.record_video", "--policy", "greedy", "--out", str(out)]
    cmd += ["--episodes", "2", "--max-steps", "5", "--width", "128", "--fps", "8", "--hold", "0.5", "--seed", "3"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "20 frames 128x128" in proc.stdout
    frames = list(iter_frames(out))
    # per episode: the reset frame, 5 steps, then the last frame held 0.5 s at 8 fps
    assert len(frames) == 2 * (1 + 5 + 4)
    assert frames[0].shape == (128, 128, 3)
    assert frames[0].std() > 10  # a real picture, not a blank
    assert not list(out.parent.glob(".*partial*"))  # the temporary file was renamed


def test_gif(tmp_path: Path) -> None:
    source = load_policy(baseline="random", seed=1)
    result = record_video(tmp_path / "random.gif", source, episodes=2, max_steps=6, fps=10, width=96, hold_s=0.5)
    assert result.frames == 14 and result.size == (96, 96)  # per episode the reset frame and 6 steps
    frames = list(iter_frames(result.path))
    assert len(frames) == 14
    assert frames[0].shape[:2] == (96, 96)
    assert all(e.steps == 6 and e.outcome is None for e in result.episodes)
    with Image.open(result.path) as gif:  # a gif holds the last frame with a longer delay, not extra frames
        gif.seek(5)
        assert gif.info["duration"] == 100
        gif.seek(6)
        assert gif.info["duration"] == 600


def test_film_strip_keeps_even_spacing_and_the_end() -> None:
    strip = FilmStrip(max_frames=4)
    for step in range(0, 1001):
        if step in (0, 1000) or strip.want(step):
            strip.add(step, np.zeros((1, 1, 3), dtype=np.uint8))
    steps = [s for s, _ in strip.frames]
    assert steps[0] == 0 and steps[-1] == 1000 and len(steps) <= 9
    gaps = np.diff(steps[:-1])
    assert len(set(gaps)) == 1  # evenly spaced but for the final frame


@pytest.mark.parametrize(
    "args, message",
    [
        (["--policy", "greedy", "--out", "x.avi"], "must end in .mp4 or .gif"),
        (["--policy", "greedy", "--out", "x.mp4", "--width", "101"], "must be even for mp4"),
        (["--policy", "greedy", "--out", "x.gif", "--episodes", "0"], "--episodes must be >= 1"),
        (["--policy", "gredy", "--out", "x.gif"], "did you mean greedy?"),
        (["--out", "x.gif"], "exactly one of"),
        (["some_run", "--policy", "greedy", "--out", "x.gif"], "exactly one of"),
        (["--policy", "greedy", "--out", "x.gif", "--fps", "abc"], "invalid float value"),
    ],
)
def test_bad_input_is_one_line_exit_2(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        sys.exit(cli.main(args))
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_unknown_run_is_one_line_exit_2(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "mission_gym.scripts.record_video", "no_such_run", "--out", str(tmp_path / "x.mp4")]
    proc = subprocess.run(cmd + ["--runs-dir", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "x.mp4").exists()


def test_record_eval_frames(tmp_path: Path) -> None:
    greedy = load_policy(baseline="greedy")
    written = record_eval_frames(tmp_path, greedy.policy, timesteps=4096, seed=0, max_frames=5, width=160)
    assert len(written) == 5
    sets = frame_sets(tmp_path / "frames")
    assert list(sets) == [4096]
    first, last = (np.asarray(Image.open(p)) for p in (sets[4096][0], sets[4096][-1]))
    assert first.shape == (160, 160, 3) and not np.array_equal(first, last)


def test_model_source_through_load_agent(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The MODEL|RUN path: whatever ``load_agent`` returns is driven through ``predict(obs, deterministic=True)``."""
    from mission_gym.agents import sources

    calls: list[tuple[str, str]] = []

    class FakeAgent:
        env_id = "MissionGym-v0"
        env_kwargs = {"reward": {"win_bonus": 1.0}}
        spec = None  # a model outside a run, loaded from pickles: no wrappers, no frame stack

        def predict(self, obs: np.ndarray, deterministic: bool = True) -> tuple[np.ndarray, None]:
            assert deterministic and obs.shape == (100,)
            return np.full(4, 3), None  # every attacker east

    def load_agent(model_or_run: str, runs_dir: str = "runs", device: str = "cpu", trust_pickle: bool = False) -> FakeAgent:
        calls.append((model_or_run, str(runs_dir)))
        if model_or_run == "missing":
            raise FileNotFoundError("no run or model 'missing' in 'runs'")
        return FakeAgent()

    monkeypatch.setattr(sources, "load_agent", load_agent)
    source = load_policy("my_run", runs_dir=tmp_path)
    assert calls == [("my_run", str(tmp_path))] and source.env_kwargs == {"reward": {"win_bonus": 1.0}}
    result = record_video(tmp_path / "m.gif", source, max_steps=3, width=64, hold_s=0)
    assert result.frames == 4
    with pytest.raises(ValueError, match="no run or model 'missing'"):
        load_policy("missing")
