"""Episodes as pictures: mp4/gif videos of a model, a run or a scripted baseline, and the evaluation
filmstrips the dashboard shows.

A *policy* here maps one observation to one action: :func:`mission_gym.agents.load_policy` builds one from a
baseline name (``greedy``, ``random``), a run name or a model file.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from PIL import Image

from mission_gym.agents.sources import Policy, PolicySource
from mission_gym.dashboard.frames import write_eval_frames

VIDEO_SUFFIXES: tuple[str, ...] = (".mp4", ".gif")


def frame_grabber(env: gym.Env, width: int) -> Callable[[], np.ndarray]:
    """A function returning the env's current frame ``width`` pixels wide.

    Mission Gym draws straight at that size (with its HUD); other envs' ``render()`` output is rescaled.
    """
    core = getattr(env.unwrapped, "core", None)
    if core is not None and hasattr(core, "snapshot"):
        from mission_gym.envs.rendering import render_frame

        return lambda: render_frame(core.snapshot(0), width, width)

    def grab() -> np.ndarray:
        frame = env.render()
        if frame is None:
            raise RuntimeError(f"{env.spec.id if env.spec else env} returned no frame from render()")
        frame = np.asarray(frame)[..., :3]
        if frame.shape[1] != width:
            height = max(2, 2 * round(frame.shape[0] * width / frame.shape[1] / 2))  # even, for video codecs
            frame = np.asarray(Image.fromarray(frame).resize((width, height), Image.Resampling.LANCZOS))
        return frame

    return grab


@dataclass
class EpisodeSummary:
    """How one recorded episode went."""

    seed: int
    steps: int
    ret: float
    outcome: str | None
    frames: int = 0


def play_episode(
    env: gym.Env,
    policy: Policy,
    seed: int,
    max_steps: int | None = None,
    on_frame: Callable[[int, np.ndarray], None] | None = None,
    grab: Callable[[], np.ndarray] | None = None,
    want: Callable[[int], bool] | None = None,
) -> EpisodeSummary:
    """Run one episode, handing ``(step, frame)`` to ``on_frame`` after the reset (step 0), after each
    step ``want(step)`` accepts (default: every step) and always after the last step.

    :param env: the env (``render_mode="rgb_array"`` when no ``grab`` is given)
    :param policy: observation -> action
    :param seed: the reset seed
    :param max_steps: stop after this many steps even if the episode goes on
    :param on_frame: receives the frames; None draws nothing
    :param grab: returns the current frame (default ``env.render``)
    :param want: which intermediate steps to draw, so skipped frames cost no rendering
    """
    grab = grab or (lambda: np.asarray(env.render()))
    obs, _ = env.reset(seed=seed)
    summary = EpisodeSummary(seed=seed, steps=0, ret=0.0, outcome=None)

    def emit() -> None:
        if on_frame is not None:
            on_frame(summary.steps, grab())
            summary.frames += 1

    emit()
    done = False
    while not done and (max_steps is None or summary.steps < max_steps):
        obs, reward, terminated, truncated, info = env.step(policy(obs))
        summary.steps += 1
        summary.ret += float(reward)
        done = terminated or truncated
        if done:
            summary.outcome = info.get("outcome") or ("terminated" if terminated else "truncated")
        last = done or (max_steps is not None and summary.steps >= max_steps)
        if last or want is None or want(summary.steps):
            emit()
    return summary


class FilmStrip:
    """Keeps about ``2 * max_frames`` evenly spaced frames of an episode of unknown length: when full
    it drops every other frame and halves how often it asks for new ones.

    :param max_frames: frames wanted in the end
    """

    def __init__(self, max_frames: int) -> None:
        self.capacity = max(2, 2 * max_frames)
        self.every = 1
        self.frames: list[tuple[int, np.ndarray]] = []

    def want(self, step: int) -> bool:
        return step % self.every == 0

    def add(self, step: int, frame: np.ndarray) -> None:
        self.frames.append((step, frame))
        if len(self.frames) > self.capacity:
            last = self.frames[-1]
            self.frames = [f for f in self.frames if f[0] % (2 * self.every) == 0]
            if self.frames[-1][0] != last[0]:
                self.frames.append(last)  # the newest frame may be the episode's end: keep it
            self.every *= 2


class _Writer:
    """Writes frames into an mp4 (libx264 through imageio-ffmpeg, streamed) or a gif (Pillow).

    A frame can be held for extra frame periods: an mp4 repeats it (constant frame rate), a gif
    lengthens its delay. GIF frames are kept as 1-byte palette images until :meth:`close`, because
    Pillow writes an animated GIF in one go; long episodes are better recorded as mp4 or at a smaller
    ``--width``. :attr:`count` is the number of frames in the file.
    """

    def __init__(self, path: Path, fps: float) -> None:
        self.path, self.fps = path, fps
        self.size: tuple[int, int] | None = None
        self.count = 0
        self._gif: list[Image.Image] | None = None
        self._periods: list[int] = []
        self._last: np.ndarray | None = None
        self._mp4: Any = None
        if path.suffix.lower() == ".mp4":
            from mission_gym.optional import require

            require("imageio_ffmpeg", "an mp4 video")  # imageio's FFMPEG writer runs its ffmpeg binary
            iio = require("imageio.v2", "an mp4 video")

            self._mp4 = iio.get_writer(
                path,
                format="FFMPEG",
                fps=fps,
                codec="libx264",
                quality=8,
                pixelformat="yuv420p",
                macro_block_size=1,
                ffmpeg_log_level="error",
            )
        else:
            self._gif = []

    def append(self, frame: np.ndarray, hold: int = 0) -> None:
        """Add ``frame``, shown for ``1 + hold`` frame periods."""
        size = (frame.shape[1], frame.shape[0])
        if self.size is None:
            self.size = size
        elif size != self.size:
            raise ValueError(f"frame size changed from {self.size} to {size}")
        if self._mp4 is not None:
            for _ in range(1 + hold):
                self._mp4.append_data(frame)
            self.count += 1 + hold
        elif self._gif is not None:
            if self._last is not None and np.array_equal(frame, self._last):
                self._periods[-1] += 1 + hold  # Pillow would merge an identical frame anyway
                return
            self._last = frame
            self._gif.append(Image.fromarray(frame).quantize(256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE))
            self._periods.append(1 + hold)
            self.count += 1

    def close(self) -> None:
        if self._mp4 is not None:
            self._mp4.close()
            self._mp4 = None
        if self._gif:
            # GIF delays are whole milliseconds here (viewers round them to centiseconds)
            durations = [round(1000 * p / self.fps) for p in self._periods]
            self._gif[0].save(self.path, format="GIF", save_all=True, append_images=self._gif[1:], duration=durations, loop=0)
        self._gif = None

    def abort(self) -> None:
        """Stop without writing the rest (the caller deletes the file)."""
        self._gif = None
        self.close()


@dataclass
class VideoResult:
    """What :func:`record_video` wrote."""

    path: Path
    frames: int
    size: tuple[int, int]
    fps: float
    episodes: list[EpisodeSummary]


def check_video_args(out: str | Path, episodes: int, fps: float, width: int, max_steps: int | None, hold_s: float) -> Path:
    """Validate :func:`record_video`'s arguments, raising :class:`ValueError` with a one-line reason."""
    path = Path(out)
    if path.suffix.lower() not in VIDEO_SUFFIXES:
        raise ValueError(f"output {str(out)!r} must end in .mp4 or .gif")
    if episodes < 1:
        raise ValueError(f"--episodes must be >= 1, got {episodes}")
    if not (math.isfinite(fps) and fps > 0):
        raise ValueError(f"--fps must be > 0, got {fps}")
    if width < 64 or width > 4096:
        raise ValueError(f"--width must be between 64 and 4096 pixels, got {width}")
    if path.suffix.lower() == ".mp4" and width % 2:
        raise ValueError(f"--width must be even for mp4 (H.264 needs even sizes), got {width}")
    if max_steps is not None and max_steps < 1:
        raise ValueError(f"--max-steps must be >= 1, got {max_steps}")
    if not (math.isfinite(hold_s) and hold_s >= 0):
        raise ValueError(f"--hold must be >= 0 seconds, got {hold_s}")
    return path


