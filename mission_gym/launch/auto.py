"""``--preset auto``: the preset that suits this machine, chosen with the memory estimator.

A selector preset (``auto.yaml``: ``selector: true``) names a CPU preset and GPU candidates. Without CUDA the CPU
preset runs; with a GPU, the candidate with the most members whose estimate (its members at once, one per core) fits
the card and the host RAM and that has a core for every two members (:func:`choose_auto_preset`): the member count
follows the cores and the card.
"""

from __future__ import annotations

from pathlib import Path

from mission_gym.config.yaml_io import ConfigError
from mission_gym.hardware import detect_hardware
from mission_gym.ppo import presets
from mission_gym.ppo.config import TrainConfig
from mission_gym.ppo.memory import estimate_memory, fits
from mission_gym.ppo.presets import AutoPreset
from mission_gym.ppo.sizing import cores_needed, members_at_once, shape_from_config


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
        candidates = []
        for name in rules.gpu:
            config = presets.load_preset(name, directory)
            est = estimate_memory(shape_from_config(config, device="cuda", cores=cores))
            candidates.append((name, config, est.scaled(members_at_once(config, cores))))
        for name, config, est in sorted(candidates, key=lambda c: (c[1].population.size, c[2].gpu_bytes), reverse=True):
            if fits(est, gpu_mem_gb, ram_gb) and cores >= cores_needed(config):
                return name
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


def device_notes(config: TrainConfig) -> list[str]:
    """A line for a GPU preset that finds no CUDA device here: it trains on the CPU, slower."""
    found = presets.read_selector(presets.AUTO_PRESET)
    if found is None or config.preset not in found[0].gpu or config.device not in ("auto", "cuda"):
        return []
    hw = detect_hardware()
    if hw.gpu_mem_gb:
        return []
    members = config.population.size
    instead = f"(slower; --preset {found[0].cpu} is this machine's)"
    if members <= 1:  # one run, or a population's member (pinned to its own core)
        return [f"no CUDA device here: the GPU preset {config.preset!r} trains on the CPU {instead}"]
    at_once = members_at_once(config, hw.cores)
    return [
        f"no CUDA device here: the GPU preset {config.preset!r} trains its {members} members on the CPU, {at_once} at a "
        f"time on {hw.cores} cores {instead}"
    ]
