"""Size a run to the machine before starting it.

``python -m mission_gym.scripts.memory_helper --compare`` prints every preset's estimated host RAM, GPU memory,
rollout buffer and parameter count; ``--memory 8`` names the preset that fits an 8 GiB GPU with this machine's
cores and why (the rule of ``--preset auto``, :mod:`mission_gym.settings.fit`);
``--preset heavy`` prints one preset's breakdown; ``--measure [--preset quick]`` trains for a few rollouts and
prints the estimate next to the measured peaks (RSS; on CUDA also ``torch.cuda.max_memory_allocated`` and NVML).
The memory model is :mod:`mission_gym.settings.memory`; ``docs/gpu-guide.md`` explains it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mission_gym.config.yaml_io import ConfigError
from mission_gym.hardware import GB, MB, detect_hardware
from mission_gym.scripts.cli import CliParser, command_main, fail
from mission_gym.settings import memory as mem
from mission_gym.settings.fit import pick
from mission_gym.settings.overrides import apply_overrides
from mission_gym.settings.presets import (
    AUTO_PRESET,
    choose_preset,
    is_selector,
    load_preset,
    load_presets,
    preset_names,
    presets_dir,
    read_selector,
    weigh_candidates,
)
from mission_gym.settings.schema import TrainConfig
from mission_gym.settings.sizing import cores_needed, members_at_once, population_estimate, shape_from_config
from mission_gym.vec import VEC_ENV_KINDS


def _mb(x: float) -> str:
    return f"{x / MB:,.0f} MB"


def _print_table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for i, col in enumerate(columns):
        table.add_column(col, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*row)
    Console(width=160).print(table)


def compare(presets: dict[str, Any]) -> None:
    """Every preset: shape, parameters, rollout buffer, host RAM on CPU and on CUDA, GPU memory."""
    rows = []
    for name, config in presets.items():
        shape = shape_from_config(config, device="cpu")
        members, at_once = config.population.size, members_at_once(config)
        on_cpu = mem.estimate_memory(shape).scaled(at_once)
        on_gpu = population_estimate(config, "cuda")
        rows.append(
            [
                name,
                str(members),
                str(at_once),
                f"{shape.n_envs}×{shape.n_steps} = {shape.rollout:,}",
                str(shape.batch_size),
                ",".join(map(str, shape.net_arch)),
                shape.vec_env,
                f"{on_cpu.params:,}",
                _mb(mem.rollout_buffer_bytes(shape)),
                _mb(on_cpu.host_bytes),
                _mb(on_gpu.host_bytes),
                _mb(on_gpu.gpu_bytes),
                str(cores_needed(config)),
            ]
        )
    _print_table(
        "Estimated peak memory per preset (python -m mission_gym.scripts.memory_helper --compare)",
        [
            "preset",
            "members",
            "at once (cpu)",
            "n_envs×n_steps",
            "batch",
            "network",
            "vec-env",
            "params",
            "rollout buffer",
            "host RAM (cpu)",
            "host RAM (cuda)",
            "GPU memory (cuda)",
            "cores",
        ],  # fmt: skip
        rows,
    )
    print(
        "cores: what `auto` wants (a core for every two members). On the CPU, memory is of the members at once on "
        "those cores (one process each, the rest waiting their turn); on CUDA, of the whole population in one batched "
        "learner (one process, one CUDA context: population.learner auto). GPU memory is what nvidia-smi would show; "
        "host RAM includes env worker processes."
    )


def best_for_memory(gpu_gb: float, cores: int, ram_gb: float, directory: Path | None) -> None:
    """The preset that fits a GPU of ``gpu_gb`` on this machine's cores and ``ram_gb`` of host RAM (what ``--preset
    auto`` would pick there), with each GPU candidate's verdict."""
    found = read_selector(AUTO_PRESET, directory)
    if found is None:
        raise ConfigError(f"preset {AUTO_PRESET!r} in {directory or presets_dir()} is not a selector")
    rules = found[0]
    verdicts = weigh_candidates(gpu_gb, cores, ram_gb, directory, rules)
    budget_gpu, budget_ram = mem.FIT_FRACTION * gpu_gb * GB, mem.FIT_FRACTION * ram_gb * GB
    table = []
    for v in verdicts:
        est = v.estimate
        if v.fits:
            why = "fits"
        elif est.gpu_bytes > budget_gpu:
            why = f"GPU {est.gpu_bytes / GB:.2f} GiB > {budget_gpu / GB:.2f} GiB"
        elif not v.fits_memory:
            why = f"host {est.host_bytes / GB:.2f} GiB > {budget_ram / GB:.2f} GiB"
        else:
            why = f"wants {v.cores_needed} cores, {cores} here"
        table.append([v.name, _mb(est.gpu_bytes), _mb(est.host_bytes), "yes" if v.fits else "no", why])
    _print_table(
        f"Presets --preset auto weighs on a {gpu_gb:g} GiB GPU with {cores} cores and {ram_gb:.0f} GiB host RAM "
        f"(using at most {mem.FIT_FRACTION:.0%} of each memory)",
        ["preset", "GPU memory", "host RAM", "fits", "why"],
        table,
    )
    best = pick(verdicts, rules.cpu)
    chosen = next((v for v in verdicts if v.name == best), None)
    if chosen is None:
        print(f"No GPU preset fits a {gpu_gb:g} GiB GPU with {cores} cores; train on the CPU (--preset {best} --device cpu).")
        return
    est = chosen.estimate
    print(
        f"Largest preset that fits: {best} (estimated {est.gpu_bytes / GB:.2f} GiB GPU, "
        f"{est.host_bytes / GB:.2f} GiB host RAM; what --preset auto picks on such a machine). "
        f"Run: python -m mission_gym.scripts.train_ppo --preset {best}"
    )


