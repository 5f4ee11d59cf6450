"""Evaluate a trained model or a scripted baseline on fixed held-out seeds.

python -m mission_gym.scripts.evaluate RUN_NAME|RUN_DIR|MODEL.zip [--episodes 200] [--json [PATH]] [--trust-pickle]
python -m mission_gym.scripts.evaluate --policy greedy --episodes 200
python -m mission_gym.scripts.evaluate RUN --defenders guard_objective+guard_objective --best-of 16
python -m mission_gym.scripts.evaluate RUN --policy lookahead --lookahead-budget 20,8,4,150
python -m mission_gym.scripts.evaluate --policy greedy --env-kwargs scenario=my_scenario.yaml

``--defenders`` plays the held-out games of one situation (the seeds from 900000000 upward whose defenders draw those
modes); ``--best-of N`` plays each start N more times with sampled actions beside the deterministic play (what the
policy's own action distribution can win); ``--policy lookahead`` plays each game by a privileged lookahead over
the model's sampled plays on copies of the simulation (:mod:`mission_gym.agents.lookahead`), a ceiling to measure it by
(``--policy search`` is its earlier name). ``--env-kwargs`` changes the game: the scripted baselines play it, and a
model plays it over its run's own settings (another scenario with the same unit counts, to see how an agent carries
over; a model whose observations would not fit is refused).

A model loads from its safe files (weights as safetensors, a JSON agent file) without unpickling anything; one that
exists only as pickles is refused unless --trust-pickle (docs/training.md, "Sharing and watching agents").
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from mission_gym.baselines import POLICIES
from mission_gym.evaluation import (
    BestOf,
    EvalResult,
    best_of,
    by_guards,
    evaluate_gym,
    evaluate_mission,
    evaluate_mission_blocks,
    held_out_seeds,
    situation_problem,
    situation_seeds,
)
from mission_gym.scripts.cli import CliParser, add_trust_pickle, command_main, fail

#: what --policy takes: the scripted baselines, and the lookahead over a model's own plays (``search``: its old name)
POLICY_CHOICES = (*POLICIES, "lookahead", "search")

#: how many defenders guard the objective, in words
GUARDS = {0: "none", 1: "one", 2: "two"}


def build_parser() -> CliParser:
    p = CliParser(
        prog="python -m mission_gym.scripts.evaluate",
        description="Evaluate a trained model (run name, run directory or .zip) or a scripted baseline on held-out seeds.",
    )
    p.add_argument("model", nargs="?", help="run name (under --runs-dir), run directory, or model .zip")
    p.add_argument(
        "--policy", choices=POLICY_CHOICES,
        help="a scripted baseline (greedy, random) instead of a model, or lookahead: a privileged search over the "
             "model's own sampled plays on copies of the simulation (Mission Gym only; search: its earlier name)",
    )  # fmt: skip
    p.add_argument(
        "--env-kwargs", nargs="+", metavar="K=V", default=None,
        help="the game's settings, YAML values, e.g. scenario=my_scenario.yaml (a scenario file) or "
             "reward.win_bonus=100: the scripted baselines play that game, a model plays it over its run's own (Mission Gym)",
    )  # fmt: skip
    p.add_argument(
        "--defenders", default=None, metavar="MODE+MODE",
        help="only the held-out games of this situation, e.g. guard_objective+guard_objective (the defenders' modes: "
             "patrol, guard_objective, intercept, one per defender; Mission Gym)",
    )  # fmt: skip
    p.add_argument(
        "--best-of", type=int, default=None, metavar="N",
        help="also play each start N times with sampled actions: per situation the deterministic win rate, one sampled "
             "play's and the share of starts some play wins (Mission Gym)",
    )  # fmt: skip
    p.add_argument(
        "--lookahead-budget", "--search-budget", dest="lookahead_budget", default="20,8,4,150", metavar="E,C,K,H",
        help="--policy lookahead: every E steps, C candidate E-step prefixes, each on K copies of the game with fresh "
             "dice, continued H steps by the sampled policy [20,8,4,150]",
    )  # fmt: skip
    p.add_argument("--threads", type=int, default=None, help="CPU threads the games step on [every core]")
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
    game = f" (scenario {r.scenario!r})" if r.scenario else ""
    lines = [f"{r.policy} on {r.env_id}{game}: {r.episodes} held-out episodes (seeds {r.seeds[0]}..{r.seeds[-1]})"]
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


def _refusal(args: Any) -> str | None:
    """The one line that refuses these flags, or None."""
    if args.episodes < 1:
        return f"--episodes must be >= 1 (got {args.episodes})"
    if args.best_of is not None and args.best_of < 1:
        return f"--best-of must be >= 1 (got {args.best_of})"
    if args.threads is not None and args.threads < 1:
        return f"--threads must be >= 1 (got {args.threads})"
    if args.policy == "lookahead":
        if args.model is None:
            return "--policy lookahead searches over a model's own plays: give the model (run name, run directory or .zip)"
        from mission_gym.agents.lookahead import LookaheadBudget

        try:
            LookaheadBudget.parse(args.lookahead_budget)
        except ValueError as exc:
            return str(exc)
    elif (args.model is None) == (args.policy is None):
        return "give either a model (run name, run directory or .zip) or --policy greedy|random"
    if args.defenders is not None:
        return situation_problem(args.defenders, args.game)
    return None


def game_problem(env_kwargs: dict[str, Any]) -> str | None:
    """Why ``--env-kwargs`` makes no game (one line naming the bad value), or None."""
    from mission_gym.config import ConfigError
    from mission_gym.envs import MissionVecEnv

    try:
        MissionVecEnv(1, **env_kwargs).close()
    except (ConfigError, TypeError, ValueError) as exc:
        return f"--env-kwargs: {exc}"
    return None


def _read_flags(args: Any) -> str | None:
    """Settle ``--policy search`` (the lookahead's old name, with a note) and ``--env-kwargs`` (``args.game``); the
    one line that refuses the flags, or None."""
    from mission_gym.config import ConfigError
    from mission_gym.plan.command import parse_pairs

    renamed = args.policy == "search"
    if renamed:
        args.policy = "lookahead"
    try:
        args.game = parse_pairs(args.env_kwargs, "--env-kwargs", nest=True)
    except ConfigError as exc:
        return str(exc)
    problem = (game_problem(args.game) if args.env_kwargs else None) or _refusal(args)
    if renamed and not problem:
        print("evaluate: --policy search is now --policy lookahead", file=sys.stderr)
    return problem


def _baseline(args: Any) -> int:
    """A scripted baseline on the held-out games of its game (``--env-kwargs``)."""
    if args.best_of is not None:
        return fail("--best-of samples a model's actions: give a model, not --policy " + args.policy)
    from mission_gym.baselines import make_policy
    from mission_gym.envs.mission_env import make_config

    game = dict(args.game)
    config = make_config(None, game.pop("config_dir", None), game.pop("scenario", None), game)
    seeds = _seeds(args, args.game)
    policy = make_policy(args.policy, config, seed=0)
    return _report(args, evaluate_mission(policy, len(seeds), seeds, args.policy, args.game), None, args.game)


@command_main
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    problem = _read_flags(args)
    if problem:
        return fail(problem)
    from mission_gym.hardware import available_cores

    threads = args.threads or available_cores()
    if args.policy in POLICIES:
        return _baseline(args)
    from mission_gym.agents import load_agent

    try:
        agent = load_agent(args.model, runs_dir=args.runs_dir, device=args.device, trust_pickle=args.trust_pickle)
    except (FileNotFoundError, ValueError) as exc:
        return fail(str(exc))
    from mission_gym.envs import ENV_ID

    name = str(args.model)
    if agent.env_id != ENV_ID:
        if args.policy or args.defenders or args.best_of or args.env_kwargs:
            return fail(
                f"--policy lookahead, --defenders, --best-of and --env-kwargs play Mission Gym; {name} was trained on "
                f"{agent.env_id}"
            )
        from mission_gym.training.callbacks import eval_env_maker

        seeds = held_out_seeds(args.episodes)
        result = evaluate_gym(lambda o: agent.predict(o, not args.stochastic), agent.env_id, args.episodes, seeds, name,
                              agent.env_kwargs, eval_env_maker(agent.spec, agent.env_id, agent.env_kwargs))  # fmt: skip
        return _report(args, result, None)
    import torch

    torch.manual_seed(0)  # the sampled plays are the same every time
    if args.env_kwargs:
        from mission_gym.config.loader import deep_merge

        agent.env_kwargs = deep_merge(agent.env_kwargs, args.game)
        problem = game_problem(agent.env_kwargs) or _fits(agent, name)
        if problem:
            return fail(problem)
    seeds = _seeds(args, agent.env_kwargs)
    if args.policy == "lookahead":
        result = _lookahead(agent, seeds, args.lookahead_budget, threads, name)
    else:
        result = evaluate_mission(
            lambda o: agent.predict(o, deterministic=not args.stochastic), len(seeds), seeds, name, agent.env_kwargs
        )
    extra = None
    if args.best_of:
        det = result if not args.stochastic and args.policy is None else evaluate_mission(
            lambda o: agent.predict(o, deterministic=True), len(seeds), seeds, name, agent.env_kwargs)  # fmt: skip
        sampled = evaluate_mission_blocks(lambda o: agent.predict(o, deterministic=False), len(seeds), args.best_of,
                                          seeds, name, agent.env_kwargs, threads)  # fmt: skip
        extra = best_of(det, sampled)
    return _report(args, result, extra, agent.env_kwargs)


def _seeds(args: Any, env_kwargs: dict[str, Any]) -> list[int]:
    if args.defenders is not None:
        return situation_seeds(args.defenders, args.episodes, env_kwargs)
    return held_out_seeds(args.episodes)


def _fits(agent: Any, name: str) -> str | None:
    """Why ``agent`` cannot play its (changed) game: the observations or commands of another size, or None."""
    from mission_gym.envs import MissionVecEnv

    env = MissionVecEnv(1, **agent.env_kwargs)
    if env.observation_space.shape != agent.observation_space.shape or env.action_space != agent.action_space:
        return (
            f"--env-kwargs: {name} sees {agent.observation_space.shape[0]} observations and commands "
            f"{len(agent.action_space.nvec)} attackers; this game has {env.observation_space.shape[0]} and "
            f"{len(env.action_space.nvec)} (a model plays only scenarios with its unit counts)"
        )
    return None


def _lookahead(agent: Any, seeds: list[int], budget: str, threads: int, name: str) -> EvalResult:
    """The held-out games played by the lookahead over ``agent``'s sampled plays."""
    from mission_gym.agents.lookahead import LookaheadBudget, lookahead_results
    from mission_gym.evaluation import summarize

    games = lookahead_results(lambda o: agent.predict(o, deterministic=False), seeds, agent.env_kwargs,
                              LookaheadBudget.parse(budget), threads)  # fmt: skip
    returns = [float(sum(g["reward_terms"].values())) for g in games]
    modes = ["+".join(sorted(g["defender_modes"])) for g in games]
    return summarize(f"lookahead over {name}", seeds, returns, games, modes)


def _report(args: Any, result: EvalResult, extra: BestOf | None, game: dict[str, Any] | None = None) -> int:
    """Print (or write as JSON) the result; ``game``: the Mission Gym env's arguments it was played with."""
    if game is not None:
        from mission_gym.envs import MissionVecEnv

        result.scenario = MissionVecEnv(1, **game).core.config.scenario.name
    out = result.to_dict()
    if extra is not None:
        out["best_of"] = extra.to_dict()
    if args.json == "-":
        print(json.dumps(out, indent=2))
    else:
        print(format_result(result))
        if extra is not None:
            print(format_best_of(extra))
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=2))
            print(f"wrote {args.json}")
    return 0


def format_best_of(b: BestOf) -> str:
    """The best-of table: per situation, the deterministic play, one sampled play and some play of N."""
    lines = [f"  best of {b.plays} sampled plays per start:", f"    {'':<32} {'games':>5}  deterministic  one play  some play"]
    for key, row in b.rows.items():
        lines.append(f"    {key:<32} {row['games']:>5}  {100 * row['deterministic']:12.1f}%  {100 * row['sampled']:7.1f}%  "
                     f"{100 * row['some_play']:8.1f}%")  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
