"""Record a winning agent's won games as start states for other runs' training (the ``restarts:`` key).

Plays ``--games`` games of the agent (deterministic, its own observation statistics and game settings, seeds that
neither training nor the held-out evaluation uses), keeps the simulation's state every ``--every`` steps of each game
it wins, and writes them to OUT (``.npz``). A configuration then names it: ``restarts: {states: OUT}``; a file beside
the presets may be named by its file name alone (the shipped ``winner_states.npz`` was made this way).

    python tools/record_states.py RUN_OR_MODEL OUT.npz [--games 200] [--every 5]
"""

from __future__ import annotations

import argparse
import sys

import torch

from mission_gym.config import ConfigError
from mission_gym.extras.restarts import record_model_states
from mission_gym.scripts.cli import CliParser, fail


def positive(text: str) -> int:
    value = int(text) if text.isdigit() else 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="record_states.py", description=__doc__.splitlines()[0])
    parser.add_argument("model", help="a run directory or a model file (e.g. runs/RUN/final_model.zip)")
    parser.add_argument("out", help="the states file to write (.npz)")
    parser.add_argument("--games", type=positive, default=200, help="games to play (default 200)")
    parser.add_argument("--every", type=positive, default=5, help="keep a state every this many steps (default 5)")
    parser.add_argument("--trust-pickle", action="store_true", help="load an agent that exists only as pickles")
    args = parser.parse_args(argv)
    if not args.out.endswith(".npz"):
        return fail(f"OUT {args.out!r} must end in .npz (a states file)")
    torch.set_num_threads(1)
    try:
        saved = record_model_states(args.model, args.out, args.games, args.every, trust_pickle=args.trust_pickle)
    except (FileNotFoundError, ConfigError) as exc:  # no such agent, pickles refused, no game won
        return fail(str(exc))
    print(f"{saved:,} states of won games written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
