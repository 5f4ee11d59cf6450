"""Record a winning agent's won games as start states for other runs' training (the ``restarts:`` key).

Plays ``--games`` games of the agent (deterministic, its own observation statistics and game settings, seeds that
neither training nor the held-out evaluation uses), keeps the simulation's state every ``--every`` steps of each game
it wins, and writes them to OUT (``.npz``). A configuration then names it: ``restarts: {states: OUT}``.
``--defenders MODE+MODE`` plays only games of that situation; ``--policy lookahead`` plays them by the privileged
lookahead over the agent's sampled plays (``evaluate --policy lookahead``), keeping the state at each of its
decisions: won games of a plan the agent does not play yet. ``--lost-only`` (with ``--policy lookahead``) plays only
the games the agent's own play loses: the lookahead's wins where the agent has no plan. The file records the scenario
it was played on; a run on another refuses it. A run can find such states itself (``restarts: find:``).

    python tools/record_states.py RUN_OR_MODEL OUT.npz [--games 200] [--every 5]
    python tools/record_states.py RUN OUT.npz --defenders guard_objective+guard_objective --policy lookahead
    python tools/record_states.py RUN OUT.npz --games 2000 --lost-only --policy lookahead
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

from mission_gym.agents.lookahead import LookaheadBudget
from mission_gym.config import ConfigError
from mission_gym.evaluation import situation_problem
from mission_gym.extras.starts import record_model_states
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
    parser.add_argument(
        "--defenders",
        default=None,
        metavar="MODE+MODE",
        help="only games whose defenders draw these modes, e.g. guard_objective+guard_objective",
    )
    parser.add_argument(
        "--policy",
        choices=("agent", "lookahead", "search"),
        default="agent",
        help="agent: its deterministic play (default); lookahead: the lookahead over its sampled plays, a state at "
        "each decision (search: its earlier name)",
    )
    parser.add_argument(
        "--lost-only",
        action="store_true",
        help="with --policy lookahead: only the games (of --games) that the agent's deterministic play loses",
    )
    parser.add_argument(
        "--lookahead-budget",
        "--search-budget",
        dest="lookahead_budget",
        default="20,8,4,150",
        metavar="E,C,K,H",
        help="--policy lookahead: every E steps, C candidate prefixes, each on K copies, H steps on (default 20,8,4,150)",
    )
    args = parser.parse_args(argv)
    renamed = args.policy == "search"
    if renamed:
        args.policy = "lookahead"
    if not args.out.endswith(".npz"):
        return fail(f"OUT {args.out!r} must end in .npz (a states file)")
    problem = situation_problem(args.defenders) if args.defenders is not None else None
    try:
        budget = LookaheadBudget.parse(args.lookahead_budget) if args.policy == "lookahead" else None
    except ValueError as exc:
        problem = str(exc)
    if args.lost_only and args.policy != "lookahead":
        problem = "--lost-only needs --policy lookahead: the agent's own play wins none of the games it loses"
    if problem:
        return fail(problem)
    if renamed:
        print("record_states.py: --policy search is now --policy lookahead", file=sys.stderr)
    torch.set_num_threads(1)
    try:
        saved = record_model_states(
            args.model,
            args.out,
            args.games,
            args.every,
            trust_pickle=args.trust_pickle,
            situation=args.defenders,
            lookahead=budget,
            threads=os.cpu_count() or 1,
            lost_only=args.lost_only,
        )
    except (FileNotFoundError, ConfigError) as exc:  # no such agent, pickles refused, no game won
        return fail(str(exc))
    print(f"{saved:,} states of won games written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
