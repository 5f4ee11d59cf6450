"""Which preset fits a machine: the one rule behind ``--preset auto``, ``memory_helper --memory`` and the advice
when training runs out of CUDA memory.

A selector preset (``auto.yaml``: ``selector: true``) names a CPU preset and GPU candidates. Without a CUDA GPU the
CPU preset runs; with one, the candidate with the most members (then the largest GPU estimate) whose memory on CUDA
fits the card and the host RAM (:func:`~mission_gym.settings.sizing.population_estimate`: the whole population in one
batched learner, as ``population.learner: auto`` trains it there) and that has a core for every two members: the
member count follows the cores. When no candidate fits, the CPU preset.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mission_gym.settings.memory import MemoryEstimate, fits
from mission_gym.settings.schema import TrainConfig
from mission_gym.settings.sizing import cores_needed, population_estimate


@dataclass(frozen=True)
class Verdict:
    """A GPU candidate weighed against a machine.

    :param name: the preset's name
    :param config: the preset
    :param estimate: its memory on CUDA (all of its members in one batched learner, or with ``population.learner:
        processes`` as many processes as the machine's cores hold: :func:`~mission_gym.settings.sizing.population_estimate`)
    :param fits_memory: the estimate fits the card and the host RAM (:func:`~mission_gym.settings.memory.fits`)
    :param cores_needed: the cores the preset wants (:func:`~mission_gym.settings.sizing.cores_needed`)
    :param enough_cores: the machine has them
    """

    name: str
    config: TrainConfig
    estimate: MemoryEstimate
    fits_memory: bool
    cores_needed: int
    enough_cores: bool

    @property
    def fits(self) -> bool:
        """Whether the machine can run the preset: memory and cores."""
        return self.fits_memory and self.enough_cores


def weigh(
    candidates: Mapping[str, TrainConfig],
    gpu_mem_gb: float,
    cores: int,
    ram_gb: float,
    min_cores: Mapping[str, int] | None = None,
) -> list[Verdict]:
    """Each GPU candidate's verdict on a machine, in the order the rule tries them (most members, then the largest
    GPU estimate, first).

    :param candidates: name -> preset
    :param gpu_mem_gb: total memory of the GPU in GiB
    :param cores: CPU cores available to the run
    :param ram_gb: host RAM in GiB available to the run
    :param min_cores: name -> the cores its tier wants, where that is the rule (a single-run recipe's seeds) rather
        than its members' (:func:`~mission_gym.settings.sizing.cores_needed`)
    """
    verdicts = []
    for name, config in candidates.items():
        # a member whose learner the tier keeps on the CPU (an MLP policy) holds no GPU memory
        est = population_estimate(config, "cpu" if config.device == "cpu" else "cuda", cores)
        need = (min_cores or {}).get(name) or cores_needed(config)
        verdicts.append(Verdict(name, config, est, fits(est, gpu_mem_gb, ram_gb), need, cores >= need))
    return sorted(verdicts, key=lambda v: (v.config.population.size, v.estimate.gpu_bytes), reverse=True)


def pick(verdicts: Sequence[Verdict], cpu: str) -> str:
    """The preset the rule picks: the first candidate that fits, else ``cpu``."""
    return next((v.name for v in verdicts if v.fits), cpu)
