"""Watch an agent play, live in a window: a trained model or run, or a scripted baseline (rl-baselines3-zoo's enjoy).

    mission-enjoy RUN                          # its best model, on Mission Gym's window (pygame: mission_gym[play])
    mission-enjoy runs/RUN/final_model.zip --episodes 3 --seed 900000000 --fps 8
    mission-enjoy --policy greedy              # the scripted baseline
    mission-enjoy HOPPER_RUN                   # other Gymnasium envs use their own human rendering (MuJoCo's viewer)
    mission-enjoy ZOO_RUN --trust-pickle       # a model that exists only as pickles (only if you trust it)

Close the window (or Ctrl-C) to stop. Mission Gym plays at --fps env steps per second (4 = real time).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from mission_gym.scripts.cli import CliParser, add_trust_pickle, command_main, fail


def build_parser() -> CliParser:
    from mission_gym.baselines import POLICIES

    p = CliParser(
        prog="mission-enjoy",
        description="Watch a trained agent or a scripted baseline play, live in a window (render_mode='human').",
        epilog="examples:\n" + __doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model", nargs="?", help="run name (under --runs-dir), run directory, or model .zip")
    p.add_argument("--policy", choices=POLICIES, help="watch a scripted baseline instead of a model (Mission Gym only)")
    p.add_argument("--episodes", type=int, default=5, help="episodes to play; 0: until the window is closed [5]")
    p.add_argument("--seed", type=int, default=0, help="reset seed of the first episode; episode i uses seed+i [0]")
    p.add_argument("--fps", type=float, default=8.0, help="Mission Gym: env steps shown per second (4 = real time) [8]")
    p.add_argument("--max-steps", type=int, help="cut each episode after this many steps")
    p.add_argument("--runs-dir", default="runs", help="where run names are looked up [runs]")
    p.add_argument("--device", default="cpu", help="torch device for the model [cpu]")
    add_trust_pickle(p)
    return p


def play(env: Any, policy: Any, episodes: int, seed: int, max_steps: int | None) -> list[dict[str, Any]]:
    """Play ``episodes`` episodes (0: until the window closes), printing one line each; their summaries."""
    out: list[dict[str, Any]] = []
    episode = 0
    while episodes == 0 or episode < episodes:
        obs, _ = env.reset(seed=seed + episode)
        total, steps, info, end = 0.0, 0, {}, "cut"
        while not _closed(env):
            obs, reward, terminated, truncated, info = env.step(policy(obs))
            total += float(reward)
            steps += 1
            if terminated or truncated:
                end = "terminated" if terminated else "truncated"
                break
            if max_steps is not None and steps >= max_steps:
                break
        if _closed(env):
            print("window closed")
            break
        outcome = info.get("outcome") or end
        print(f"episode {episode + 1}: return {total:.2f}, {steps} steps, {outcome}", flush=True)
        out.append({"return": total, "steps": steps, "outcome": outcome})
        episode += 1
    return out


def _closed(env: Any) -> bool:
    return bool(getattr(env.unwrapped, "window_closed", False))


@command_main
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.episodes < 0 or args.fps <= 0 or (args.max_steps is not None and args.max_steps < 1):
        return fail(
            f"need --episodes >= 0, --fps > 0 and --max-steps >= 1 (got {args.episodes}, {args.fps}, {args.max_steps})"
        )
    import gymnasium as gym

    from mission_gym import ENV_ID
    from mission_gym.agents import load_policy
    from mission_gym.envs.rendering import require_pygame

    try:
        source = load_policy(
            args.model, args.policy, runs_dir=args.runs_dir, seed=args.seed, device=args.device,
            trust_pickle=args.trust_pickle,
        )  # fmt: skip
        if source.env_id == ENV_ID:
            require_pygame("mission-enjoy")
        env = source.make_env(render_mode="human")
    except (ValueError, gym.error.Error) as exc:
        return fail(str(exc).splitlines()[0])
    if source.env_id == ENV_ID:  # the window paces at the env's render_fps
        env.unwrapped.metadata = {**env.unwrapped.metadata, "render_fps": args.fps}
    print(f"{source.label} on {source.env_id}: {args.episodes or 'until the window closes'} episodes")
    try:
        summary = play(env, source.policy, args.episodes, args.seed, args.max_steps)
    except KeyboardInterrupt:
        summary = []
    finally:
        env.close()
    if summary:
        mean = sum(e["return"] for e in summary) / len(summary)
        print(f"{len(summary)} episodes, mean return {mean:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
