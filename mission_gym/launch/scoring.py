"""Scoring a population's members: each saved model plays the same games on the in-training evaluation seeds, in this
process or in spawned processes side by side (one core and one torch thread each), with the same records either
way."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import zipfile
from pathlib import Path
from typing import Any

from mission_gym.hardware import core_ids, parent_death_signal
from mission_gym.rundir.directory import RunDir
from mission_gym.rundir.evaluations import EvalRecord
from mission_gym.training.callbacks import eval_record

#: games one scoring worker must play to be worth its start (importing torch and SB3 and loading the simulation's
#: kernels take about 3 s, what some 600 Mission Gym games take on one core)
GAMES_PER_WORKER = 600


def scoring_workers(n_models: int, episodes: int, cores: int) -> int:
    """How many processes score ``n_models`` models of ``episodes`` games each on ``cores`` cores: one per core, as
    long as each gets :data:`GAMES_PER_WORKER` games; 1 means this process alone."""
    return max(1, min(n_models, cores, n_models * episodes // GAMES_PER_WORKER))


def saved_timesteps(model: Path) -> int:
    """The env step a saved SB3 model was saved at, read from the zip without loading it."""
    with zipfile.ZipFile(model) as z:
        return int(json.loads(z.read("data"))["num_timesteps"])


def score_models(
    models: list[tuple[Path, int]], env: str, env_kwargs: dict[str, Any], episodes: int, workers: int = 1
) -> list[EvalRecord]:
    """Play ``episodes`` games on the evaluation seeds with each ``(model, the step it was saved at)``: in this
    process, or in ``workers`` processes side by side (one core and one torch thread each, the same games and
    records as here). The workers ignore Ctrl-C, are ended when this returns or raises, and end if this process
    dies."""
    tasks = [(str(path), env, env_kwargs, episodes, step) for path, step in models]
    if workers <= 1 or len(tasks) <= 1:
        return [_score_model(task) for task in tasks]
    from mission_gym.vec.subproc import worker_thread_env

    with worker_thread_env():  # the workers' thread caps, read when torch loads there
        pool = multiprocessing.get_context("spawn").Pool(
            min(workers, len(tasks)), initializer=_start_scorer, initargs=(os.getpid(),)
        )
    with pool:  # terminate()s the workers on the way out, an exception included
        records = pool.map(_score_model, tasks, chunksize=1)
        pool.close()
        pool.join()
    return records


def _start_scorer(parent: int) -> None:
    """A scoring worker's start: Ctrl-C is for the launcher (it ends the workers), and the worker ends with it."""
    import torch

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    arm = parent_death_signal(signal.SIGTERM, parent)
    if arm is not None:
        arm()
    torch.set_num_threads(1)


def _score_model(task: tuple[str, str, dict[str, Any], int, int]) -> EvalRecord:
    from mission_gym.agents.loading import load_agent

    path, env, env_kwargs, episodes, step = task
    agent = load_agent(path, device="cpu", trust_pickle=True)  # the population's own members, as training reads them
    return eval_record(agent.predict, env, env_kwargs, episodes, step, agent.spec)


def describe_score(rec: EvalRecord) -> str:
    """A score as the launcher prints it: steps, win rate, return, games."""
    win = "" if rec.win_rate is None else f"win {100 * rec.win_rate:5.1f}%  "
    return f"{rec.timesteps:>11,} steps  {win}return {rec.mean_return:8.2f}  ({rec.n_episodes} episodes)"


def score_members(members_dir: Path, names: list[str], config: Any, final: bool, checkpoints: bool) -> list[dict[str, Any]]:
    """A fresh evaluation of each member's model at a cut (its newest checkpoint), or at the end (its best and
    final models, and with ``checkpoints`` its kept checkpoints), on several cores where there are enough games to be
    worth it (:func:`scoring_workers`): one ``{"member", "model", "record"}`` per model."""
    listed: list[tuple[str, Path, int]] = []  # (member, model, the step it was saved at)
    for name in names:
        member = RunDir(members_dir / name)
        if final:
            models = [member / "best_model.zip", member / "final_model.zip"]
            if checkpoints:
                models += [path for _, path in member.checkpoints()]
        else:
            latest = member.latest_checkpoint()
            models = [latest[1]] if latest else []
        listed += [(name, path, saved_timesteps(path)) for path in models if path.is_file()]
    # a member's models saved at the same step are the same policy: each is played once, its first file
    first: dict[tuple[str, int], Path] = {}
    for name, path, step_saved in listed:
        first.setdefault((name, step_saved), path)
    pop = config.population
    episodes = (pop.final_episodes or pop.episodes) if final else pop.episodes
    workers = scoring_workers(len(first), episodes, len(core_ids()))
    to_play = [(path, step_saved) for (_, step_saved), path in first.items()]
    records = score_models(to_play, config.env, config.env_kwargs, episodes, workers)
    scored = dict(zip(first, records, strict=True))
    return [
        {"member": name, "model": str(path.relative_to(members_dir / name)), "record": scored[name, s].__dict__}
        for name, path, s in listed
    ]
