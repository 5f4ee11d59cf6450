"""The starts a population finds for its restarts (``restarts[].find``): recorded once, between its stages, by the
population itself on every core, into ``RUN/starts/`` where every member's configuration points; each recording is
logged, kept in ``population.json`` (``starts``) for the dashboard, and counted in the time the run says it needs.

A block that starts at 0 is recorded before any member trains (the scripted greedy fleet's); one that starts at a
cut is recorded once that cut is made: with the cut's best scored model (``policy: best``, one file), or with the
policy of each member that trains on from there (``policy: own``, a file each, every member's games in one
lookahead). A run stopped while it records has no file for that block (states files are written whole or not at
all) and records it again when it resumes, with the same seed, so the same states.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from mission_gym.extras.restarts import found_seed
from mission_gym.extras.starts import Owner, find_starts
from mission_gym.hardware import core_ids
from mission_gym.rundir.directory import RunDir
from mission_gym.settings.schema import TrainConfig
from mission_gym.settings.starts import own_starts_path

#: seconds per game of a recording, per core, before the run has timed one of its own (the `cpu` recipe's budget
#: 20,8,2,100 on 2 cores of an Intel Xeon with AVX-512, family 6 model 207: the greedy fleet's 256 games in 42 s with
#: numba's first compile, the best member's at 1.25M and 2.75M in 30 s and 34 s)
SECONDS_PER_GAME = {"greedy": 0.33, "best": 0.25, "own": 0.25}


def _outs(config: TrainConfig, i: int, members: list[str], starts: Path) -> list[str]:
    """The files block ``i`` is recorded into: its one file, or each member's own."""
    block = (config.restarts or [])[i]
    if block.find is not None and block.find.policy == "own":
        return [own_starts_path(starts, i, m) for m in members]
    return [block.states] if block.states else []


def due_blocks(config: TrainConfig, step: int, members: list[str], starts: Path) -> list[int]:
    """The ``restarts`` blocks whose states the run finds at ``step`` (for ``members``, those training on from there)
    and has not written yet."""
    return [
        i
        for i, b in enumerate(config.restarts or [])
        if b.find is not None and b.start == step and not all(Path(o).is_file() for o in _outs(config, i, members, starts))
    ]


def find_stage_starts(
    config: TrainConfig, step: int, run: Path, members: list[str], best: dict[str, Any] | None, state: dict[str, Any]
) -> list[dict[str, Any]]:
    """Record every block due at ``step`` (:func:`due_blocks`) on every core, ``best`` (a cut's best score) being the
    policy of ``policy: best`` and ``members`` those of ``policy: own``; what each did, also appended to
    ``state["starts"]`` (the caller writes the state)."""
    from mission_gym.agents.loading import load_agent

    starts, members_dir = run / "starts", run / "members"
    starts.mkdir(parents=True, exist_ok=True)
    done = []
    for i in due_blocks(config, step, members, starts):
        find = (config.restarts or [])[i].find
        assert find is not None  # due_blocks: a find block
        outs = _outs(config, i, members, starts)
        owners: Any = outs[0]  # greedy: the one file
        if find.policy == "best":
            if best is None:
                raise ValueError(f"restarts[{i}]: policy best at step {step:,} has no cut to take the best from")
            # the run's own checkpoints (made by this run), so their pickles are trusted as a resume's are
            policy = load_agent(members_dir / best["member"] / best["model"], trust_pickle=True)
            owners = [Owner(policy, outs[0], f"{best['member']}'s policy at {best['record']['timesteps']:,} steps")]
        elif find.policy == "own":
            owners = []
            for name, out in zip(members, outs):
                at, model = _reached(members_dir / name, step)
                owners.append(Owner(load_agent(model, trust_pickle=True), out, f"{name}'s own policy at {at:,} steps"))
        whose = owners[0].whose if len(owners) == 1 and isinstance(owners, list) else "each member's own policy"
        print(f"population: finding the starts of restarts[{i}]: {find.describe(whose)}", flush=True)
        found = find_starts(find, owners, config.env_kwargs, found_seed(config.seed, i), len(core_ids()), i, step)
        for f in found:
            print(f"population: {f.line()}", flush=True)
        record = asdict(found[0])
        if len(found) > 1:  # one recording: each member's games in one lookahead
            record.update(
                how=find.describe(f"the own policy of each of {', '.join(members)}"),
                games=sum(f.games for f in found),
                won=sum(f.won for f in found),
                states=sum(f.states for f in found),
                situation=None,
            )
        state.setdefault("starts", []).append(record)
        done.append(record)
    return done


def _reached(member: Path, step: int) -> tuple[int, Path]:
    """The checkpoint a member paused at when it reached ``step`` (the newest it has then): its step and model."""
    latest = RunDir(member).latest_checkpoint()
    if latest is None or latest[0] < step:
        raise ValueError(f"member {member.name} has no checkpoint at step {step:,} to find its own starts with")
    return latest


def seconds_left(config: TrainConfig, state: dict[str, Any]) -> float:
    """The seconds the recordings not made yet will take: each block's games (``policy: own``: for each member the
    plan trains from its step) at the seconds per game and core of the run's own recordings of the same policy
    (:data:`SECONDS_PER_GAME` before it has one)."""
    blocks = config.restarts or []
    made = {r["block"] for r in state.get("starts", [])}
    measured: dict[str, float] = {}
    for r in state.get("starts", []):
        find = blocks[r["block"]].find
        if find is not None:
            measured[find.policy] = r["seconds"] * r.get("cores", 1) / max(1, r["games"])
    cores = len(core_ids())
    total = 0.0
    for i, b in enumerate(blocks):
        if b.find is None or i in made or (b.states and Path(b.states).is_file()):
            continue
        games = b.find.games * (_members_at(config, b.start) if b.find.policy == "own" else 1)
        total += games * measured.get(b.find.policy, SECONDS_PER_GAME[b.find.policy]) / cores
    return total


def _members_at(config: TrainConfig, step: int) -> int:
    """The members that train on from ``step`` (a cut's kept and clones; all of them at 0)."""
    alive = config.population.size
    for cut in config.population.cuts:
        if cut.at <= step:
            alive = cut.keep + cut.clones
    return alive