def record_video(
    out: str | Path,
    source: PolicySource,
    episodes: int = 1,
    seed: int = 0,
    max_steps: int | None = None,
    fps: float = 16.0,
    width: int = 600,
    hold_s: float = 1.0,
) -> VideoResult:
    """Record ``episodes`` episodes of ``source`` into an mp4 or gif.

    Each episode contributes a frame after its reset and one per step, and its last frame is held
    ``hold_s`` seconds longer so the outcome can be read (an mp4 repeats it ``round(hold_s * fps)``
    times; a gif gives it a longer delay instead, so a gif has exactly one frame per step plus one).
    The file is written under a temporary name and renamed when complete.

    :param out: ``.mp4`` or ``.gif`` path (parent folders are created)
    :param source: the policy and its env (see :func:`~mission_gym.agents.load_policy`)
    :param episodes: how many episodes, with reset seeds ``seed``, ``seed + 1``, ...
    :param seed: first episode's seed
    :param max_steps: cut each episode after this many steps
    :param fps: frames per second of the video (the env runs at 4 steps per sim second, so 16 is 4x)
    :param width: frame width in pixels (Mission Gym frames are square)
    :param hold_s: seconds to hold each episode's final frame
    """
    path = check_video_args(out, episodes, fps, width, max_steps, hold_s)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.partial{path.suffix}")
    env = source.make_env()
    writer = _Writer(tmp, fps)
    summaries = []
    try:
        grab = frame_grabber(env, width)
        hold = int(round(hold_s * fps))
        for i in range(episodes):
            # each frame is written when the next arrives, so the episode's last one can be held
            pending: list[np.ndarray] = []

            def keep(step: int, frame: np.ndarray, pending: list[np.ndarray] = pending) -> None:
                if pending:
                    writer.append(pending.pop())
                pending.append(frame)

            summaries.append(play_episode(env, source.policy, seed + i, max_steps, on_frame=keep, grab=grab))
            writer.append(pending.pop(), hold=hold)
        writer.close()
        os.replace(tmp, path)
    except BaseException:
        writer.abort()
        tmp.unlink(missing_ok=True)
        raise
    finally:
        env.close()
    assert writer.size is not None
    return VideoResult(path, writer.count, writer.size, fps, summaries)


