"""Share trained agents in the Hugging Face Hub layout of rl-baselines3-zoo (model, VecNormalize statistics,
config, model card): push a run to the Hub or to a local folder, pull one back as a run directory.

    mission-hub push RUN --repo-id you/ppo-MissionGym-v0        # upload (log in first: hf auth login, or HF_TOKEN)
    mission-hub push RUN --local-dir shared/ppo-MissionGym-v0   # the same layout in a folder
    mission-hub pull --repo-id you/ppo-MissionGym-v0            # -> runs/ppo-MissionGym-v0/ (evaluate, enjoy it)
    mission-hub pull --local-dir shared/ppo-MissionGym-v0 --run-name theirs
    mission-hub push OLD_RUN --local-dir shared/old --trust-pickle   # a run saved before the safe files: converted

A pushed agent carries its weights as safetensors and a JSON agent file beside the SB3 zip; evaluate, enjoy and
record_video load those without unpickling anything. A pulled agent with pickles only (a zoo repository) needs
their --trust-pickle, which runs whatever code the pickles name: only for files you trust.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mission_gym.scripts.cli import CliParser, add_trust_pickle, command_main, fail


def build_parser() -> CliParser:
    p = CliParser(
        prog="mission-hub",
        description="Push a run's agent to the Hugging Face Hub (or a local folder) in the zoo's layout, or pull one "
        "as a run directory. Docs: docs/training.md",
        epilog="examples:\n" + __doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="{push,pull}")
    push = sub.add_parser("push", help="share a run's best (else final) model, or a model .zip")
    push.add_argument("run", help="run name (under --runs-dir), run directory, or model .zip")
    push.add_argument("--repo-id", metavar="ORG/NAME", help="Hub repository to upload to (created if needed)")
    push.add_argument("--local-dir", metavar="DIR", help="write the repository's files to this folder")
    push.add_argument("--runs-dir", default="runs", help="where run names are looked up [runs]")
    push.add_argument("--commit-message", default="Upload PPO agent trained with Mission Gym", help="the Hub commit message")
    push.add_argument("--private", action="store_true", help="create the Hub repository private")
    add_trust_pickle(push, "convert (to safe files)")
    pull = sub.add_parser("pull", help="make a run directory of a shared agent")
    pull.add_argument("--repo-id", metavar="ORG/NAME", help="Hub repository to download")
    pull.add_argument("--local-dir", metavar="DIR", help="a folder of the Hub layout")
    pull.add_argument("--runs-dir", default="runs", help="where the run directory is made [runs]")
    pull.add_argument("--run-name", metavar="NAME", help="the run directory's name [ppo-<EnvId>]")
    return p


def follow_on(run: Path) -> str:
    """The commands to try a pulled agent with, and whether it loads without pickles."""
    from mission_gym.agents import TRUST_PICKLE, has_safe_files

    if has_safe_files(run / "best_model.zip"):
        return f"  safe files (no pickle is loaded): mission-evaluate {run}    mission-enjoy {run}"
    return (
        f"  pickles only (a zoo repository or an older push): they can run any code when loaded, so only if you "
        f"trust where they came from: mission-evaluate {run} {TRUST_PICKLE}    mission-enjoy {run} {TRUST_PICKLE}"
    )


@command_main
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from mission_gym.config.yaml_io import ConfigError
    from mission_gym.sharing import hub

    try:
        if args.command == "push":
            where = hub.push(
                args.run, args.repo_id, args.local_dir, args.runs_dir, args.commit_message, args.private, args.trust_pickle
            )
            print(f"pushed {args.run} to {where}")
        else:
            run = hub.pull(args.repo_id, args.local_dir, args.runs_dir, args.run_name)
            print(f"pulled {args.repo_id or args.local_dir} into {run}")
            print(follow_on(run))
    except ConfigError as exc:
        return fail(str(exc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
