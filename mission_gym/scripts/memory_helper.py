"""Size a run of a task to the machine before starting it.

``python -m mission_gym.scripts.memory_helper --env Hopper-v5 --compare`` prints every tier composed for the task on
this machine (and the task's recipe as written): its size, host RAM, GPU memory, rollout buffer and parameters;
``--memory 12`` names the tier ``--preset auto`` picks for the task on a 12 GiB GPU with this machine's cores and
RAM, with what each tier needs and why it fits or not (:mod:`mission_gym.plan.fit`); ``--preset heavy`` prints
what that preset is for the task (its recipe, its size and why) and its breakdown, and with ``--memory GB`` whether
such a machine fits it; ``--measure [--preset quick]`` trains a few rollouts and prints the estimate next to the
measured peaks (RSS, the env workers' total; on CUDA also ``torch.cuda.max_memory_allocated`` and NVML). Without
``--env`` the task is Mission Gym. The memory model is :mod:`mission_gym.settings.memory`; ``docs/gpu-guide.md``
explains it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mission_gym.config.yaml_io import ConfigError
from mission_gym.hardware import GB, MB, Hardware, detect_hardware
from mission_gym.plan.fit import Verdict, pick, weigh
from mission_gym.plan.presets import (
    AUTO_PRESET,
    DEFAULT_ENV,
    Composed,
    compose_preset,
    is_selector,
    preset_names,
    presets_dir,
    read_selector,
    read_tier,
    recipe_for,
    weigh_candidates,
)
from mission_gym.scripts.cli import CliParser, command_main, fail
from mission_gym.settings import memory as mem
from mission_gym.settings.overrides import apply_overrides
from mission_gym.settings.schema import TrainConfig
from mission_gym.settings.sizing import (
    cores_needed,
    members_at_once,
    population_estimate,
    population_learner,
    shape_from_config,
)
from mission_gym.vec import VEC_ENV_KINDS
from mission_gym.vec.wrappers import quiet_mujoco


def _mb(x: float) -> str:
    return f"{x / MB:,.0f} MB"


def _print_table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for i, col in enumerate(columns):
        table.add_column(col, justify="left" if i < 2 else "right")
    for row in rows:
        table.add_row(*row)
    Console(width=200).print(table)


def _cores(n: int) -> str:
    return f"{n} core{'s' * (n != 1)}"


def _for_env(config: TrainConfig, env: str | None) -> TrainConfig:
    """A preset written for one task, on ``env`` (None: its own), as ``train_ppo --env`` applies it."""
    if env is None or config.env == env:
        return config
    return apply_overrides(config, {"env": env}, source="--env")


def _compose(name: str, directory: Path | None, env: str | None, hw: Hardware) -> Composed:
    """A preset for the task on the machine ``hw``: a tier (or ``auto``) sizes the task's recipe, anything else is as
    written with its env replaced."""
    composed = compose_preset(name, directory, env=env, hardware=hw)
    if read_selector(name, directory) is None and read_tier(name, directory) is None:
        config = _for_env(composed.config, env)
        task = f", on {config.env}" if config.env != composed.config.env else ""
        return Composed(config, [f"preset {Path(name).stem}: as written (not a tier, so its own size){task}"])
    return composed


def _learner_device(config: TrainConfig) -> str:
    """Where the learner trains on a machine with a GPU (a tier keeps an MLP's learner on the CPU)."""
    return "cpu" if config.device == "cpu" else "cuda"


def _group(config: TrainConfig) -> str:
    """``seeds`` for seeds trained side by side (a population without cuts), ``members`` for a population."""
    return "members" if config.population.cuts else "seeds"


def _learner(config: TrainConfig) -> str:
    device = _learner_device(config)
    if device == "cpu":
        return "CPU"
    return "GPU, batched" if config.population.size > 1 and population_learner(config, device) == "batched" else "GPU"


def compare_presets(directory: Path | None, env: str | None, hw: Hardware) -> tuple[dict[str, TrainConfig], str | None]:
    """What ``--compare`` shows: every tier composed for the task on ``hw`` and the task's recipe as written (and its
    name); for a directory without tiers, every preset in it as written (and None)."""
    names = [n for n in preset_names(directory) if not is_selector(n, directory)]
    tiers = [n for n in names if read_tier(n, directory) is not None]
    if not tiers:
        return {n: _for_env(compose_preset(n, directory).config, env) for n in names}, None
    out = {n: compose_preset(n, directory, env=env or DEFAULT_ENV, hardware=hw).config for n in tiers}
    recipe = recipe_for(env or DEFAULT_ENV, directory).name
    out[recipe] = _for_env(compose_preset(recipe, directory).config, env)
    return out, recipe


def _cores_wanted(config: TrainConfig, directory: Path | None) -> int:
    """The cores ``auto`` wants for a preset: its tier's ``min_cores`` for a single-run recipe's seeds, else one for
    every two members (as :func:`~mission_gym.plan.presets.weigh_candidates` weighs them)."""
    tier = read_tier(config.tier, directory) if config.tier else None
    return tier.min_cores if tier is not None and not config.population.cuts else cores_needed(config)


def compare(
    presets: dict[str, TrainConfig], hw: Hardware, directory: Path | None = None, task_recipe: str | None = None
) -> None:
    """Every preset: its recipe and size, parameters, rollout buffer, host RAM without a GPU and with one, GPU memory.

    :param task_recipe: the row that is the task's recipe as written
    """
    rows = []
    for name, config in presets.items():
        at_once = members_at_once(config, hw.cores)
        on_cpu = population_estimate(config, "cpu", hw.cores)
        on_gpu = population_estimate(config, _learner_device(config), hw.cores)
        shape = on_cpu.shape
        size = "1" if config.population.size == 1 else f"{config.population.size} {_group(config)}"
        recipe = config.recipe or ("the task's" if name == task_recipe else "-")
        rows.append(
            [
                name, recipe, size, str(at_once), f"{shape.n_envs}×{shape.n_steps}", str(shape.batch_size),
                ",".join(map(str, shape.net_arch)) or "-", shape.vec_env, _learner(config), f"{on_cpu.params:,}",
                _mb(mem.rollout_buffer_bytes(shape)), _mb(on_cpu.host_bytes), _mb(on_gpu.host_bytes),
                _mb(on_gpu.gpu_bytes), str(_cores_wanted(config, directory)),
            ]
        )  # fmt: skip
    env = next(iter(presets.values())).env if presets else DEFAULT_ENV
    _print_table(
        f"Estimated peak memory of each preset for {env} on {_cores(hw.cores)} "
        "(python -m mission_gym.scripts.memory_helper --compare)",
        [
            "preset",
            "recipe",
            "runs",
            "at once",
            "envs×steps",
            "batch",
            "network",
            "vec-env",
            "learner",
            "params",
            "buffer",
            "host, no GPU",
            "host, GPU",
            "GPU memory",
            "cores",
        ],  # fmt: skip
        rows,
    )
    print(
        "runs: a population's members, or the seeds a tier trains side by side; at once: how many train at once as "
        "processes on these cores (--cores for another machine); buffer: one run's rollout buffer; host, no GPU: the "
        "host RAM of those at once without a GPU. With a GPU the learner trains where the tier puts it (learner): a "
        "population's members in one batched learner (one process, one CUDA context), an MLP on the CPU; host, GPU and "
        "GPU memory (what nvidia-smi would show) are that run's. Host RAM includes env worker processes; cores: what "
        "`auto` wants before it picks the tier."
    )


def _why(v: Verdict, gpu_gb: float, ram_gb: float, cores: int) -> str:
    """Why a verdict fits or not, in a few words."""
    budget_gpu, budget_ram = mem.FIT_FRACTION * gpu_gb * GB, mem.FIT_FRACTION * ram_gb * GB
    est = v.estimate
    if est.gpu_bytes > budget_gpu:
        return f"GPU {est.gpu_bytes / GB:.2f} GiB > {budget_gpu / GB:.2f} GiB"
    if not v.fits_memory:
        return f"host {est.host_bytes / GB:.2f} GiB > {budget_ram / GB:.2f} GiB"
    if not v.enough_cores:
        return f"wants {_cores(v.cores_needed)}, {cores} here"
    return (
        f"fits ({_mb(est.host_bytes)} of {budget_ram / GB:.1f} GiB host RAM, {_mb(est.gpu_bytes)} of {budget_gpu / GB:.1f} "
        f"GiB GPU, {v.cores_needed} of {cores} cores)"
    )


def _what(config: TrainConfig) -> str:
    """A tier's size for a task, in a few words."""
    runs = "" if config.population.size == 1 else f"{config.population.size} {_group(config)} × "
    return f"{runs}{config.n_envs} envs {config.vec_env}, learner on {_learner(config)}"


def explain_on(name: str, directory: Path | None, env: str | None, gpu_gb: float, hw: Hardware) -> None:
    """What ``--preset name`` is for the task on a GPU of ``gpu_gb`` GiB with ``hw``'s cores and RAM (its recipe and
    size, and why), what it needs and whether that machine fits it."""
    composed = _compose(name, directory, env, hw)
    config = composed.config
    tier_name = config.tier or Path(name).stem
    tier = read_tier(tier_name, directory) if config.tier else None
    min_cores = {tier_name: tier.min_cores} if tier is not None and not config.population.cuts else None
    (v,) = weigh({tier_name: config}, gpu_gb, hw.cores, hw.ram_gb, min_cores)
    cores = _cores(hw.cores)
    picked = f" (auto picks {tier_name} there)" if is_selector(name, directory) else ""
    print(f"{name} for {config.env} on a {gpu_gb:g} GiB GPU with {cores} and {hw.ram_gb:.0f} GiB of RAM{picked}:")
    for note in composed.notes:
        print(f"  {note}")
    est, size, group = v.estimate, config.population.size, _group(config)
    runs = ""
    if size > 1 and _learner(config) == "GPU, batched":
        runs = f" (all {size} {group} in one batched learner on the GPU)"
    elif size > 1:
        at_once = members_at_once(config, hw.cores)
        every = mem.estimate_memory(est.shape).scaled(size).host_bytes
        runs = f" ({at_once} of its {size} {group} at once on {cores}; all {size} at once: {_mb(every)})"
        runs = runs if at_once < size else f" (all {size} {group} at once)"
    gpu = _mb(est.gpu_bytes) if est.gpu else "none (its learners train on the CPU)"
    print(f"  needs: {_mb(est.host_bytes)} of host RAM{runs}; GPU memory: {gpu}; cores wanted: {v.cores_needed}")
    print(f"  fits this machine: {'yes' if v.fits else 'no'}: {_why(v, gpu_gb, hw.ram_gb, hw.cores)}")


def best_for_memory(gpu_gb: float, hw: Hardware, directory: Path | None, env: str | None) -> None:
    """The tier ``--preset auto`` picks for the task on a GPU of ``gpu_gb`` GiB with ``hw``'s cores and RAM, with each
    GPU candidate's size, needs and verdict."""
    found = read_selector(AUTO_PRESET, directory)
    if found is None:
        raise ConfigError(f"preset {AUTO_PRESET!r} in {directory or presets_dir()} is not a selector")
    rules = found[0]
    verdicts = weigh_candidates(gpu_gb, hw.cores, hw.ram_gb, directory, rules, env)
    table = [
        [v.name, v.config.recipe or "-", _what(v.config), _mb(v.estimate.host_bytes), _mb(v.estimate.gpu_bytes),
         str(v.cores_needed), "yes" if v.fits else "no", _why(v, gpu_gb, hw.ram_gb, hw.cores)]
        for v in verdicts
    ]  # fmt: skip
    task = env or DEFAULT_ENV
    _print_table(
        f"What --preset auto weighs for {task} on a {gpu_gb:g} GiB GPU with {_cores(hw.cores)} and {hw.ram_gb:.0f} GiB host "
        f"RAM (using at most {mem.FIT_FRACTION:.0%} of each memory)",
        ["preset", "recipe", "size here", "host RAM", "GPU memory", "cores wanted", "fits", "why"],
        table,
    )
    best = pick(verdicts, rules.cpu)
    chosen = next((v for v in verdicts if v.name == best), None)
    run = f"python -m mission_gym.scripts.train_ppo{'' if env is None else f' --env {env}'} --preset {best}"
    if chosen is None:
        print(f"No GPU preset fits a {gpu_gb:g} GiB GPU with {_cores(hw.cores)}; auto trains {task} on the CPU. Run: {run}")
        return
    est = chosen.estimate
    print(
        f"Largest preset that fits: {best} (estimated {est.gpu_bytes / GB:.2f} GiB GPU, {est.host_bytes / GB:.2f} GiB "
        f"host RAM; what --preset auto picks on such a machine). Run: {run}"
    )


def measure(config: TrainConfig, shape: mem.RunShape, name: str, rollouts: int) -> None:
    """Train ``rollouts`` rollouts of ``config`` in a fresh process (as the trainer builds it) and print the estimate
    next to the measured peaks."""
    est = mem.estimate_memory(shape)
    print(f"measuring preset {name}: {rollouts} rollouts of {shape.rollout:,} steps on {shape.device} ...", flush=True)
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from mission_gym.training.measure import measure_training

    # a fresh process whose peak RSS is the training's alone (not this one's probe of the task), its vec-env kind the
    # one estimated, so it probes nothing itself
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        got = pool.submit(measure_training, config.model_copy(update={"vec_env": shape.vec_env}), rollouts).result()
    print(est.breakdown())
    rows = []

    def add(what: str, estimate: float, measured: float) -> None:
        ratio = f"{(estimate / measured - 1) * 100:+.1f}%" if measured > 0 else "-"
        rows.append([what, _mb(estimate), _mb(measured) if measured > 0 else "not measured", ratio])

    # mapped files' pages count as many as the page cache holds (mem.HOST_LIBRARY_FILES_MB): the private memory is
    # the comparison that says whether the run was planned right
    files = mem.HOST_LIBRARY_FILES_MB * MB
    add("peak RSS of the training process", est.host_bytes - est.worker_bytes, got.peak_rss_bytes)
    if got.file_rss_bytes:
        add("  of it private (less mapped files)", est.host_bytes - est.worker_bytes - files,
            got.peak_rss_bytes - got.file_rss_bytes)  # fmt: skip
    if shape.vec_env == "subproc":
        add("env workers + forkserver (sum of PSS)", est.worker_bytes, got.worker_bytes)
        if got.worker_file_bytes:
            add("  of it private (less mapped files)", est.worker_bytes - mem.SUBPROC_FILES_MB * MB,
                got.worker_bytes - got.worker_file_bytes)  # fmt: skip
        add("total (process + workers)", est.host_bytes, got.peak_rss_bytes + got.worker_bytes)
    if est.gpu:
        add("torch.cuda.max_memory_allocated", est.gpu_allocated_bytes, got.cuda_max_allocated)
        add("torch.cuda.max_memory_reserved + context", est.gpu_bytes, got.cuda_max_reserved + mem.CUDA_CONTEXT_MB * MB)
        add("NVML memory used, process (end)", est.gpu_bytes, got.nvml_process_used)
        add("NVML memory used, device (peak)", est.gpu_bytes, got.nvml_used_peak)
    _print_table(
        f"Estimate vs measured: {name} on {config.env}, {got.timesteps:,} steps in {got.seconds:.1f} s "
        f"({got.timesteps / max(got.seconds, 1e-9):,.0f} steps/s end to end)",
        ["quantity", "estimated", "measured", "estimate vs measured"],
        rows,
    )


def build_parser() -> CliParser:
    p = CliParser(
        prog="python -m mission_gym.scripts.memory_helper",
        description="Estimate (and measure) the host RAM and GPU memory of training presets for a task.",
    )
    what = p.add_mutually_exclusive_group()
    what.add_argument("--compare", action="store_true", help="every tier for the task in one table (the default)")
    what.add_argument(
        "--memory", type=float, metavar="GB", help="the tier auto picks for the task on a GPU of GB GiB here, and why"
    )
    what.add_argument("--measure", action="store_true", help="train a few rollouts of --preset and compare with the estimate")
    p.add_argument("--env", metavar="ID", help="the Gymnasium task, e.g. Hopper-v5, CartPole-v1 [MissionGym-v0]")
    p.add_argument(
        "--preset",
        metavar="NAME|PATH",
        help="what one preset is for the task and its breakdown (with --memory: whether that machine fits it; the "
        "preset --measure runs, default quick)",
    )
    p.add_argument("--device", default="auto", help="cpu, cuda[:i] or auto (CUDA when present) for --preset and --measure")
    p.add_argument("--vec-env", choices=list(VEC_ENV_KINDS), help="override the preset's vec-env kind")
    p.add_argument("--ram", type=float, metavar="GB", help="host RAM in GiB (default: this machine's)")
    p.add_argument("--cores", type=int, metavar="N", help="CPU cores a tier is sized for (default: this machine's)")
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


def _refusal(args: Any) -> str | None:
    """What is wrong with the flags (one line), or None; the task's id is checked last (it imports its package)."""
    if args.memory is not None and args.memory <= 0:
        return f"--memory must be a positive number of GiB, got {args.memory:g}"
    if args.ram is not None and args.ram <= 0:
        return f"--ram must be a positive number of GiB, got {args.ram:g}"
    if args.cores is not None and args.cores < 1:
        return f"--cores must be >= 1, got {args.cores}"
    if args.rollouts < 1:
        return f"--rollouts must be >= 1, got {args.rollouts}"
    if args.compare and args.preset:
        return f"--compare shows every tier, --preset {args.preset} one: give one of them"
    if args.env is not None:
        from mission_gym.vec.factory import check_env_id

        try:
            check_env_id(args.env)
        except ConfigError as exc:
            return str(exc)
    return None


def _preset(preset_arg: str, args: Any, hw: Hardware) -> tuple[Composed, TrainConfig, mem.RunShape, str]:
    """The composition, configuration (``--device`` and ``--vec-env`` applied), shape and name of ``--preset`` for
    the task on this machine (a selector's pick here).

    :raises ValueError: for a preset or device that is not valid (a ConfigError's text names the file and key)
    """
    composed = _compose(preset_arg, args.presets_dir, args.env, hw)
    config = composed.config
    quiet_mujoco(config.env)  # a preset of a MuJoCo task of its own: its env is built for its spaces below
    name = Path(preset_arg).stem
    if is_selector(preset_arg, args.presets_dir):
        name = config.tier or name
        gpu = hw.gpu_name or (f"{hw.gpu_mem_gb:g} GiB" if hw.gpu_mem_gb else "none")
        print(f"{preset_arg} -> {name} (GPU: {gpu}, {_cores(hw.cores)}, {hw.ram_gb:.0f} GiB RAM)")
    device = _resolve_device(args.device, config.device)
    if device is None:
        raise ValueError(f"--device {args.device!r} is not valid; use auto, cpu, cuda or cuda:N")
    changes: dict[str, Any] = {"device": device, **({"vec_env": args.vec_env} if args.vec_env else {})}
    if args.measure and config.population.size > 1:  # one of them is measured: each trains as a run of its own
        changes["population"] = {"size": 1}
    config = apply_overrides(config, changes, source="memory_helper flags")
    return composed, config, shape_from_config(config, cores=hw.cores, measure=True), name


def _describe(composed: Composed, config: TrainConfig, shape: mem.RunShape, name: str, hw: Hardware) -> None:
    """``--preset NAME``: what it is for the task (its recipe, its size and why) and its breakdown."""
    print(f"preset {name} for {config.env}:")
    for note in composed.notes:
        print(f"  {note}")
    print(mem.estimate_memory(shape).breakdown())
    size = config.population.size
    if size > 1:
        whole = population_estimate(config, shape.device, hw.cores)
        at_once = members_at_once(config, hw.cores)
        how = (
            f"all {size} in one batched learner"
            if shape.on_cuda and population_learner(config, shape.device) == "batched"
            else f"{at_once} at a time as processes on {_cores(hw.cores)}"
        )
        gpu = f", {_mb(whole.gpu_bytes)} of GPU memory" if whole.gpu else ""
        print(f"{size} {_group(config)} ({how}): {_mb(whole.host_bytes)} of host RAM{gpu}")


@command_main
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    bad = _refusal(args)
    if bad:
        return fail(bad)
    try:
        names = preset_names(args.presets_dir)
    except OSError as exc:
        return fail(f"cannot read presets: {exc}")
    if not names:
        return fail(f"no presets (*.yaml) in {args.presets_dir or presets_dir()}")
    if args.env is not None:
        quiet_mujoco(args.env)
    here = detect_hardware()
    hw = Hardware(here.gpu_mem_gb, here.gpu_name, args.cores or here.cores, args.ram or here.ram_gb)
    try:
        return _run(args, hw)
    except (OSError, ValueError) as exc:  # a ConfigError names the file, the key or the task at fault
        return fail(str(exc).replace("\n", " "))


def _run(args: Any, hw: Hardware) -> int:
    if args.memory is not None:
        if args.preset is not None:
            explain_on(args.preset, args.presets_dir, args.env, args.memory, Hardware(args.memory, None, hw.cores, hw.ram_gb))
            print()
        best_for_memory(args.memory, hw, args.presets_dir, args.env)
        return 0
    preset_arg = args.preset or ("quick" if args.measure else None)
    if preset_arg is None:
        presets, recipe = compare_presets(args.presets_dir, args.env, hw)
        compare(presets, hw, args.presets_dir, recipe)
        return 0
    composed, config, shape, name = _preset(preset_arg, args, hw)
    if args.measure:
        if shape.on_cuda and not hw.gpu_mem_gb:
            return fail("--device cuda but no CUDA GPU is visible; use --device cpu")
        for note in composed.notes:
            print(note)
        measure(config, shape, name, args.rollouts)
        return 0
    _describe(composed, config, shape, name, hw)
    return 0


if __name__ == "__main__":
    sys.exit(main())