def record_eval_frames(
    run_dir: str | Path,
    policy: Policy,
    timesteps: int,
    env: gym.Env | None = None,
    env_kwargs: dict[str, Any] | None = None,
    seed: int = 0,
    max_frames: int = 8,
    width: int = 320,
    keep: int = 3,
) -> list[Path]:
    """Play one evaluation episode and save an evenly spaced filmstrip of it for the run's dashboard.

    Only the frames kept are drawn, so this costs one episode of env steps plus ``max_frames``
    renders. Call it from an evaluation callback, e.g. with
    ``policy=lambda o: model.predict(vec_normalize.normalize_obs(o), deterministic=True)[0]``.

    :param run_dir: the run directory (frames go to ``frames/``)
    :param policy: observation -> action, for one (un-normalised) observation
    :param timesteps: training timesteps now (names the set)
    :param env: an env to play in (default: a new ``MissionGym-v0`` with ``env_kwargs``); it is reset, not closed
    :param env_kwargs: overrides for the default env
    :param seed: reset seed of the episode
    :param max_frames: frames in the filmstrip
    :param width: frame width in pixels
    :param keep: evaluations to keep on disk
    :return: the PNG files written
    """
    own = env is None
    if env is None:
        from mission_gym.envs import ENV_ID

        env = PolicySource(policy, ENV_ID, dict(env_kwargs or {})).make_env()
    try:
        strip = FilmStrip(max_frames)
        play_episode(env, policy, seed, on_frame=strip.add, grab=frame_grabber(env, width), want=strip.want)
        frames = [f for _, f in strip.frames]
        return write_eval_frames(run_dir, frames, timesteps, max_frames=max_frames, width=width, keep=keep)
    finally:
        if own:
            env.close()


def iter_frames(path: str | Path) -> Iterator[np.ndarray]:
    """The frames of a video file, for checks and tests."""
    from mission_gym.optional import require

    iio = require("imageio.v2", "reading a video")

    reader = iio.get_reader(path)
    try:
        yield from reader
    finally:
        reader.close()
