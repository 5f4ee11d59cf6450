"""Shared agents load without running their code (issue 42): a model's safe files (weights as safetensors, a JSON
agent file) are all that ``evaluate``, ``enjoy`` and ``record_video`` read; a model with pickles only is refused in
one line naming ``--trust-pickle`` and loads as before with it; ``mission-hub pull`` checks every file it brings.

The crafted pickles here open a marker file when unpickled: the marker's absence is the proof that nothing was."""

from __future__ import annotations

import base64
import json
import os
import pickle
import shutil
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import warm_cli

from mission_gym.config import read_yaml
from mission_gym.rundir.directory import agent_file_path, weights_path
from mission_gym.scripts import enjoy, evaluate, hub, record_video
from mission_gym.sharing import hub as hub_lib

MODEL = "ppo-MissionGym-v0"


class Touch:
    """Unpickles as ``open(path, "w")``: a pickle that runs code, as a hostile one would."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (self.path, "w"))


def craft_zip(src: Path, dst: Path, marker: Path) -> None:
    """A copy of an SB3 model whose ``data`` holds one more cloudpickled entry: ``Touch(marker)``."""
    with zipfile.ZipFile(src) as archive:
        entries = {name: archive.read(name) for name in archive.namelist()}
    data = json.loads(entries["data"])
    data["extra"] = {":type:": "<class 'object'>", ":serialized:": base64.b64encode(pickle.dumps(Touch(marker))).decode()}
    entries["data"] = json.dumps(data).encode()
    with zipfile.ZipFile(dst, "w") as archive:
        for name, content in entries.items():
            archive.writestr(name, content)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with ``runs/q``, trained with ``--preset quick``."""
    root = tmp_path_factory.mktemp("safe")
    cmd = [sys.executable, "-m", "mission_gym.scripts.train_ppo", "--preset", "quick", "--run-name", "q", "--no-progress"]
    proc = warm_cli.run(cmd, cwd=root, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return root


@pytest.fixture
def here(root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(root)
    return root


def games(run: str, capsys: pytest.CaptureFixture[str], *flags: str) -> dict[str, Any]:
    """``evaluate``'s JSON result of a run on 6 held-out seeds, without the run's name."""
    capsys.readouterr()
    assert evaluate.main([run, "--episodes", "6", "--json", *flags]) == 0
    result = json.loads(capsys.readouterr().out)
    result.pop("policy")
    return result


def refused(capsys: pytest.CaptureFixture[str]) -> str:
    """The one error line a refused command printed."""
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    return err.strip()


def legacy_copy(src: Path, dst: Path) -> Path:
    """A run as it was before the safe files: the same run without them."""
    shutil.copytree(src, dst)
    for path in [*dst.rglob("*.safetensors"), *dst.rglob("*.agent.json")]:
        path.unlink()
    return dst


def test_crafted_pickles_are_refused_and_never_run(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    evil = here / "evil"
    evil.mkdir()
    shutil.copyfile(here / "runs" / "q" / "config.yaml", evil / "mission_gym.yaml")
    craft_zip(here / "runs" / "q" / "best_model.zip", evil / f"{MODEL}.zip", here / "zip_ran")
    (evil / "vec_normalize.pkl").write_bytes(pickle.dumps(Touch(here / "pkl_ran")))
    assert hub.main(["pull", "--local-dir", "evil", "--run-name", "evil"]) == 0
    assert "pickles only" in capsys.readouterr().out and (here / "runs" / "evil" / "best_vecnormalize.pkl").is_file()
    assert evaluate.main(["evil", "--episodes", "2"]) == 2
    line = refused(capsys)
    assert line.startswith("error: ") and "has no safe copy" in line and "--trust-pickle" in line
    assert enjoy.main(["evil"]) == 2 and "--trust-pickle" in refused(capsys)
    assert record_video.main(["evil", "--out", str(here / "evil.gif")]) == 2 and "--trust-pickle" in refused(capsys)
    assert not (here / "zip_ran").exists() and not (here / "pkl_ran").exists() and not (here / "evil.gif").exists()
    # the flag loads as before: both pickles run (the statistics are then no VecNormalize: one line, exit 2)
    assert evaluate.main(["evil", "--episodes", "2", "--trust-pickle"]) == 2
    assert "expected VecNormalize statistics" in refused(capsys)
    assert (here / "zip_ran").exists() and (here / "pkl_ran").exists()


def test_a_pushed_agent_pulled_back_plays_the_same_games_and_reads_no_pickle(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert hub.main(["push", "q", "--local-dir", "shared/q"]) == 0
    folder = here / "shared" / "q"
    assert {f"{MODEL}.safetensors", f"{MODEL}.agent.json"} <= {p.name for p in folder.iterdir()}
    # whatever the pickles beside them hold, the safe files are what loads
    craft_zip(folder / f"{MODEL}.zip", folder / f"{MODEL}.zip", here / "shared_zip_ran")
    (folder / "vec_normalize.pkl").write_bytes(pickle.dumps(Touch(here / "shared_pkl_ran")))
    capsys.readouterr()
    assert hub.main(["pull", "--local-dir", "shared/q", "--run-name", "q_back"]) == 0
    assert "safe files" in capsys.readouterr().out
    back = games("q_back", capsys)
    assert back == games("q", capsys)
    assert back == games(str(legacy_copy(here / "runs" / "q", here / "q_legacy")), capsys, "--trust-pickle")
    assert record_video.main(["q_back", "--out", str(here / "q.gif"), "--max-steps", "3", "--width", "64"]) == 0
    assert not (here / "shared_zip_ran").exists() and not (here / "shared_pkl_ran").exists()


def test_a_legacy_run_needs_the_flag_and_push_converts_it(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = legacy_copy(here / "runs" / "q", here / "runs" / "old")
    assert evaluate.main(["old", "--episodes", "2"]) == 2
    assert "--trust-pickle" in refused(capsys)
    expected = games("old", capsys, "--trust-pickle")
    # push converts it to the safe files, by loading its pickles: only with the flag, and writing nothing without
    assert hub.main(["push", "old", "--local-dir", "shared/old"]) == 2
    assert "--trust-pickle to convert it" in refused(capsys) and not (here / "shared" / "old").exists()
    assert hub.main(["push", "old", "--local-dir", "shared/old", "--trust-pickle"]) == 0
    assert hub.main(["pull", "--local-dir", "shared/old", "--run-name", "old_back"]) == 0
    assert games("old_back", capsys) == expected
    assert not weights_path(old / "best_model.zip").exists()  # the run itself is left as it was


def test_plain_sb3_still_loads_best_model(root: Path) -> None:
    import gymnasium as gym
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    import mission_gym  # noqa: F401  (registers the env)

    run = root / "runs" / "q"
    model = PPO.load(run / "best_model.zip")
    env = VecNormalize.load(str(run / "best_vecnormalize.pkl"), DummyVecEnv([lambda: gym.make("MissionGym-v0")]))
    card = json.loads(agent_file_path(run / "best_model.zip").read_text())
    assert card["format"] == "mission_gym.agent" and card["normalize"]["norm_obs"] is True
    np.testing.assert_array_equal(card["normalize"]["obs_rms"]["mean"], env.obs_rms.mean)  # the same statistics
    env.training = False
    assert model.predict(env.reset(), deterministic=True)[0].shape == (1, 4)


def write_folder(here: Path, name: str) -> Path:
    folder = here / name
    folder.mkdir()
    (folder / "mission_gym.yaml").write_text((here / "runs" / "q" / "config.yaml").read_text())
    shutil.copyfile(here / "runs" / "q" / "best_model.zip", folder / f"{MODEL}.zip")
    return folder


def _link_out(folder: Path) -> str:
    (folder / f"{MODEL}.zip").unlink()
    os.symlink(folder.parent / "runs" / "q" / "best_model.zip", folder / f"{MODEL}.zip")
    return "out of the folder"


def _stats_link_out(folder: Path) -> str:
    os.symlink("/etc/hostname", folder / "vec_normalize.pkl")
    return "out of the folder"


def _env_climbs_out(folder: Path) -> str:
    (folder / "mission_gym.yaml").write_text("env: ../../outside\n")
    return "not a plain file name"


def _python_tag(folder: Path) -> str:
    (folder / "mission_gym.yaml").write_text("env: !!python/object/apply:os.system ['touch yaml_ran']\n")
    return "not valid YAML"


def _not_a_mapping(folder: Path) -> str:
    (folder / "mission_gym.yaml").write_text("- MissionGym-v0\n")
    return "expected a mapping"


def _bad_agent_file(folder: Path) -> str:
    (folder / f"{MODEL}.safetensors").write_bytes(b"")
    (folder / f"{MODEL}.agent.json").write_text(json.dumps({"format": "mission_gym.agent", "version": 1}))
    return "timesteps: Field required"


@pytest.mark.parametrize("trick", [_link_out, _stats_link_out, _env_climbs_out, _python_tag, _not_a_mapping, _bad_agent_file])
def test_pull_refuses_what_it_should_not_bring(trick: Any, here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = write_folder(here, f"trick{trick.__name__}")
    message = trick(folder)
    assert hub.main(["pull", "--local-dir", str(folder), "--run-name", folder.name]) == 2
    assert message in refused(capsys)
    assert not (here / "runs" / folder.name).exists() and not (here / "yaml_ran").exists()
    assert not list((here / "runs").glob(".*tmp*"))  # nothing half-written either


def test_pull_bounds_sizes_and_run_names(
    here: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = write_folder(here, "sized")
    assert hub.main(["pull", "--local-dir", "sized", "--run-name", "../escaped"]) == 2
    assert "--run-name '../escaped': use letters" in refused(capsys)
    monkeypatch.setattr(hub_lib, "MAX_MODEL_BYTES", 1000)
    assert hub.main(["pull", "--local-dir", "sized", "--run-name", "sized"]) == 2
    assert "more than the 1,000" in refused(capsys)
    assert not (here / "runs" / "sized").exists() and not (here / "escaped").exists()
    assert read_yaml(folder / "mission_gym.yaml")["env"] == "MissionGym-v0"
