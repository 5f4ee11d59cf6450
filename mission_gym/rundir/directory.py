"""The run directory: where a run's configuration, checkpoints, models, logs and lineage live, and what a new run
writes first.

```
runs/<name>/
  config.yaml  command.txt  metadata.json  lineage.json
  checkpoints/ckpt_<steps>_steps.zip + ckpt_vecnormalize_<steps>_steps.pkl   (newest K kept)
  best_model.zip (+ best_vecnormalize.pkl)   final_model.zip (+ final_vecnormalize.pkl)
  beside each model X.zip: X.safetensors + X.agent.json   (the same agent without pickles: mission_gym.agents)
  tb/   progress.csv   evaluations.csv   dashboard.html
  .lock   (who writes the run now: :mod:`mission_gym.rundir.lock`)
```
Every file is written to a temporary name and renamed (:mod:`mission_gym.rundir.files`), so a killed run never
leaves a half-written one (the CSV logs are appended line by line; a resume drops a line cut short).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from mission_gym.config.yaml_io import ConfigError, dump_yaml
from mission_gym.rundir.files import atomic_write_text, now, read_json, write_json

CHECKPOINTS = "checkpoints"
CKPT_PATTERN = re.compile(r"^ckpt_(\d+)_steps\.zip$")
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


def config_hash(config: dict[str, Any]) -> str:
    """A short stable hash of a configuration mapping."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


def vecnormalize_path(model_path: str | Path) -> Path:
    """Where the VecNormalize statistics saved with a model file live.

    ``ckpt_N_steps.zip`` → ``ckpt_vecnormalize_N_steps.pkl``; ``best_model.zip`` → ``best_vecnormalize.pkl``.
    """
    path = Path(model_path)
    match = CKPT_PATTERN.match(path.name)
    if match:
        return path.with_name(f"ckpt_vecnormalize_{match.group(1)}_steps.pkl")
    stem = path.name.removesuffix(".zip").removesuffix("_model")
    return path.with_name(f"{stem}_vecnormalize.pkl")


def weights_path(model_path: str | Path) -> Path:
    """Where the policy's weights saved with a model file live, as safetensors (no code in them):
    ``best_model.zip`` → ``best_model.safetensors``."""
    return Path(model_path).with_suffix(".safetensors")


def agent_file_path(model_path: str | Path) -> Path:
    """Where the JSON description saved with a model file lives (its env, policy and observation statistics):
    ``best_model.zip`` → ``best_model.agent.json``."""
    return Path(model_path).with_suffix(".agent.json")


def saved_with(model_path: str | Path) -> list[Path]:
    """The files saved beside a model file, in the order they are written before it: its VecNormalize statistics,
    its weights and its agent file (each may be absent: a run without statistics, a run saved before the weights)."""
    return [vecnormalize_path(model_path), weights_path(model_path), agent_file_path(model_path)]


def default_run_name(env_id: str, preset: str) -> str:
    """``<env>_<preset>_<YYYYmmdd-HHMMSS>``, made filesystem-safe."""
    stem = re.sub(r"[^A-Za-z0-9._+-]+", "-", f"{env_id.split(':')[-1]}_{Path(preset).stem}")
    return f"{stem}_{time.strftime('%Y%m%d-%H%M%S')}"


def check_run_name(name: str) -> str:
    """A run name must be a plain directory name."""
    if not NAME_PATTERN.match(name):
        raise ConfigError(f"--run-name {name!r}: use letters, digits and . _ + - only (no slashes or spaces)")
    return name


def resolve_run_dir(run: str | Path, runs_dir: str | Path = "runs") -> Path:
    """The directory of a run given by name (under ``runs_dir``) or by path.

    :raises ConfigError: when there is no such run, naming the closest run name
    """
    from mission_gym.config.loader import suggest

    candidates = [Path(run), Path(runs_dir) / str(run)]
    for path in candidates:
        if path.is_dir() and (path / "config.yaml").is_file():
            return path
    root = Path(runs_dir)
    names = sorted(p.name for p in root.iterdir() if (p / "config.yaml").is_file()) if root.is_dir() else []
    hint = suggest(str(run), names)
    raise ConfigError(f"no run {str(run)!r} (neither a run directory nor a run under {str(root)!r}){hint}")


