"""Sharing trained agents in the Hugging Face Hub layout that rl-baselines3-zoo and ``huggingface_sb3`` use.

A repository (or a local folder of the same layout) holds::

    ppo-<EnvId>.zip        the SB3 model (loads with plain ``stable_baselines3.PPO.load``; mission_gym/ppo/portable.py)
    vec_normalize.pkl      its VecNormalize statistics, when the run normalised observations
    config.yml             the PPO hyperparameters, as the zoo writes them
    env_kwargs.yml         the env's keyword arguments
    mission_gym.yaml       the run's whole configuration (``train_ppo --preset mission_gym.yaml`` trains it again)
    results.json           the run's last evaluation (mean_reward, std_reward, ...), as huggingface_sb3 writes it
    README.md              the model card (Hub metadata: library, tags, evaluation results)

:func:`package` writes it from a run, :func:`push` uploads it to ``--repo-id`` (or it stays a local folder) and
:func:`pull` makes a run directory of one (a zoo repository too) that ``evaluate``, ``enjoy`` and ``record_video`` take.
"""

from __future__ import annotations

import datetime
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from mission_gym import ENV_ID
from mission_gym.config.yaml_io import ConfigError, dump_yaml, read_yaml
from mission_gym.optional import require
from mission_gym.ppo.agent import model_file
from mission_gym.rundir.directory import check_run_name, vecnormalize_path
from mission_gym.rundir.files import read_json

ALGO = "ppo"
#: configuration fields the zoo's config.yml names the same way (the rest of the run is in mission_gym.yaml)
_ZOO_KEYS = (
    "n_envs", "n_steps", "batch_size", "n_epochs", "gamma", "gae_lambda", "clip_range", "ent_coef", "vf_coef",
    "max_grad_norm", "learning_rate", "normalize", "target_kl",
)  # fmt: skip


def model_name(env_id: str) -> str:
    """The zoo's name of a model file in a repository: ``ppo-<EnvId>`` (``ppo-Hopper-v5``)."""
    return f"{ALGO}-{env_id.split(':')[-1]}"


def _zoo_config(config: dict[str, Any]) -> dict[str, Any]:
    """The run's PPO settings under the zoo's keys (``n_timesteps``, ``policy``, ``policy_kwargs`` as text)."""
    out: dict[str, Any] = {"n_timesteps": config.get("timesteps"), "policy": "MlpPolicy"}
    out.update({k: config[k] for k in _ZOO_KEYS if config.get(k) is not None})
    if config.get("lr_schedule") == "linear":
        out["learning_rate"] = f"lin_{config.get('learning_rate')}"
    activation = config.get("activation", "tanh")
    out["policy_kwargs"] = f"dict(net_arch={config.get('network_arch')}, activation_fn=nn.{_activation(activation)})"
    out.update(config.get("hyperparams") or {})
    return out


def _block_yaml(data: Any) -> str:
    """YAML in block style, keys in order (how the zoo's and the Hub's files look)."""
    import yaml

    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


def _activation(name: str) -> str:
    from mission_gym.settings.schema import ACTIVATIONS

    return ACTIVATIONS.get(name, "Tanh")


def _results(run_dir: Path | None) -> dict[str, Any] | None:
    """huggingface_sb3's results.json from the run's last evaluation (None when it has none)."""
    if run_dir is None:
        return None
    final = (read_json(run_dir / "metadata.json").get("result") or {}).get("final_eval")
    if not final:
        return None
    return {
        "mean_reward": final.get("mean_return"),
        "std_reward": final.get("std_return"),
        "is_deterministic": True,
        "n_eval_episodes": final.get("n_episodes"),
        "eval_datetime": datetime.datetime.now().isoformat(),
        **({"win_rate": final["win_rate"]} if final.get("win_rate") not in (None, "") else {}),
    }


