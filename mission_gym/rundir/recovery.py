"""What a resume does with what a killed, starved or broken process left in a run: the newest checkpoint that
really loads (a damaged one is reported, set aside and the one before it used), and the temporary files of writers
killed mid-write.

Checkpoints are written atomically (:func:`~mission_gym.rundir.files.atomic_save_all`), so a kill or a full disk
never leaves a half-written one under a checkpoint's name; a damaged file comes from outside (a disk error, a copy
cut short, a hand edit), and one run is not worth losing for it.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

from mission_gym.config.yaml_io import ConfigError
from mission_gym.rundir.directory import RunDir, saved_with, vecnormalize_path
from mission_gym.rundir.files import remove_stale_temps

#: the suffix a checkpoint that does not load is renamed with (kept for a look, never loaded again)
SET_ASIDE = ".damaged"


def checkpoint_problem(path: Path, normalize: bool) -> str | None:
    """Why a checkpoint does not load (one line), or None when it does: its zip, parameters and saved data are
    read as ``PPO.load`` reads them, and its VecNormalize statistics unpickled.

    :param path: ``checkpoints/ckpt_<steps>_steps.zip``
    :param normalize: the run normalises observations, so the checkpoint needs its statistics
    """
    from stable_baselines3.common.save_util import load_from_zip_file

    try:
        data, params, _ = load_from_zip_file(path, device="cpu", print_system_info=False)
    except Exception as exc:  # a damaged zip raises anything from ValueError to RuntimeError (torch) or EOFError
        return _one_line(exc)
    # a file cut short can still open as a zip: the parameters inside are zips of their own, and the reader finds
    # the end of one of those instead of the outer file's
    if data is None or "policy" not in params:
        return "not a whole model file (no saved data or policy in it)"
    stats = vecnormalize_path(path)
    if stats.is_file():
        try:
            with open(stats, "rb") as f:
                pickle.load(f)
        except Exception as exc:
            return f"its statistics {stats.name} do not load: {_one_line(exc)}"
    elif normalize:
        return f"its VecNormalize statistics {stats.name} are missing"
    return None


def newest_loadable_checkpoint(run: RunDir, normalize: bool) -> tuple[int, Path]:
    """The newest checkpoint of a run that loads, ``(steps, path)``. Newer ones that do not load are reported in a
    line each and renamed with :data:`SET_ASIDE` (with their statistics), so the run's next checkpoints and their
    pruning never count them. Call it holding the run's lock.

    :param run: the run directory
    :param normalize: the run normalises observations (a checkpoint without its statistics does not load)
    :raises ConfigError: when there is no checkpoint, or none loads (listing each one tried and why)
    """
    for p in remove_stale_temps(run.path) + remove_stale_temps(run.checkpoints_dir):
        print(f"note: removed {p}, left by a writer that was killed mid-write", flush=True)
    checkpoints = run.checkpoints()
    if not checkpoints:
        raise ConfigError(f"run {str(run.path)!r} has no checkpoint to resume from (checkpoints/ is empty)")
    bad: list[tuple[Path, str]] = []
    for step, path in reversed(checkpoints):
        problem = checkpoint_problem(path, normalize)
        if problem is None:
            for damaged, why in bad:
                _set_aside(damaged)
                print(f"note: {damaged} does not load ({why}); set aside as {damaged.name}{SET_ASIDE}", flush=True)
            if bad:
                print(f"note: resuming from the newest checkpoint that loads, {path.name}", flush=True)
            return step, path
        bad.append((path, problem))
    tried = "; ".join(f"{p.name}: {why}" for p, why in bad)
    raise ConfigError(f"run {str(run.path)!r}: no checkpoint loads (tried {tried})")


def _set_aside(path: Path) -> None:
    for p in (path, *saved_with(path)):
        if p.is_file():
            os.replace(p, p.with_name(p.name + SET_ASIDE))


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