class RunDir:
    """A run's directory and the files in it.

    :param path: the directory (need not exist yet)
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @property
    def name(self) -> str:
        return self.path.name

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    @property
    def checkpoints_dir(self) -> Path:
        return self.path / CHECKPOINTS

    def create(self) -> None:
        """Make the directory; it must not exist (a run is never overwritten)."""
        try:
            self.path.mkdir(parents=True)
        except FileExistsError:  # also when another command made it a moment ago
            raise ConfigError(
                f"run directory {str(self.path)!r} already exists; pick another --run-name or --resume it"
            ) from None
        self.checkpoints_dir.mkdir()

    def checkpoints(self) -> list[tuple[int, Path]]:
        """``(steps, path)`` of every complete checkpoint, oldest first."""
        if not self.checkpoints_dir.is_dir():
            return []
        found = []
        for p in self.checkpoints_dir.iterdir():
            match = CKPT_PATTERN.match(p.name)
            if match:
                found.append((int(match.group(1)), p))
        return sorted(found)

    def latest_checkpoint(self) -> tuple[int, Path] | None:
        ckpts = self.checkpoints()
        return ckpts[-1] if ckpts else None

    def checkpoint_path(self, steps: int) -> Path:
        return self.checkpoints_dir / f"ckpt_{steps}_steps.zip"

    def prune_checkpoints(self, keep: int) -> None:
        """Delete all but the newest ``keep`` checkpoints (with the files saved beside them)."""
        for _, path in self.checkpoints()[:-keep]:
            path.unlink(missing_ok=True)  # the model first: a kill in between leaves no model without statistics
            for beside in saved_with(path):
                beside.unlink(missing_ok=True)

    def update_metadata(self, **values: Any) -> dict[str, Any]:
        """Merge ``values`` into ``metadata.json`` (written atomically) and return the result."""
        data = read_json(self.path / "metadata.json")
        data.update(values)
        write_json(self.path / "metadata.json", data)
        return data


def read_last_progress(path: Path, tail_bytes: int = 65536) -> dict[str, str]:
    """The latest value of every column of an SB3 ``progress.csv`` (within its last ``tail_bytes``); ``{}`` before
    the first row.

    Rows need not fill every column (an evaluation row carries no ``time/fps``), so each column takes its value
    from the newest row that has one. SB3 rewrites the file with a wider header when new keys appear, so the
    header is read every time.
    """
    try:
        with open(path, "rb") as f:
            header = f.readline().decode(errors="replace").strip()
            f.seek(0, io.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - tail_bytes))
            tail = f.read().decode(errors="replace")
    except OSError:
        return {}
    if not header:
        return {}
    names = next(csv.reader([header]))
    lines = tail.split("\n")[:-1]  # text after the last newline may be half-written
    out: dict[str, str] = {}
    for line in reversed(lines):
        if not line.strip() or line.strip() == header:
            continue
        values = next(csv.reader([line]))
        if len(values) != len(names):  # a row cut by the tail window, or one written before the header grew
            continue
        for k, v in zip(names, values):
            if v != "" and k not in out:
                out[k] = v
        if len(out) == len(names):
            break
    return out


def write_new_run(
    run: RunDir,
    config: Any,
    command: str | None,
    notes: str | None,
    lineage: dict[str, Any],
    metadata: dict[str, Any],
) -> None:
    """A new run's ``config.yaml``, ``command.txt``, ``lineage.json`` and ``metadata.json``.

    :param lineage: what this run's lineage adds to (or changes in) the common fields (a root run by default)
    :param metadata: the same for its metadata (hardware, ...)
    """
    config_data = config.model_dump()
    atomic_write_text(run / "config.yaml", dump_yaml(config_data))
    atomic_write_text(run / "command.txt", (command or " ".join(sys.argv)) + "\n")
    common = {"run": run.name, "parent": None, "root": run.name, "branch": None, "notes": notes}
    write_json(run / "lineage.json", {**common, "config_hash": config_hash(config_data), **lineage, "created": now()})
    write_json(
        run / "metadata.json",
        {
            "run": run.name,
            "env_id": config.env,
            "preset": config.preset,
            "status": "created",
            "target_timesteps": config.timesteps,
            "timesteps": 0,
            "notes": notes,
            "versions": versions(),
            "git_commit": git_commit(),
            **metadata,
            "created": now(),
        },
    )


def versions() -> dict[str, str]:
    """Versions of Python and the libraries a run depends on."""
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for pkg in ("mission_gym", "stable_baselines3", "torch", "gymnasium", "numpy", "numba", "mujoco"):
        try:
            out[pkg] = version(pkg.replace("_", "-"))
        except PackageNotFoundError:
            pass
    return out


def git_commit() -> str | None:
    """The package's git commit (``-dirty`` with uncommitted changes), None outside a checkout."""
    root = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "-uno"], capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def hardware_info(device: str, threads: int) -> dict[str, Any]:
    """The machine a session runs on, for ``metadata.json``."""
    import psutil
    import torch

    from mission_gym.hardware import available_cores, total_ram_gb

    info: dict[str, Any] = {
        "host": platform.node(),
        "cpu_count": psutil.cpu_count(),
        "cores_available": available_cores(),
        "ram_gb": round(total_ram_gb(), 1),
        "device": device,
        "torch_threads": threads,
    }
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(torch.device(device))
        info.update(gpu=props.name, gpu_mem_gb=round(props.total_memory / 2**30, 1))
    return info