def measure(config: TrainConfig, shape: mem.RunShape, name: str, rollouts: int) -> None:
    """Train ``rollouts`` rollouts of ``config`` in this process (as the trainer builds it) and print the estimate
    next to the measured peaks."""
    est = mem.estimate_memory(shape)
    print(f"measuring preset {name}: {rollouts} rollouts of {shape.rollout:,} steps on {shape.device} ...", flush=True)
    from mission_gym.training.measure import measure_training

    got = measure_training(config, rollouts=rollouts)
    print(est.breakdown())
    rows = []

    def add(what: str, estimate: float, measured: float) -> None:
        ratio = f"{(estimate / measured - 1) * 100:+.1f}%" if measured > 0 else "-"
        rows.append([what, _mb(estimate), _mb(measured) if measured > 0 else "not measured", ratio])

    add("peak RSS of the training process", est.host_bytes - est.worker_bytes, got.peak_rss_bytes)
    if shape.vec_env == "subproc":
        add("env workers (sum of USS)", est.worker_bytes, got.worker_bytes)
    if est.gpu:
        add("torch.cuda.max_memory_allocated", est.gpu_allocated_bytes, got.cuda_max_allocated)
        add("torch.cuda.max_memory_reserved + context", est.gpu_bytes, got.cuda_max_reserved + mem.CUDA_CONTEXT_MB * MB)
        add("NVML memory used, process (end)", est.gpu_bytes, got.nvml_process_used)
        add("NVML memory used, device (peak)", est.gpu_bytes, got.nvml_used_peak)
    _print_table(
        f"Estimate vs measured: {name}, {got.timesteps:,} steps in {got.seconds:.1f} s "
        f"({got.timesteps / max(got.seconds, 1e-9):,.0f} steps/s end to end)",
        ["quantity", "estimated", "measured", "estimate vs measured"],
        rows,
    )


