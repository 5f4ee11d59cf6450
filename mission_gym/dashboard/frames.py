"""Snapshot frames of evaluation episodes, stored in ``runs/<run>/frames/`` for the dashboard.

The trainer (or anyone) calls :func:`write_eval_frames` with the RGB frames of one evaluation
episode; the dashboard shows the newest set as a filmstrip. Only numpy and Pillow are imported,
so calling this from a training loop costs nothing at import time.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image

FRAMES_DIR = "frames"
_NAME = re.compile(r"^eval_(\d+)_(\d+)\.png$")


def pick_frames(n: int, max_frames: int) -> list[int]:
    """Indices of up to ``max_frames`` frames spread evenly over ``n``, always with the first and last."""
    if n <= 0 or max_frames <= 0:
        return []
    if n <= max_frames:
        return list(range(n))
    return sorted({int(round(i)) for i in np.linspace(0, n - 1, max_frames)})


def write_eval_frames(
    run_dir: str | Path,
    frames: Sequence[np.ndarray],
    timesteps: int,
    max_frames: int = 8,
    width: int = 320,
    keep: int = 3,
) -> list[Path]:
    """Save a filmstrip of one evaluation episode as PNGs for the run's dashboard.

    Files are ``frames/eval_<timesteps>_<k>.png``; only the newest ``keep`` evaluations are kept.

    :param run_dir: the run directory
    :param frames: the episode's RGB frames ``(H, W, 3)`` uint8, in order (e.g. ``env.render()`` after each step)
    :param timesteps: training timesteps at this evaluation (names and orders the set)
    :param max_frames: how many frames to keep, spread evenly over the episode (first and last included)
    :param width: frames wider than this are scaled down to it (aspect kept)
    :param keep: evaluations to keep on disk; older sets are deleted
    :return: the written files
    """
    if timesteps < 0:
        raise ValueError(f"timesteps must be >= 0, got {timesteps}")
    out_dir = Path(run_dir) / FRAMES_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for k, i in enumerate(pick_frames(len(frames), max_frames)):
        frame = np.asarray(frames[i])
        if frame.ndim != 3 or frame.shape[2] not in (3, 4):
            raise ValueError(f"frame {i} has shape {frame.shape}; expected (H, W, 3) RGB")
        img = Image.fromarray(frame.astype(np.uint8)[..., :3])
        if img.width > width:
            img = img.resize((width, max(1, round(img.height * width / img.width))), Image.Resampling.LANCZOS)
        path = out_dir / f"eval_{int(timesteps):012d}_{k:02d}.png"
        tmp = path.with_name(path.name + ".tmp")
        img.save(tmp, format="PNG")  # optimize=True: 7% smaller files at 5x the time (12 against 2.3 ms a frame)
        os.replace(tmp, path)  # a dashboard refresh never reads half a file
        written.append(path)
    sets = frame_sets(out_dir)
    for old in sorted(sets)[:-keep] if keep > 0 else []:
        for path in sets[old]:
            path.unlink(missing_ok=True)
    return written


def frame_sets(frames_dir: str | Path) -> dict[int, list[Path]]:
    """Evaluation frame files grouped by timesteps, each group in filmstrip order."""
    groups: dict[int, list[Path]] = {}
    d = Path(frames_dir)
    if not d.is_dir():
        return groups
    for path in sorted(d.iterdir()):
        m = _NAME.match(path.name)
        if m:
            groups.setdefault(int(m.group(1)), []).append(path)
    return groups
