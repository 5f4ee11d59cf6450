"""Tracking and sharing: ``train_ppo --track`` sends a run to Weights & Biases (offline here: WANDB_MODE=offline),
and ``mission-hub`` pushes a run in the Hub layout of rl-baselines3-zoo and pulls one back as a run directory (a local
folder stands for the Hub, which is not reachable from the tests; the upload and download calls are checked)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import warm_cli
from stable_baselines3 import PPO

from mission_gym.config import read_yaml
from mission_gym.scripts import evaluate, hub, train_ppo
from mission_gym.sharing import hub as hub_lib

TRAIN = [sys.executable, "-m", "mission_gym.scripts.train_ppo"]


@pytest.fixture(scope="module")
def tracked_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("wandb", reason="--track needs wandb (pip install 'mission_gym[track]')")
    root = tmp_path_factory.mktemp("track")
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(root / "wandb"), "WANDB_SILENT": "true"}
    args = ["--preset", "quick", "--run-name", "t", "--no-progress", "--track", "--wandb-project", "mg-tests"]
    proc = warm_cli.run([*TRAIN, *args], root, timeout=180, env=env, env_read_as_it_runs=True)  # wandb reads them
    assert proc.returncode == 0, proc.stderr
    return root


def test_track_sends_config_and_tensorboard_to_an_offline_wandb_run(tracked_run: Path) -> None:
    (offline,) = (tracked_run / "wandb" / "wandb").glob("offline-run-*")
    meta = json.loads((tracked_run / "runs" / "t" / "metadata.json").read_text())
    assert meta["wandb"]["project"] == "mg-tests" and offline.name.endswith(meta["wandb"]["id"])
    assert list(offline.glob("files/**/events.out.tfevents.*")), "the TensorBoard events are synced"
    (log,) = offline.glob("run-*.wandb")
    data = log.read_bytes()
    for key in (b"learning_rate", b"n_envs", b"eval/mean_reward", b"rollout/ep_rew_mean"):
        assert key in data, key  # the config and the synced curves


def test_track_errors_are_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    assert train_ppo.main(["--preset", "quick", "--wandb-project", "x"]) == 2
    assert capsys.readouterr().err.strip() == "error: --wandb-project and --wandb-entity go with --track"
    assert train_ppo.main(["--preset", "cpu", "--track"]) == 2  # a population's members train in other processes
    assert "--track sends a single run" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "wandb", None)
    assert train_ppo.main(["--preset", "quick", "--track"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "error: --track needs wandb, which is not installed: pip install 'mission_gym[track]'"
    assert not (tmp_path / "runs").exists()


def test_push_to_a_local_folder_and_pull_back_as_a_run(tracked_run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tracked_run)
    assert hub.main(["push", "t", "--local-dir", "shared/agent"]) == 0
    folder = tracked_run / "shared" / "agent"
    names = {p.name for p in folder.iterdir()}
    assert names == {"ppo-MissionGym-v0.zip", "vec_normalize.pkl", "config.yml", "env_kwargs.yml", "mission_gym.yaml",
                     "results.json", "README.md", "ppo-MissionGym-v0.safetensors", "ppo-MissionGym-v0.agent.json"}  # fmt: skip
    card = (folder / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: stable-baselines3\n") and "model-index:" in card and "mean_reward" in card
    zoo = read_yaml(folder / "config.yml")
    assert zoo["n_timesteps"] == 2048 and zoo["policy"] == "MlpPolicy" and zoo["normalize"] is True
    assert json.loads((folder / "results.json").read_text())["n_eval_episodes"] == 2
    PPO.load(folder / "ppo-MissionGym-v0.zip")  # plain SB3
    assert hub.main(["pull", "--local-dir", "shared/agent", "--run-name", "back"]) == 0
    run = tracked_run / "runs" / "back"
    pulled = {"best_model.zip", "best_vecnormalize.pkl", "best_model.safetensors", "best_model.agent.json", "config.yaml"}
    assert pulled <= {p.name for p in run.iterdir()}
    assert read_yaml(run / "config.yaml") == read_yaml(tracked_run / "runs" / "t" / "config.yaml")
    assert evaluate.main(["back", "--episodes", "2"]) == 0
    assert hub.main(["pull", "--local-dir", "shared/agent", "--run-name", "back"]) == 2  # never overwrites a run


def test_pull_a_zoo_repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    repo = tmp_path / "zoo"
    repo.mkdir()
    PPO("MlpPolicy", "CartPole-v1", n_steps=32, batch_size=32).save(repo / "ppo-CartPole-v1.zip")
    (repo / "env_kwargs.yml").write_text("{}\n")
    assert hub.main(["pull", "--local-dir", "zoo"]) == 0
    assert "pickles only" in capsys.readouterr().out  # what the follow-on commands need, and why
    assert read_yaml(tmp_path / "runs" / "ppo-CartPole-v1" / "config.yaml")["env"] == "CartPole-v1"
    # a zoo model is pickles only: refused in one line naming the flag, loaded as before with it
    assert evaluate.main(["ppo-CartPole-v1", "--episodes", "2"]) == 2
    assert "--trust-pickle" in capsys.readouterr().err
    assert evaluate.main(["ppo-CartPole-v1", "--episodes", "2", "--trust-pickle"]) == 0


def test_repo_id_uploads_and_downloads_through_huggingface_hub(
    tracked_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    huggingface_hub = pytest.importorskip("huggingface_hub", reason="the Hub client: pip install 'mission_gym[hub]'")
    calls: list[tuple[str, dict[str, Any]]] = []

    class FakeApi:
        def create_repo(self, **kwargs: Any) -> None:
            calls.append(("create_repo", kwargs))

        def upload_folder(self, **kwargs: Any) -> None:
            uploaded = {p.name for p in Path(kwargs["folder_path"]).iterdir()}
            calls.append(("upload_folder", {**kwargs, "files": uploaded}))

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    assert hub.main(["push", str(tracked_run / "runs" / "t"), "--repo-id", "me/ppo-mg"]) == 0
    assert calls[0] == ("create_repo", {"repo_id": "me/ppo-mg", "exist_ok": True, "private": False})
    assert calls[1][1]["repo_id"] == "me/ppo-mg" and "ppo-MissionGym-v0.zip" in calls[1][1]["files"]
    assert hub.main(["push", str(tracked_run / "runs" / "t"), "--local-dir", str(tmp_path / "snap")]) == 0
    downloads: list[dict[str, Any]] = []

    def snapshot_download(repo_id: str, **kwargs: Any) -> str:
        downloads.append({"repo_id": repo_id, **kwargs})
        return str(tmp_path / "snap")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    monkeypatch.chdir(tmp_path)
    assert hub.main(["pull", "--repo-id", "me/ppo-mg"]) == 0
    lineage = json.loads((tmp_path / "runs" / "ppo-MissionGym-v0" / "lineage.json").read_text())
    assert lineage["pulled_from"] == {"repo_id": "me/ppo-mg"}
    # only the layout's files, as plain files in a folder of their own (not links into the Hub's cache)
    assert downloads[0]["allow_patterns"] == list(hub_lib.PULLED) and downloads[0]["local_dir"]


def test_hub_errors_are_one_line(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    assert hub.main(["push", "nope", "--local-dir", "x"]) == 2
    assert capsys.readouterr().err.startswith("error: no run 'nope'")
    assert hub.main(["pull"]) == 2
    assert "--repo-id" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    assert hub.main(["pull", "--repo-id", "a/b"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: pulling from the Hub needs huggingface_hub, which is not installed: pip install 'mission_gym[hub]'"
    )
