"""``--preset auto``: the preset that suits this machine, chosen with the memory estimator.

A selector preset (``auto.yaml``: ``selector: true``) names a CPU preset and GPU candidates. Without CUDA the CPU
preset runs; with a GPU, the candidate with the largest estimated GPU memory that fits the card and the host RAM and
has enough cores for its envs (:func:`choose_auto_preset`).
"""

from __future__ import annotations

from pathlib import Path

from mission_gym.config.yaml_io import ConfigError
from mission_gym.hardware import detect_hardware
from mission_gym.ppo import presets
from mission_gym.ppo.config import TrainConfig
from mission_gym.ppo.memory import estimate_memory, fits
from mission_gym.ppo.presets import AutoPreset
from mission_gym.ppo.sizing import shape_from_config

# ``auto`` gives a GPU preset at least n_envs / ENVS_PER_CORE cores (fast 2, heavy 4, beast 8). A heuristic: the
# native env steps in one thread, but each step also runs policy inference and SB3's Python loop, and torch uses
# the remaining cores for its CPU-side work; with fewer cores the bigger presets' longer rollouts leave the GPU idle.
ENVS_PER_CORE = 8


def choose_auto_preset(
    gpu_mem_gb: float | None,
    cores: int,
    ram_gb: float,
    directory: str | Path | None = None,
    rules: AutoPreset | None = None,
) -> str:
    """The preset a selector runs on a machine.

    :param gpu_mem_gb: total memory of the GPU in GiB, None without a CUDA GPU
    :param cores: CPU cores available to the run
    :param ram_gb: host RAM in GiB available to the run
    :param directory: a directory of presets with an ``auto.yaml``; None for the package's own
    :param rules: the parsed selector; None reads ``directory``'s ``auto.yaml``
    """
    if rules is None:
        found = presets.read_selector(presets.AUTO_PRESET, directory)
        if found is None:
            raise ConfigError(f"preset {presets.AUTO_PRESET!r} in {directory or presets.presets_dir()} is not a selector")
        rules = found[0]
    if gpu_mem_gb:
        estimates = [
            estimate_memory(shape_from_config(presets.load_preset(name, directory), device="cuda", cores=cores))
            for name in rules.gpu
        ]
        for est in sorted(estimates, key=lambda e: e.gpu_bytes, reverse=True):
            if fits(est, gpu_mem_gb, ram_gb) and cores * ENVS_PER_CORE >= est.shape.n_envs:
                return next(name for name, e in zip(rules.gpu, estimates) if e is est)
    return rules.cpu


def resolve(name_or_path: str | Path, directory: str | Path | None = None) -> tuple[str | Path, str | Path | None]:
    """The run preset a name stands for on this machine and the directory to read it from: the name itself, or what
    a selector picks (from the selector's own directory)."""
    found = presets.read_selector(name_or_path, directory)
    if found is None:
        return name_or_path, directory
    rules, path = found
    hw = detect_hardware()
    chosen = choose_auto_preset(hw.gpu_mem_gb, hw.cores, hw.ram_gb, directory=path.parent, rules=rules)
    if chosen == path.stem:
        raise ConfigError(f"{path}: a selector cannot choose itself")
    return chosen, path.parent


def load_preset(name_or_path: str | Path, directory: str | Path | None = None) -> TrainConfig:
    """Read and validate a preset, a selector such as ``auto`` giving the preset it picks on this machine.

    :raises ConfigError: naming the file and the key at fault
    """
    return presets.load_preset(*resolve(name_or_path, directory))
