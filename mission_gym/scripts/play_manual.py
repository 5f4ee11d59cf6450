"""Drive the attackers yourself, from the keyboard, in a pygame window (needs ``pip install mission_gym[play]``)."""

from __future__ import annotations

import argparse
import sys

from mission_gym.scripts.cli import CliParser, command_main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from mission_gym.envs.manual import KEYS_HELP

    parser = CliParser(
        prog="python -m mission_gym.scripts.play_manual",
        description="Play Mission Gym: steer the attackers to capture the objective while the defenders hunt them.",
        epilog=KEYS_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--seed", type=int, default=None, help="seed of the first episode")
    parser.add_argument("--fps", type=float, default=8.0, help="env steps per second (4 = real time; default 8)")
    parser.add_argument("--width", type=int, default=700, help="window size in pixels (default 700)")
    parser.add_argument("--scenario", default=None, help="a scenario YAML file")
    parser.add_argument("--config-dir", default=None, help="a directory of YAML files merged over the defaults")
    parser.add_argument("--max-frames", type=int, default=None, help="quit after this many frames (for demos and tests)")
    return parser.parse_args(argv)


@command_main
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.fps <= 0 or args.width < 200 or (args.max_frames is not None and args.max_frames < 1):
        print(
            f"error: need --fps > 0, --width >= 200 and --max-frames >= 1 (got {args.fps}, {args.width}, {args.max_frames})",
            file=sys.stderr,
        )
        return 2
    from mission_gym.envs.rendering import require_pygame

    try:
        require_pygame("play_manual")
    except ModuleNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from mission_gym.envs import MissionEnv
    from mission_gym.envs.manual import play

    try:
        env = MissionEnv(config_dir=args.config_dir, scenario=args.scenario)
    except (OSError, ValueError) as exc:
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    summary = play(env, seed=args.seed, fps=args.fps, width=args.width, max_frames=args.max_frames)
    wins = sum(e["outcome"] == "captured" for e in summary.episodes)
    print(f"{len(summary.episodes)} episodes finished, {wins} captured")
    env.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
