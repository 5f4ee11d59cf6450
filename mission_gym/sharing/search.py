"""Hyperparameter search on Optuna: each trial is a ``train_ppo`` run of a sampled configuration, scored by its final
evaluation, and pruned at its in-training evaluations when it falls behind.

The space is a mapping of training settings (any ``--hyperparams`` key) to how to sample them
(``search_space.yaml`` beside this module is the default; a user file replaces it). Trials of one study share an
Optuna storage (a SQLite URL), so several processes, or the launcher's jobs, can work on the same study. The best
trial's configuration is written as a preset YAML that ``train_ppo --preset FILE`` trains.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, model_validator
from stable_baselines3.common.callbacks import BaseCallback

from mission_gym.config.loader import suggest
from mission_gym.config.yaml_io import ConfigError, dump_yaml, read_yaml, validate
from mission_gym.optional import require
from mission_gym.rundir.directory import check_run_name
from mission_gym.rundir.evaluations import EvalRecord
from mission_gym.settings.overrides import apply_overrides, split_hyperparams
from mission_gym.settings.schema import TrainConfig
from mission_gym.training.callbacks import StopTraining

DEFAULT_SPACE = Path(__file__).with_name("search_space.yaml")
SAMPLERS = ("tpe", "random", "cmaes")
PRUNERS = ("median", "halving", "none")


class ParamSpec(BaseModel):
    """How one setting is sampled: a float or int range (``log`` for a log scale, ``step`` for a grid) or a
    categorical choice."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["float", "int", "categorical"]
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    choices: list[Any] | None = None

    @model_validator(mode="after")
    def _check(self) -> ParamSpec:
        if self.type == "categorical":
            if not self.choices:
                raise ValueError("a categorical parameter needs a non-empty 'choices' list")
            bad = [c for c in self.choices if c is not None and not isinstance(c, bool | int | float | str)]
            if bad:
                raise ValueError(
                    f"choices must be numbers, strings, booleans or null (write a list as '64,64'), got {bad[0]!r}"
                )
        elif self.low is None or self.high is None or not self.low < self.high:
            raise ValueError(f"a {self.type} parameter needs low < high, got low {self.low} high {self.high}")
        elif self.log and self.low <= 0:
            raise ValueError(f"a log-scale parameter needs low > 0, got {self.low}")
        return self


def load_space(path: str | Path | None = None) -> dict[str, ParamSpec]:
    """The search space of a YAML file (default: :data:`DEFAULT_SPACE`).

    :raises ConfigError: for a file that is not a mapping of known settings to valid specifications
    """
    path = Path(path) if path is not None else DEFAULT_SPACE
    data = read_yaml(path)
    if not isinstance(data, Mapping) or not data:
        raise ConfigError(f"{path}: expected a mapping of settings to sampling specifications")
    split_hyperparams({k: None for k in data}, f"search space {path}")  # every key a setting or a PPO argument
    return {str(k): validate(ParamSpec, v, f"{path}: {k}") for k, v in data.items()}


def sample(trial: Any, space: Mapping[str, ParamSpec]) -> dict[str, Any]:
    """One value per setting of ``space``, drawn by an Optuna trial."""
    out: dict[str, Any] = {}
    for name, spec in space.items():
        if spec.type == "categorical":
            out[name] = trial.suggest_categorical(name, spec.choices)
        elif spec.type == "int":
            assert spec.low is not None and spec.high is not None
            out[name] = trial.suggest_int(name, int(spec.low), int(spec.high), step=int(spec.step or 1), log=spec.log)
        else:
            assert spec.low is not None and spec.high is not None
            out[name] = trial.suggest_float(name, spec.low, spec.high, step=spec.step, log=spec.log)
    return out


def make_sampler(name: str, seed: int | None, n_startup_trials: int) -> Any:
    """Optuna's sampler for ``tpe``, ``random`` or ``cmaes`` (rl-baselines3-zoo's names)."""
    optuna = require("optuna", "mission-search")
    if name == "tpe":
        return optuna.samplers.TPESampler(n_startup_trials=n_startup_trials, seed=seed, multivariate=True)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "cmaes":
        require("cmaes", "--sampler cmaes")
        return optuna.samplers.CmaEsSampler(seed=seed, n_startup_trials=n_startup_trials)
    raise ConfigError(f"--sampler {name!r}{suggest(name, list(SAMPLERS))}; valid: {', '.join(SAMPLERS)}")


def make_pruner(name: str, n_startup_trials: int, n_evaluations: int) -> Any:
    """Optuna's pruner for ``median``, ``halving`` or ``none`` (as the zoo sets them up)."""
    optuna = require("optuna", "mission-search")
    if name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=n_startup_trials, n_warmup_steps=n_evaluations // 3)
    if name == "halving":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=4, min_early_stopping_rate=0)
    if name == "none":
        return optuna.pruners.NopPruner()
    raise ConfigError(f"--pruner {name!r}{suggest(name, list(PRUNERS))}; valid: {', '.join(PRUNERS)}")


def score(record: EvalRecord) -> float:
    """What a trial maximises: the evaluation's win rate on Mission Gym, its mean return on other envs."""
    return float(record.win_rate) if record.win_rate is not None else float(record.mean_return)


class TrialPruned(StopTraining):
    """A trial fell behind at an evaluation: its training stops there (the trainer's clean early stop)."""


