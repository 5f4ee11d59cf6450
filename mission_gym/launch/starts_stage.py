"""The starts a population finds for its restarts (``restarts[].find``): recorded once, between its stages, by the
population itself on every core, into ``RUN/starts/`` where every member's configuration points; each recording is
logged, kept in ``population.json`` (``starts``) for the dashboard, and counted in the time the run says it needs.

A block that starts at 0 is recorded before any member trains (the scripted greedy fleet's); one that starts at a
cut is recorded once that cut is made, with the cut's best scored model as ``policy: best``. A run stopped while it
records has no file for that block (states files are written whole or not at all) and records it again when it
resumes, with the same seed, so the same states.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from mission_gym.extras.restarts import found_seed
from mission_gym.extras.starts import find_starts
from mission_gym.hardware import core_ids
from mission_gym.settings.schema import TrainConfig

#: seconds per game of a recording, per core, before the run has timed one of its own (the lookahead's default
#: budget on a 2-core Intel Xeon with AVX-512, family 6 model 207: the greedy fleet's 256 games in 35 s; the `cpu`
#: recipe's best policy at 2.75M in its worst situation's 256 games in ...)
SECONDS_PER_GAME = {"greedy": 0.27, "best": 0.27}


def due_blocks(config: TrainConfig, step: int) -> list[int]:
    """The ``restarts`` blocks whose states the run finds at ``step`` and has not written yet."""
    return [
        i
        for i, b in enumerate(config.restarts or [])
        if b.find is not None and b.start == step and not (b.states and Path(b.states).is_file())
    ]


def find_stage_starts(
    config: TrainConfig, step: int, members_dir: Path, best: dict[str, Any] | None, state: dict[str, Any]
) -> list[dict[str, Any]]:
    """Record every block due at ``step`` (:func:`due_blocks`) on every core, ``best`` (a cut's best score) being the
    policy of ``policy: best``; what each did, also appended to ``state["starts"]`` (the caller writes the state).

    :raises ConfigError: when a recording wins no game
    """
    from mission_gym.agents.loading import load_agent

    done = []
    for i in due_blocks(config, step):
        block = (config.restarts or [])[i]
        find, out = block.find, block.states
        assert find is not None and out is not None  # due_blocks: a find block, placed in the run's starts/
        policy, whose = None, "the run's policy"
        if find.policy == "best":
            if best is None:
                raise ValueError(f"restarts[{i}]: policy best at step {step:,} has no cut to take the best from")
            # the run's own checkpoint (made by this run), so its pickles are trusted as a resume's are
            policy = load_agent(members_dir / best["member"] / best["model"], trust_pickle=True)
            whose = f"{best['member']}'s policy at {best['record']['timesteps']:,} steps"
        print(f"population: finding the starts of restarts[{i}]: {find.describe(whose)}", flush=True)
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        found = find_starts(find, out, config.env_kwargs, found_seed(config.seed, i), len(core_ids()), policy, i, step, whose)
        print(f"population: {found.line()}", flush=True)
        record = asdict(found)
        state.setdefault("starts", []).append(record)
        done.append(record)
    return done


def seconds_left(config: TrainConfig, state: dict[str, Any]) -> float:
    """The seconds the recordings not made yet will take: each block's games at the seconds per game and core of the
    run's own recordings of the same policy (:data:`SECONDS_PER_GAME` before it has one)."""
    made = {r["block"] for r in state.get("starts", [])}
    measured: dict[str, float] = {}
    for r in state.get("starts", []):
        block = (config.restarts or [])[r["block"]]
        if block.find is not None:
            measured[block.find.policy] = r["seconds"] * r.get("cores", 1) / max(1, r["games"])
    cores = len(core_ids())
    total = 0.0
    for i, b in enumerate(config.restarts or []):
        if b.find is not None and i not in made and not (b.states and Path(b.states).is_file()):
            total += b.find.games * measured.get(b.find.policy, SECONDS_PER_GAME[b.find.policy]) / cores
    return total
