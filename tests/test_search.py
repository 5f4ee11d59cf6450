"""mission-search: Optuna trials that are train_ppo runs, a study shared through SQLite by two processes, pruning at
the in-training evaluations that stops a trial cleanly, and the best configuration as a preset train_ppo trains."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import warm_cli

optuna = pytest.importorskip("optuna", reason="the search needs Optuna (pip install 'mission_gym[search]')")

from mission_gym.config import ConfigError, read_yaml  # noqa: E402
from mission_gym.plan.presets import load_preset  # noqa: E402
from mission_gym.scripts import search as search_cli  # noqa: E402
from mission_gym.settings.overrides import apply_overrides  # noqa: E402
from mission_gym.sharing.search import DEFAULT_SPACE, Search, load_space  # noqa: E402

SEARCH = [sys.executable, "-m", "mission_gym.scripts.search"]
CARTPOLE = [
    "--preset", "quick", "--env", "CartPole-v1", "--vec-env", "dummy", "--n-envs", "2", "--timesteps", "256",
    "--n-evaluations", "2", "--eval-episodes", "2", "--save-freq", "0", "--no-progress",
]  # fmt: skip
SMALL_SPACE = """
learning_rate: {type: float, low: 1.0e-4, high: 1.0e-2, log: true}
n_epochs: {type: int, low: 1, high: 3}
network_arch: {type: categorical, choices: ["16,16", "32"]}
"""


def test_two_processes_share_one_study_and_the_best_trains_as_a_preset(tmp_path: Path) -> None:
    (tmp_path / "space.yaml").write_text(SMALL_SPACE)
    common = [*CARTPOLE, "--space", "space.yaml", "--storage", f"sqlite:///{tmp_path / 'study.db'}", "--study-name", "cp"]
    procs = [
        subprocess.Popen(
            [*SEARCH, *common, "--n-trials", "2", "--sampler", sampler, "--n-startup-trials", "1"],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for sampler in ("random", "tpe")
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        assert "best configuration: runs/cp/best.yaml" in out
    study = optuna.load_study(study_name="cp", storage=f"sqlite:///{tmp_path / 'study.db'}")
    assert sorted(t.number for t in study.trials) == [0, 1, 2, 3]
    assert sorted(p.name for p in (tmp_path / "runs" / "cp").glob("trial_*")) == [f"trial_000{i}" for i in range(4)]
    for trial in study.trials:  # each trial is an ordinary run, its in-training evaluations reported
        run = Path(trial.user_attrs["run_dir"])
        assert json.loads((tmp_path / run / "metadata.json").read_text())["status"] in ("finished", "stopped")
        assert set(trial.params) == {"learning_rate", "n_epochs", "network_arch"}
    best = read_yaml(tmp_path / "runs" / "cp" / "best.yaml")
    assert best["env"] == "CartPole-v1" and best["network_arch"] in ([16, 16], [32])
    assert best["learning_rate"] == pytest.approx(study.best_trial.params["learning_rate"])
    train = [sys.executable, "-m", "mission_gym.scripts.train_ppo", "--preset", "runs/cp/best.yaml", "--run-name", "b",
             "--timesteps", "128", "--eval-freq", "0", "--no-progress"]  # fmt: skip
    proc = warm_cli.run(train, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert read_yaml(tmp_path / "runs" / "b" / "config.yaml")["n_epochs"] == best["n_epochs"]


class AlwaysPrune(optuna.pruners.BasePruner):
    def prune(self, study: object, trial: object) -> bool:
        return True


def test_a_pruned_trial_stops_cleanly_at_its_first_evaluation(tmp_path: Path) -> None:
    base = apply_overrides(
        load_preset("quick"),
        {"env": "CartPole-v1", "vec_env": "dummy", "n_envs": 2, "timesteps": 512, "eval_freq": 128, "eval_episodes": 2},
    )
    search = Search(base=base, space=load_space(), study_name="p", runs_dir=tmp_path, pruner="none", seed=0)
    search.study.pruner = AlwaysPrune()
    search.optimize(1)
    (trial,) = search.study.trials
    assert trial.state == optuna.trial.TrialState.PRUNED
    assert list(trial.intermediate_values) == [1]
    run = tmp_path / "p" / "trial_0000"
    meta = json.loads((run / "metadata.json").read_text())
    assert meta["status"] == "stopped" and meta["timesteps"] < 512
    assert "pruned at evaluation 1" in meta["result"]["message"]
    assert not (run / "final_model.zip").exists() and list((run / "checkpoints").glob("ckpt_*.zip"))
    with pytest.raises(ConfigError, match="no finished trial"):
        search.best_config()


def test_default_space_and_bad_spaces(tmp_path: Path) -> None:
    space = load_space()
    assert {"learning_rate", "n_epochs", "ent_coef", "gamma", "clip_range", "network_arch"} <= set(space)
    assert DEFAULT_SPACE.is_file()
    bad = tmp_path / "bad.yaml"
    bad.write_text("learning_rat: {type: float, low: 1.0e-4, high: 1.0e-2}\n")
    with pytest.raises(ConfigError, match="unknown hyperparameter 'learning_rat'.*learning_rate"):
        load_space(bad)
    bad.write_text("gamma: {type: float, low: 0.99, high: 0.9}\n")
    with pytest.raises(ConfigError, match="low < high"):
        load_space(bad)


def test_cli_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert search_cli.main([*CARTPOLE, "--resume", "x"]) == 2
    assert "--resume does not apply to a search" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        search_cli.main([*CARTPOLE, "--sampler", "tpee"])
    assert exc.value.code == 2 and "did you mean 'tpe'" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "optuna", None)
    assert search_cli.main(CARTPOLE) == 2
    err = capsys.readouterr().err
    assert err.strip() == "error: mission-search needs Optuna, which is not installed: pip install 'mission_gym[search]'"


@pytest.mark.parametrize("sampler", ["tpe", "random", "cmaes"])
@pytest.mark.parametrize("pruner", ["median", "halving", "none"])
def test_every_sampler_and_pruner_builds(sampler: str, pruner: str) -> None:
    from mission_gym.sharing.search import make_pruner, make_sampler

    assert isinstance(make_sampler(sampler, seed=0, n_startup_trials=2), optuna.samplers.BaseSampler)
    assert isinstance(make_pruner(pruner, n_startup_trials=2, n_evaluations=4), optuna.pruners.BasePruner)