class PruneCallback(BaseCallback):
    """The ``callback_after_eval`` of a trial: reports each in-training evaluation's :func:`score` to Optuna (step =
    the evaluation's index, as the zoo does) and stops the trial when the pruner says so.

    :param trial: the Optuna trial
    """

    def __init__(self, trial: Any) -> None:
        super().__init__()
        self.trial = trial
        self.evaluations = 0
        self.pruned = False

    def _on_step(self) -> bool:
        record: EvalRecord = self.parent.last  # type: ignore[union-attr]
        self.evaluations += 1
        self.trial.report(score(record), self.evaluations)
        if self.trial.should_prune():
            self.pruned = True
            raise TrialPruned(f"trial {self.trial.number} pruned at evaluation {self.evaluations} (step {record.timesteps:,})")
        return True


@dataclass
class Search:
    """A study: the base configuration, the space, where trials run and how Optuna samples and prunes.

    :param base: the configuration every trial starts from (preset and fixed flags)
    :param space: what is sampled (:func:`load_space`)
    :param study_name: the study's name (its trials' runs live in ``runs_dir/study_name/``)
    :param storage: an Optuna storage URL (``sqlite:///study.db``) shared by several processes, or None (in memory)
    :param runs_dir: where the study's directory is made
    :param sampler: ``tpe``, ``random`` or ``cmaes``
    :param pruner: ``median``, ``halving`` or ``none``
    :param n_startup_trials: trials before the sampler and pruner act on what they saw
    :param seed: the sampler's seed
    """

    base: TrainConfig
    space: dict[str, ParamSpec]
    study_name: str
    storage: str | None = None
    runs_dir: Path = Path("runs")
    sampler: str = "tpe"
    pruner: str = "median"
    n_startup_trials: int = 5
    seed: int | None = None

    def __post_init__(self) -> None:
        check_run_name(self.study_name)
        if self.base.population.size > 1:
            raise ConfigError(
                "mission-search tunes single runs; the preset's population.size is above 1 (set population.size=1)"
            )
        evaluations = self.base.timesteps // self.base.eval_freq if self.base.eval_freq else 0
        optuna = require("optuna", "mission-search")
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        for attempt in range(5):
            try:
                self.study = optuna.create_study(
                    study_name=self.study_name,
                    storage=self.storage,
                    sampler=make_sampler(self.sampler, self.seed, self.n_startup_trials),
                    pruner=make_pruner(self.pruner, self.n_startup_trials, evaluations),
                    direction="maximize",
                    load_if_exists=True,
                )
                break
            except ConfigError:
                raise
            except Exception:
                # processes started together on a new SQLite file race to create its tables and the study: the
                # losers see an integrity error once the winner has, and find both made when they try again
                if self.storage is None or attempt == 4:
                    raise
                time.sleep(0.5 + random.random())

    @property
    def directory(self) -> Path:
        return Path(self.runs_dir) / self.study_name

    def trial_config(self, params: Mapping[str, Any]) -> TrainConfig:
        """The configuration of a trial's sampled settings."""
        settings, extra = split_hyperparams(params, "search space")
        overrides: dict[str, Any] = dict(settings)
        if extra:
            overrides["hyperparams"] = {**self.base.hyperparams, **extra}
        return apply_overrides(self.base, overrides, source="search space")

    def objective(self, trial: Any) -> float:
        """Train one trial's configuration; its final evaluation's :func:`score` (Optuna's ``TrialPruned`` when it
        was pruned)."""
        from mission_gym.training.trainer import Trainer

        optuna = require("optuna", "mission-search")
        params = sample(trial, self.space)
        config = self.trial_config(params)
        trainer = Trainer.create(config, runs_dir=self.directory, run_name=f"trial_{trial.number:04d}", progress=False)
        trial.set_user_attr("run_dir", str(trainer.run.path))
        prune = PruneCallback(trial)
        result = trainer.train(callback_after_eval=prune)
        if prune.pruned:
            print(f"trial {trial.number}: pruned after {result.timesteps:,} steps  {params}", flush=True)
            raise optuna.TrialPruned(result.message)
        if result.status != "finished" or result.final_eval is None:
            raise RuntimeError(f"trial {trial.number} {result.status}: {result.message}")
        value = score(result.final_eval)
        if not math.isfinite(value):
            raise RuntimeError(f"trial {trial.number}: its evaluation scored {value}")
        print(f"trial {trial.number}: {value:.4g}  {params}", flush=True)
        return value

    def optimize(self, n_trials: int) -> None:
        """Run ``n_trials`` more trials in this process (a trial whose sampled settings are invalid fails alone)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self.study.optimize(self.objective, n_trials=n_trials, catch=(ConfigError,), gc_after_trial=True)

    def best_config(self) -> TrainConfig:
        """The configuration of the best trial so far.

        :raises ConfigError: when no trial has finished
        """
        finished = [t for t in self.study.trials if t.value is not None and t.state.name == "COMPLETE"]
        if not finished:
            raise ConfigError(f"study {self.study_name!r} has no finished trial yet (all pruned or failed)")
        best = self.study.best_trial
        config = self.trial_config(best.params)
        description = (
            f"best of study {self.study_name!r}: trial {best.number}, score {best.value:.4g} ({self.base.preset} base)"
        )
        return config.model_copy(update={"description": description})

    def write_best(self, path: str | Path) -> Path:
        """Write the best configuration as a preset YAML (``train_ppo --preset PATH`` trains it)."""
        config = self.best_config()
        data = config.model_dump(exclude={"preset"})
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        header = f"# {config.description}\n# searched: {', '.join(self.space)}\n"
        path.write_text(header + dump_yaml(data))
        return path
