"""The launcher's job list: typed jobs from a YAML file or from command-line flags, one job per seed.

A jobs file::

    defaults:                    # optional; every job inherits these, a job's own keys win
      preset: quick
      cpus: 1                    # cores per job (local: affinity + thread caps; Ray: num_cpus)
      args: {timesteps: 20000}
    jobs:
      - name: baseline           # run names baseline-s0, baseline-s1
        seeds: [0, 1]
      - name: hopper
        env: Hopper-v5
        gpus: 0.25               # Ray: fractional num_gpus
        args:
          timesteps: 50000
          no-tensorboard: true
          hyperparams: {learning_rate: 3e-4, ent_coef: 0.01}

``args`` maps ``train_ppo`` flag names (``n-envs`` or ``n_envs``) to values: ``true`` for a switch,
a list for several values, a mapping for ``k=v`` flags such as ``--hyperparams``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, field_validator

from mission_gym.config.loader import suggest
from mission_gym.config.yaml_io import ConfigError, dump_yaml, read_yaml, validate

#: ``train_ppo`` flags the launcher sets itself: a job names them through its own keys.
RESERVED_FLAGS: dict[str, str] = {
    "run-name": "the job's `name` (run names are <name>-s<seed>)",
    "seed": "the job's `seeds` list",
    "runs-dir": "the launcher's --runs-dir",
    "preset": "the job's `preset` key",
    "env": "the job's `env` key",
}

JobName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=100)]
Scalar = StrictBool | StrictInt | StrictFloat | StrictStr
ArgValue = Scalar | list[Scalar] | dict[str, Any] | None


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class JobDefaults(_Model):
    """Keys every job may set; under ``defaults:`` they apply to all jobs."""

    preset: StrictStr | None = None
    env: StrictStr | None = None
    seeds: list[StrictInt] | None = None
    cpus: Annotated[StrictInt, Field(ge=1)] | None = None
    gpus: Annotated[float, Field(ge=0)] | None = None
    args: dict[str, ArgValue] = {}

    @field_validator("seeds")
    @classmethod
    def _distinct_seeds(cls, seeds: list[int] | None) -> list[int] | None:
        if seeds is not None:
            if not seeds:
                raise ValueError("must list at least one seed (or leave the key out)")
            if len(set(seeds)) != len(seeds):
                raise ValueError(f"seeds repeat: {seeds}")
        return seeds

    @field_validator("args")
    @classmethod
    def _no_reserved_flags(cls, args: dict[str, ArgValue]) -> dict[str, ArgValue]:
        for key in args:
            flag = _flag_name(key)
            if flag in RESERVED_FLAGS:
                raise ValueError(f"{key!r} is set by the launcher: use {RESERVED_FLAGS[flag]}")
        return args


class JobEntry(JobDefaults):
    """One entry of ``jobs:``; with ``seeds`` it expands to one job per seed."""

    name: JobName


class JobsFile(_Model):
    """A whole jobs YAML file."""

    defaults: JobDefaults = JobDefaults()
    jobs: Annotated[list[JobEntry], Field(min_length=1)]


@dataclass(frozen=True)
class Job:
    """One ``train_ppo`` run of the launch.

    :param name: the run name (``runs/<name>/``) and the job's label
    :param args: ``train_ppo`` arguments, without ``--run-name``, ``--runs-dir`` and ``--num-threads``
        (the backends add those)
    :param seed: the seed passed as ``--seed``, if any
    :param cpus: cores asked for (``None``: an even share of the machine)
    :param gpus: fraction of a GPU for Ray's ``num_gpus`` (``None``: the backend decides)
    :param group: the jobs-file entry it came from
    :param resume: continue the run ``name`` (``--resume``) instead of starting it
    """

    name: str
    args: tuple[str, ...] = ()
    seed: int | None = None
    cpus: int | None = None
    gpus: float | None = None
    group: str = ""
    resume: bool = False

    def flag(self, name: str) -> str | None:
        """The value of ``--name`` in :attr:`args` (the last one wins, as in argparse), or ``None``."""
        return flag_value(self.args, name)

    @property
    def preset(self) -> str | None:
        return self.flag("preset")

    @property
    def device(self) -> str | None:
        return self.flag("device")

    def train_args(self, runs_dir: str | Path, num_threads: int | None = None) -> list[str]:
        """The full argument list of ``train_ppo`` for this job."""
        run = ["--resume", self.name] if self.resume else ["--run-name", self.name]
        out = list(self.args) + run + ["--runs-dir", str(runs_dir)]
        if num_threads is not None and self.flag("num-threads") is None:
            out += ["--num-threads", str(num_threads)]
        if "--no-progress" not in out:
            out.append("--no-progress")  # a log file is no terminal: no progress bar redraws in it
        return out


def _flag_name(key: str) -> str:
    return key.lstrip("-").replace("_", "-")


def flag_value(args: Sequence[str], name: str) -> str | None:
    """The value given to ``--name`` (``--name v`` or ``--name=v``) in ``args``, the last one, or ``None``."""
    value = None
    opt = f"--{name}"
    for i, a in enumerate(args):
        if a == opt and i + 1 < len(args) and not args[i + 1].startswith("--"):
            value = args[i + 1]
        elif a.startswith(opt + "="):
            value = a[len(opt) + 1 :]
    return value


def _scalar_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    return dump_yaml(value).strip().replace("\n", " ")  # nested lists/mappings in flow style for the YAML parser


def args_to_argv(args: dict[str, ArgValue]) -> list[str]:
    """Turn a job's ``args`` mapping into ``train_ppo`` arguments.

    ``true`` is a bare switch and ``false``/``null`` leave the flag out; a list gives several values;
    a mapping gives ``k=v`` values (``--hyperparams learning_rate=0.0003``).
    """
    argv: list[str] = []
    for key, value in args.items():
        opt = f"--{_flag_name(key)}"
        if value is None or value is False:
            continue
        if value is True:
            argv.append(opt)
        elif isinstance(value, list):
            argv += [opt, *(_scalar_text(v) for v in value)]
        elif isinstance(value, dict):
            argv += [opt, *(f"{k}={_scalar_text(v)}" for k, v in value.items())]
        else:
            argv += [opt, _scalar_text(value)]
    return argv


def check_extra_args(extra: Sequence[str], source: str = "arguments after --") -> None:
    """Refuse launcher-owned flags among raw ``train_ppo`` arguments (``--preset``/``--env`` may override a job's)."""
    for a in extra:
        if a.startswith("--"):
            flag = _flag_name(a.split("=", 1)[0])
            if flag in RESERVED_FLAGS and flag not in ("preset", "env"):
                raise ConfigError(f"{source}: {a} is set by the launcher: use {RESERVED_FLAGS[flag]}")


def check_flag_names(jobs: Sequence[Job], known: Sequence[str], source: str) -> None:
    """Refuse ``train_ppo`` flags that do not exist, suggesting the closest one.

    :param known: every option string of ``train_ppo`` (``--timesteps`` ...)
    """
    names = [k[2:] for k in known if k.startswith("--")]
    for job in jobs:
        for a in job.args:
            if a.startswith("--"):
                flag = a[2:].split("=", 1)[0]
                if flag not in names:
                    raise ConfigError(f"{source}: job {job.name!r}: unknown train_ppo flag --{flag}{suggest(flag, names)}")


def _expand(entry: JobEntry, defaults: JobDefaults, extra: Sequence[str]) -> list[Job]:
    preset = entry.preset if entry.preset is not None else defaults.preset
    env = entry.env if entry.env is not None else defaults.env
    seeds = entry.seeds if entry.seeds is not None else defaults.seeds
    cpus = entry.cpus if entry.cpus is not None else defaults.cpus
    gpus = entry.gpus if entry.gpus is not None else defaults.gpus
    base: list[str] = []
    if preset is not None:
        base += ["--preset", preset]
    if env is not None:
        base += ["--env", env]
    base += args_to_argv({**defaults.args, **entry.args}) + list(extra)
    if seeds is None:
        return [Job(entry.name, tuple(base), None, cpus, gpus, entry.name)]
    return [Job(f"{entry.name}-s{s}", (*base, "--seed", str(s)), s, cpus, gpus, entry.name) for s in seeds]


def _check_unique(jobs: Sequence[Job], source: str) -> None:
    seen: set[str] = set()
    for job in jobs:
        if job.name in seen:
            raise ConfigError(f"{source}: two jobs expand to the run name {job.name!r}; rename one")
        seen.add(job.name)


def load_jobs(path: str | Path, extra_args: Sequence[str] = ()) -> list[Job]:
    """Read and expand a jobs YAML file.

    :param path: the YAML file
    :param extra_args: raw ``train_ppo`` arguments appended to every job (they win over the file's)
    :raises ConfigError: naming the file and the key at fault
    """
    source = str(path)
    check_extra_args(extra_args)
    spec = validate(JobsFile, read_yaml(path), source)
    jobs = [job for entry in spec.jobs for job in _expand(entry, spec.defaults, extra_args)]
    _check_unique(jobs, source)
    return jobs


def jobs_from_flags(
    n_jobs: int | None,
    preset: str | None,
    seeds: Sequence[int] | None = None,
    name: str | None = None,
    extra_args: Sequence[str] = (),
    cpus: int | None = None,
    gpus: float | None = None,
    env: str | None = None,
) -> list[Job]:
    """``--jobs N --preset X --env ID --seeds ...``: N runs of one configuration, one per seed.

    Without seeds the seeds are ``0..N-1``; without ``--jobs`` there is one job per seed. Each job is passed
    ``--env`` and sizes itself: a tier (``auto``, train_ppo's default) is composed for the task on the cores the job
    is given.

    :param name: the run-name stem (default: the task's and the preset's names and the time, so launches never
        collide)
    :param env: the Gymnasium id every job trains (None: the preset's own task)
    :raises ConfigError: on inconsistent flags
    """
    source = "launch flags"
    check_extra_args(extra_args)
    if seeds is not None and len(set(seeds)) != len(seeds):
        raise ConfigError(f"{source}: --seeds repeat: {list(seeds)}")
    if n_jobs is None:
        if not seeds:
            raise ConfigError(f"{source}: give a jobs YAML file, or --jobs N and/or --seeds ...")
        n_jobs = len(seeds)
    if n_jobs < 1:
        raise ConfigError(f"{source}: --jobs must be >= 1 (got {n_jobs})")
    if seeds is None:
        seeds = list(range(n_jobs))
    elif len(seeds) != n_jobs:
        raise ConfigError(f"{source}: --jobs {n_jobs} but {len(seeds)} seeds given ({' '.join(map(str, seeds))})")
    if name is None:
        import time

        stem = Path(preset).stem if preset else ("auto" if env else "job")
        if env:  # a run name takes letters, digits, '.', '_' and '-': "my_pkg:Task-v0" -> "Task-v0"
            stem = f"{re.sub(r'[^A-Za-z0-9._-]', '-', env.rpartition(':')[2]).strip('-.') or 'env'}-{stem}"
        name = f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    fields = {"name": name, "preset": preset, "env": env, "seeds": list(seeds), "cpus": cpus, "gpus": gpus}
    entry = validate(JobEntry, fields, source)
    jobs = _expand(entry, JobDefaults(), extra_args)
    _check_unique(jobs, source)
    return jobs


def describe(job: Job, runs_dir: str | Path) -> str:
    """The shell command of a job, for ``--dry-run`` and logs."""
    return shlex.join(["train_ppo", *job.train_args(runs_dir)])
