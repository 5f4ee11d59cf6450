"""Command-line overrides: rl-baselines3-zoo's ``key:value`` form, and a note for each given setting that a later
phase or a population variant replaces, printed before training starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from mission_gym.plan.command import config_from_args
from mission_gym.plan.notes import shadowed_overrides
from mission_gym.plan.presets import load_preset
from mission_gym.scripts.train_ppo import build_parser
from mission_gym.settings.overrides import apply_overrides


def resolve(*argv: str) -> tuple[object, list[str]]:
    """The configuration and the notes about the given settings (those that say which recipe and size a tier
    chose are tested in test_recipes.py)."""
    config, notes = config_from_args(build_parser().parse_args(list(argv)))
    return config, [n for n in notes if not n.startswith(("recipe ", "size: "))]


def test_zoo_colon_form_sets_settings_and_ppo_arguments() -> None:
    config, notes = resolve(
        "--preset", "quick", "--hyperparams", "learning_rate:1e-4", "normalize_advantage:false", "n_epochs=3"
    )
    assert config.learning_rate == 1e-4 and config.n_epochs == 3  # type: ignore[attr-defined]
    assert config.hyperparams == {"normalize_advantage": False}  # type: ignore[attr-defined]
    assert notes == []


def test_override_that_a_phase_takes_over_is_noted() -> None:
    config, notes = resolve("--preset", "cpu", "--hyperparams", "learning_rate=3e-4", "ent_coef:0.01", "n_epochs=4")
    assert config.learning_rate == 3e-4 and config.phases[0].learning_rate == 3e-4  # type: ignore[attr-defined]
    assert notes == [
        "learning_rate=0.0003 applies until phases[0] at 3,000,000; phases set their own from there "
        "(phases[0].learning_rate=... changes it)",
        "ent_coef=0.01 applies until phases[0] at 3,000,000; phases set their own from there "
        "(phases[0].ent_coef=... changes it)",
    ]
    # the dotted form changes the phase itself: nothing to say
    config, notes = resolve("--preset", "cpu", "--hyperparams", "phases[1].learning_rate=1e-4")
    assert config.phases[1].learning_rate == 1e-4 and notes == []  # type: ignore[attr-defined]


def test_override_that_a_variant_replaces_is_noted() -> None:
    cpu = apply_overrides(
        load_preset("cpu"),
        {  # 8 members: each variant recipe is two members' (cpu trains 6)
            "population.size": 8,
            "population.variants[2].n_epochs": 3,
            "population.variants[3].env_kwargs": {"reward": {"win_bonus": 9}},
        },
    )
    given = {"n_epochs": 4, "env_kwargs": {"reward": {"win_bonus": 5}, "world": {"observation": {"defender_motion": True}}}}
    notes = shadowed_overrides(apply_overrides(cpu, given), given)
    assert notes == [
        "n_epochs=4 is replaced by population.variants[2]'s own in members 2, 6 "
        "(population.variants[2].n_epochs=... changes it)",
        "env_kwargs.reward.win_bonus=5 is replaced by population.variants[3]'s own in members 3, 7 "
        "(population.variants[3].env_kwargs.reward.win_bonus=... changes it)",
    ]
    # a curriculum step a variant does not re-define is the run's in every member
    assert shadowed_overrides(cpu, {"curriculum[0].value": 4}) == []
    chasers_step = {"curriculum": [{"setting": "engagement.defenders.mode_probs.patrol", "value": 0.9, "until": 1_000_000}]}
    four_cuts = [{"at": 2_000_000, "keep": 2}, {"at": 2_750_000, "keep": 1, "clones": 1}]
    # a member per variant (the recipe's restarts find their starts at cuts these cuts no longer make)
    four = apply_overrides(cpu, {"population.size": 4, "population.cuts": four_cuts, "restarts": None})
    lines = shadowed_overrides(apply_overrides(four, chasers_step), chasers_step)
    assert [line.split(" is replaced by ")[1].split(" (")[0] for line in lines] == [
        "population.variants[2]'s own in member 2",
        "population.variants[3]'s own in member 3",
    ]


def test_train_ppo_prints_the_note_before_training(tmp_path: Path) -> None:
    args = ["--preset", "quick", "--run-name", "n", "--no-progress", "--eval-freq", "0", "--save-freq", "0",
            "--hyperparams", "learning_rate:1e-3", "phases=[{start: 1024, learning_rate: 1e-4}]"]  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "mission_gym.scripts.train_ppo", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    note = "note: learning_rate=0.001 applies until phases[0] at 1,024; phases set their own from there"
    assert note in proc.stdout and proc.stdout.index(note) < proc.stdout.index("finished:")
    saved = (tmp_path / "runs" / "n" / "config.yaml").read_text()
    assert "learning_rate: 0.001" in saved and "start: 1024" in saved  # config.yaml shows what ran