def build_parser() -> CliParser:
    p = CliParser(
        prog="python -m mission_gym.scripts.memory_helper",
        description="Estimate (and measure) the host RAM and GPU memory of training presets.",
    )
    what = p.add_mutually_exclusive_group()
    what.add_argument("--compare", action="store_true", help="every preset in one table (the default)")
    what.add_argument("--memory", type=float, metavar="GB", help="the preset that fits a GPU with GB GiB here, and why")
    what.add_argument("--measure", action="store_true", help="train a few rollouts of --preset and compare with the estimate")
    p.add_argument(
        "--preset", metavar="NAME|PATH", help="breakdown of one preset (or the preset --measure runs; default quick)"
    )
    p.add_argument("--device", default="auto", help="cpu, cuda[:i] or auto (CUDA when present) for --preset and --measure")
    p.add_argument("--vec-env", choices=list(VEC_ENV_KINDS), help="override the preset's vec-env kind")
    p.add_argument("--ram", type=float, metavar="GB", help="host RAM budget in GiB (default: this machine's)")
    p.add_argument("--rollouts", type=int, default=2, help="rollouts trained by --measure")
    p.add_argument("--presets-dir", type=Path, help="read presets from this directory instead of the shipped ones")
    return p


def _resolve_device(device: str, preset_device: str | None) -> str | None:
    if device == "auto":
        device = preset_device if preset_device not in (None, "auto") else "auto"
    if device == "auto":
        return "cuda" if detect_hardware().gpu_mem_gb else "cpu"
    if device == "cpu" or device == "cuda" or (device.startswith("cuda:") and device[5:].isdigit()):
        return device
    return None


def _bad_number(args: Any) -> str | None:
    """What is wrong with a numeric flag, or None."""
    if args.memory is not None and args.memory <= 0:
        return f"--memory must be a positive number of GiB, got {args.memory:g}"
    if args.ram is not None and args.ram <= 0:
        return f"--ram must be a positive number of GiB, got {args.ram:g}"
    if args.rollouts < 1:
        return f"--rollouts must be >= 1, got {args.rollouts}"
    return None


def _preset(preset_arg: str, args: Any, ram_gb: float) -> tuple[TrainConfig, mem.RunShape, str]:
    """The configuration, shape and name of ``--preset`` (a selector's pick on this machine), with ``--device`` and
    ``--vec-env`` applied.

    :raises ValueError: for a preset or device that is not valid (a ConfigError's text names the file and key)
    """
    name = Path(preset_arg).stem
    if is_selector(preset_arg, args.presets_dir):
        hw = detect_hardware()
        name = choose_preset(hw.gpu_mem_gb, hw.cores, ram_gb, args.presets_dir)
        print(f"{preset_arg} -> {name} (GPU: {hw.gpu_name or 'none'}, {hw.cores} cores, {ram_gb:.0f} GiB RAM)")
        preset_arg = name
    config = load_preset(preset_arg, args.presets_dir)
    device = _resolve_device(args.device, config.device)
    if device is None:
        raise ValueError(f"--device {args.device!r} is not valid; use auto, cpu, cuda or cuda:N")
    changes = {"device": device, **({"vec_env": args.vec_env} if args.vec_env else {})}
    config = apply_overrides(config, changes, source="memory_helper flags")
    return config, shape_from_config(config), name


@command_main
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    bad = _bad_number(args)
    if bad:
        return fail(bad)
    try:
        names = preset_names(args.presets_dir)
    except OSError as exc:
        return fail(f"cannot read presets: {exc}")
    if not names:
        where = args.presets_dir or presets_dir()
        return fail(f"no presets (*.yaml) in {where}")
    ram_gb = args.ram or detect_hardware().ram_gb
    preset_arg = args.preset or ("quick" if args.measure else None)
    try:
        chosen = _preset(preset_arg, args, ram_gb) if preset_arg is not None else None
        if args.memory is not None and not args.measure:
            best_for_memory(args.memory, detect_hardware().cores, ram_gb, args.presets_dir)
            return 0
    except (OSError, ValueError) as exc:
        return fail(str(exc))
    if chosen is None:
        compare(load_presets(args.presets_dir))
        return 0
    config, shape, name = chosen
    if args.measure:
        if shape.on_cuda and not detect_hardware().gpu_mem_gb:
            return fail("--device cuda but no CUDA GPU is visible; use --device cpu")
        measure(config, shape, name, args.rollouts)
        return 0
    print(f"preset {name}:")
    print(mem.estimate_memory(shape).breakdown())
    return 0


if __name__ == "__main__":
    sys.exit(main())