def model_card(env_id: str, repo_id: str | None, results: dict[str, Any] | None, config: dict[str, Any]) -> str:
    """The README.md of a repository: Hub metadata (library, tags, evaluation results) and how to use the agent."""
    name = model_name(env_id)
    meta: dict[str, Any] = {
        "library_name": "stable-baselines3",
        "tags": [env_id, "deep-reinforcement-learning", "reinforcement-learning", "stable-baselines3", "mission_gym"],
    }
    if results is not None and results.get("mean_reward") is not None:
        meta["model-index"] = [
            {
                "name": "PPO",
                "results": [
                    {
                        "task": {"type": "reinforcement-learning", "name": "reinforcement-learning"},
                        "dataset": {"name": env_id, "type": env_id},
                        "metrics": [
                            {
                                "type": "mean_reward",
                                "value": f"{results['mean_reward']:.2f} +/- {results['std_reward']:.2f}",
                                "name": "mean_reward",
                                "verified": False,
                            }
                        ],
                    }
                ],
            }
        ]
    env_line = (
        f'import mission_gym  # registers {ENV_ID}\nenv = gym.make("{ENV_ID}")'
        if env_id == ENV_ID
        else f'env = gym.make("{env_id}")'
    )
    repo = repo_id or "<repo-id>"
    score = ""
    if results is not None and results.get("mean_reward") is not None:
        score = f"Mean return {results['mean_reward']:.2f} ± {results['std_reward']:.2f}"
        score += f" over {results['n_eval_episodes']} evaluation episodes"
        score += f", win rate {100 * results['win_rate']:.1f}%.\n" if results.get("win_rate") is not None else ".\n"
    return f"""---
{_block_yaml(meta).rstrip()}
---

# PPO agent playing {env_id}

A PPO agent trained with Mission Gym's `train_ppo` (stable-baselines3) on `{env_id}`.
{score}
The files are in the layout of rl-baselines3-zoo and huggingface_sb3: `{name}.zip` (the model, loads with plain
`stable_baselines3.PPO.load`), `vec_normalize.pkl` (observation statistics, if any), `config.yml` (hyperparameters),
`env_kwargs.yml`, `results.json` and `mission_gym.yaml` (the whole run configuration).

```bash
mission-hub pull --repo-id {repo} --run-name {name}
mission-enjoy {name}                      # watch it
mission-evaluate {name}                   # held-out evaluation
mission-train --preset runs/{name}/config.yaml   # train it again
```

```python
import gymnasium as gym
from stable_baselines3 import PPO

model = PPO.load("{name}.zip")
{env_line}
```

Training configuration (`mission_gym.yaml`): preset `{config.get("preset", "")}`, {config.get("timesteps", 0):,} steps.
"""


def package(model_or_run: str | Path, out_dir: str | Path, runs_dir: str | Path = "runs", repo_id: str | None = None) -> Path:
    """Write a run's model (its best, else final model, or the given ``.zip``) in the Hub layout into ``out_dir``.

    :raises ConfigError: when there is no such run or model
    """
    try:
        path, run_dir = model_file(model_or_run, runs_dir)
    except (FileNotFoundError, ValueError) as exc:
        raise ConfigError(str(exc).strip("'\"")) from None
    config: dict[str, Any] = read_yaml(run_dir / "config.yaml") if run_dir is not None else {}
    env_id = str(config.get("env", ENV_ID))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, out / f"{model_name(env_id)}.zip")
    stats = vecnormalize_path(path)
    if stats.is_file():
        shutil.copyfile(stats, out / "vec_normalize.pkl")
    (out / "config.yml").write_text(_block_yaml(_zoo_config(config)))
    (out / "env_kwargs.yml").write_text(_block_yaml(dict(config.get("env_kwargs") or {})))
    if config:
        (out / "mission_gym.yaml").write_text(dump_yaml(config))
    results = _results(run_dir)
    if results is not None:
        (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "README.md").write_text(model_card(env_id, repo_id, results, config))
    return out


