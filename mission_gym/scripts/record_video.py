"""Record episodes of a trained model, a run or a scripted baseline as an mp4 or a gif.

Examples::

    python -m mission_gym.scripts.record_video my_run --out videos/my_run.mp4 --episodes 3
    python -m mission_gym.scripts.record_video runs/my_run/best_model.zip --out best.gif --width 320
    python -m mission_gym.scripts.record_video --policy greedy --out greedy.gif --episodes 1 --max-steps 400
    python -m mission_gym.scripts.record_video zoo_run --trust-pickle --out zoo.gif   # pickles only: if you trust it
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter

from mission_gym.agents import load_policy
from mission_gym.dashboard.video import check_video_args, record_video
from mission_gym.scripts.cli import CliParser, add_trust_pickle, command_main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = CliParser(
        prog="python -m mission_gym.scripts.record_video",
        description="Record N episodes as an mp4 (H.264 via imageio-ffmpeg) or a gif, with the HUD drawn on each frame.",
    )
    parser.add_argument("source", nargs="?", help="a model .zip, a run directory, or a run name under --runs-dir")
    parser.add_argument("--policy", help="record a scripted baseline instead: greedy or random")
    parser.add_argument("--out", required=True, help="output file, .mp4 or .gif")
    parser.add_argument("--episodes", type=int, default=1, help="episodes to record (default 1)")
    parser.add_argument(
        "--seed", type=int, default=0, help="reset seed of the first episode; episode i uses seed+i (default 0)"
    )
    parser.add_argument("--max-steps", type=int, default=None, help="cut each episode after this many steps")
    parser.add_argument(
        "--fps", type=float, default=16.0, help="video frames per second; the env steps 4 times per sim second"
    )
    parser.add_argument("--width", type=int, default=600, help="frame width in pixels (default 600)")
    parser.add_argument("--hold", type=float, default=1.0, help="seconds to hold each episode's last frame (default 1)")
    parser.add_argument("--scenario", default=None, help="a scenario YAML file to play instead of the default (or the run's)")
    parser.add_argument("--config-dir", default=None, help="a directory of YAML files merged over the default configs")
    parser.add_argument("--runs-dir", default="runs", help="where run names are looked up (default runs)")
    parser.add_argument("--device", default="cpu", help="torch device for a model (default cpu)")
    add_trust_pickle(parser)
    return parser.parse_args(argv)


@command_main
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not os.environ.get("DISPLAY"):  # no screen: MuJoCo tasks render through EGL, off-screen, before any is imported
        os.environ.setdefault("MUJOCO_GL", "egl")
    try:
        check_video_args(args.out, args.episodes, args.fps, args.width, args.max_steps, args.hold)
        env_kwargs = {k: v for k, v in (("scenario", args.scenario), ("config_dir", args.config_dir)) if v is not None}
        source = load_policy(
            args.source, args.policy, runs_dir=args.runs_dir, seed=args.seed, env_kwargs=env_kwargs, device=args.device,
            trust_pickle=args.trust_pickle,
        )  # fmt: skip
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        result = record_video(
            args.out,
            source,
            episodes=args.episodes,
            seed=args.seed,
            max_steps=args.max_steps,
            fps=args.fps,
            width=args.width,
            hold_s=args.hold,
        )
    except Exception as exc:  # the env's own renderer (MuJoCo without an OpenGL context): one line, nothing written
        if type(exc).__module__.split(".")[0] not in ("mujoco", "pygame"):
            raise
        hint = "; MuJoCo renders off-screen with MUJOCO_GL=egl (or osmesa)" if "mujoco" in type(exc).__module__ else ""
        print(f"error: {source.env_id} could not render a frame: {str(exc).splitlines()[0]}{hint}", file=sys.stderr)
        return 2
    outcomes = Counter(e.outcome or "cut" for e in result.episodes)
    mean_ret = sum(e.ret for e in result.episodes) / len(result.episodes)
    print(
        f"wrote {result.path}: {len(result.episodes)} episodes of {source.label}, {result.frames} frames "
        f"{result.size[0]}x{result.size[1]} at {result.fps:g} fps; mean return {mean_ret:.1f}; "
        f"outcomes {', '.join(f'{k} {v}' for k, v in sorted(outcomes.items()))}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
