"""Evaluate a trained model or a scripted baseline on fixed held-out seeds.

python -m mission_gym.scripts.evaluate RUN_NAME|RUN_DIR|MODEL.zip [--episodes 200] [--json [PATH]] [--trust-pickle]
python -m mission_gym.scripts.evaluate --policy greedy --episodes 200

A model loads from its safe files (weights as safetensors, a JSON agent file) without unpickling anything; one that
exists only as pickles is refused unless --trust-pickle (docs/training.md, "Sharing and watching agents").
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from mission_gym.baselines import POLICIES
from mission_gym.evaluation import EvalResult, by_guards, evaluate_gym, evaluate_mission, held_out_seeds
from mission_gym.scripts.cli import CliParser, add_trust_pickle, fail, one_line_missing_extras

#: how many defenders guard the objective, in words
GUARDS = {0: "none", 1: "one", 2: "two"}


def build_parser() -> CliParser:
    p = CliParser(
        prog="python -m mission_gym.scripts.evaluate",
        description="Evaluate a trained model (run name, run directory or .zip) or a scripted baseline on held-out seeds.",
    )
    p.add_argument("model", nargs="?", help="run name (under --runs-dir), run directory, or model .zip")
    p.add_argument("--policy", choices=POLICIES, help="evaluate a scripted baseline instead of a model (Mission Gym only)")
    p.add_argument("--episodes", type=int, default=200, help="number of episodes, on held-out seeds (default 200)")
    p.add_argument("--runs-dir", default="runs", help="where run names are looked up (default runs)")
    p.add_argument("--stochastic", action="store_true", help="sample actions instead of taking the most likely one")
    p.add_argument("--device", default="cpu", help="torch device for the model (default cpu)")
    add_trust_pickle(p)
    p.add_argument(
        "--json", nargs="?", const="-", default=None, metavar="PATH", help="write the result as JSON to PATH (or stdout)"
    )
    return p


def format_result(r: EvalResult) -> str:
    """A short human-readable report."""
    lines = [f"{r.policy} on {r.env_id}: {r.episodes} held-out episodes (seeds {r.seeds[0]}..{r.seeds[-1]})"]
    if r.win_rate is not None and r.win_ci95 is not None:
        lo, hi = r.win_ci95
        lines.append(f"  win rate     {100 * r.win_rate:5.1f}%   (95% Wilson interval {100 * lo:.1f}–{100 * hi:.1f}%)")
        lines.append("  outcomes     " + ", ".join(f"{k} {v}" for k, v in sorted(r.outcomes.items())))
        if len(r.by_defender_modes) > 1:
            lines.append("  by the defenders' modes:")
            for key, row in r.by_defender_modes.items():
                outcomes = ", ".join(f"{k} {v}" for k, v in sorted(row["outcomes"].items()))
                lines.append(f"    {key:<32} {100 * row['win_rate']:5.1f}% of {row['episodes']:>4}   ({outcomes})")
            guards = ", ".join(
                f"{GUARDS.get(n, f'{n} guards')} {100 * w / g:.1f}% of {g}"
                for n, (w, g) in by_guards(r.by_defender_modes).items()
            )
            lines.append(f"  by guards of the objective: {guards}")
    lines.append(f"  mean return  {r.mean_return:.2f} ± {r.std_return:.2f}   mean length {r.mean_length:.1f} steps")
    for key in sorted(r.metrics):
        if key not in ("win", "steps"):
            lines.append(f"  {key:<28} {r.metrics[key]:.3f}")
    return "\n".join(lines)


@one_line_missing_extras
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.episodes < 1:
        return fail(f"--episodes must be >= 1 (got {args.episodes})")
    if (args.model is None) == (args.policy is None):
        return fail("give either a model (run name, run directory or .zip) or --policy greedy|random")
    seeds = held_out_seeds(args.episodes)
    if args.policy is not None:
        from mission_gym.baselines import make_policy
        from mission_gym.config import load_config

        result = evaluate_mission(make_policy(args.policy, load_config(), seed=0), args.episodes, seeds, args.policy)
    else:
        from mission_gym.agents import load_agent

        try:
            agent = load_agent(args.model, runs_dir=args.runs_dir, device=args.device, trust_pickle=args.trust_pickle)
        except (FileNotFoundError, ValueError) as exc:
            return fail(str(exc))

        def predict(obs: Any) -> Any:
            return agent.predict(obs, deterministic=not args.stochastic)

        from mission_gym.envs import ENV_ID

        name = str(args.model)
        if agent.env_id == ENV_ID:
            result = evaluate_mission(predict, args.episodes, seeds, name, agent.env_kwargs)
        else:
            result = evaluate_gym(predict, agent.env_id, args.episodes, seeds, name, agent.env_kwargs)
    if args.json == "-":
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(format_result(result))
        if args.json:
            Path(args.json).write_text(json.dumps(result.to_dict(), indent=2))
            print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