def push(
    model_or_run: str | Path,
    repo_id: str | None = None,
    local_dir: str | Path | None = None,
    runs_dir: str | Path = "runs",
    commit_message: str = "Upload PPO agent trained with Mission Gym",
    private: bool = False,
) -> str:
    """Share a run's agent: upload the Hub layout to ``repo_id`` (created if needed; log in with ``hf auth login``
    or ``HF_TOKEN``) and/or write it to ``local_dir``. Returns where it went.

    :raises ConfigError: with neither destination, or for a missing run
    """
    if repo_id is None and local_dir is None:
        raise ConfigError("give --repo-id ORG/NAME (the Hub) or --local-dir DIR (a folder of the same layout)")
    if local_dir is not None:
        folder = package(model_or_run, local_dir, runs_dir, repo_id)
        if repo_id is None:
            return str(folder)
    hub = require("huggingface_hub", "pushing to the Hub")
    with tempfile.TemporaryDirectory() as tmp:
        folder = package(model_or_run, tmp, runs_dir, repo_id) if local_dir is None else Path(local_dir)
        api = hub.HfApi()
        api.create_repo(repo_id=repo_id, exist_ok=True, private=private)
        api.upload_folder(repo_id=repo_id, folder_path=str(folder), commit_message=commit_message)
    return f"https://huggingface.co/{repo_id}"


def _env_from_card(folder: Path) -> str | None:
    """The env id a repository's files name: mission_gym.yaml, else the model file's ``ppo-<EnvId>.zip``."""
    if (folder / "mission_gym.yaml").is_file():
        return str(read_yaml(folder / "mission_gym.yaml").get("env", ENV_ID))
    zips = sorted(folder.glob(f"{ALGO}-*.zip"))
    return zips[0].name.removeprefix(f"{ALGO}-").removesuffix(".zip") if zips else None


def pull(
    repo_id: str | None = None,
    local_dir: str | Path | None = None,
    runs_dir: str | Path = "runs",
    run_name: str | None = None,
) -> Path:
    """Make a run directory (``runs_dir/run_name``: ``config.yaml``, ``best_model.zip`` and its statistics) of an
    agent on the Hub (``repo_id``) or in a local folder of the Hub layout (``local_dir``).

    :raises ConfigError: with neither source, for a folder without a model, or an existing run directory
    """
    if (repo_id is None) == (local_dir is None):
        raise ConfigError("give one of --repo-id ORG/NAME (the Hub) or --local-dir DIR (a folder of the Hub layout)")
    if repo_id is not None:
        hub = require("huggingface_hub", "pulling from the Hub")
        folder = Path(hub.snapshot_download(repo_id=repo_id))
    else:
        folder = Path(str(local_dir))
        if not folder.is_dir():
            raise ConfigError(f"--local-dir {str(folder)!r} is not a directory")
    env_id = _env_from_card(folder)
    if env_id is None:
        raise ConfigError(f"{repo_id or str(folder)!r} holds no model file ({ALGO}-<EnvId>.zip)")
    name = check_run_name(run_name or model_name(env_id))
    run = Path(runs_dir) / name
    if run.exists():
        raise ConfigError(f"run directory {str(run)!r} already exists; pick another --run-name")
    config: dict[str, Any]
    if (folder / "mission_gym.yaml").is_file():
        config = read_yaml(folder / "mission_gym.yaml")
    else:  # a zoo repository: what its files say of the env
        kwargs = read_yaml(folder / "env_kwargs.yml") if (folder / "env_kwargs.yml").is_file() else {}
        config = {"preset": "hub", "env": env_id, "env_kwargs": kwargs or {}}
    run.mkdir(parents=True)
    (run / "checkpoints").mkdir()
    shutil.copyfile(folder / f"{model_name(env_id)}.zip", run / "best_model.zip")
    if (folder / "vec_normalize.pkl").is_file():
        shutil.copyfile(folder / "vec_normalize.pkl", vecnormalize_path(run / "best_model.zip"))
    (run / "config.yaml").write_text(dump_yaml(config))
    source = {"repo_id": repo_id} if repo_id else {"local_dir": str(folder)}
    (run / "lineage.json").write_text(json.dumps({"run": name, "pulled_from": source}, indent=2) + "\n")
    return run
