"""Sharing trained agents in the Hugging Face Hub layout that rl-baselines3-zoo and ``huggingface_sb3`` use.

A repository (or a local folder of the same layout) holds::

    ppo-<EnvId>.zip        the SB3 model (loads with plain ``stable_baselines3.PPO.load``; mission_gym/training/portable.py)
    vec_normalize.pkl      its VecNormalize statistics, when the run normalised observations
    ppo-<EnvId>.safetensors  the same agent without pickles: its weights (mission_gym/agents/files.py)
    ppo-<EnvId>.agent.json   and its env, policy description and observation statistics as JSON
    config.yml             the PPO hyperparameters, as the zoo writes them
    env_kwargs.yml         the env's keyword arguments
    mission_gym.yaml       the run's whole configuration (``train_ppo --preset mission_gym.yaml`` trains it again)
    results.json           the run's last evaluation (mean_reward, std_reward, ...), as huggingface_sb3 writes it
    README.md              the model card (Hub metadata: library, tags, evaluation results)

:func:`package` writes it from a run, :func:`push` uploads it to ``--repo-id`` (or it stays a local folder) and
:func:`pull` makes a run directory of one (a zoo repository too) that ``evaluate``, ``enjoy`` and ``record_video`` take.
A pulled agent with the safe files loads without unpickling anything; one with pickles only (a zoo repository, a
push of an older version) is refused by those commands unless ``--trust-pickle``. Pull takes the layout's file names
only, each a plain file of the folder (no link out of it) of bounded size, reads the YAML files with the safe loader
and checks the run name as every run name is, and it writes the run directory whole or not at all.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from mission_gym import ENV_ID
from mission_gym.agents.files import agent_files, read_agent_file
from mission_gym.agents.loading import PickleRefused, has_safe_files, load_agent, model_file, pickle_refusal
from mission_gym.agents.spec import AgentSpec
from mission_gym.config.yaml_io import ConfigError, dump_yaml, read_yaml
from mission_gym.optional import require
from mission_gym.rundir.directory import NAME_PATTERN, check_run_name, saved_with
from mission_gym.rundir.files import atomic_save_all, read_json

ALGO = "ppo"
#: the most bytes a pulled file may hold: a model's files, and the YAML and JSON files (each read whole)
MAX_MODEL_BYTES = 1 << 30
MAX_TEXT_BYTES = 4 << 20
#: what a pull downloads from a Hub repository (the layout's files; any other file stays there)
PULLED = ("mission_gym.yaml", "env_kwargs.yml", "vec_normalize.pkl", f"{ALGO}-*.zip", f"{ALGO}-*.safetensors",
          f"{ALGO}-*.agent.json")  # fmt: skip
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
`env_kwargs.yml`, `results.json` and `mission_gym.yaml` (the whole run configuration). `{name}.safetensors` and
`{name}.agent.json` are the same agent without pickles (weights, policy description and observation statistics):
Mission Gym's commands load those, so nothing in this repository runs code when you evaluate or watch the agent.

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


def package(
    model_or_run: str | Path,
    out_dir: str | Path,
    runs_dir: str | Path = "runs",
    repo_id: str | None = None,
    trust_pickle: bool = False,
) -> Path:
    """Write a run's model (its best, else final model, or the given ``.zip``) in the Hub layout into ``out_dir``,
    its safe files included: copied from beside the model, or (for a model saved before them) converted from its
    pickles when ``trust_pickle``.

    :raises ConfigError: when there is no such run or model, or a model to convert without ``trust_pickle``
        (:class:`~mission_gym.agents.loading.PickleRefused`)
    """
    try:
        path, run_dir = model_file(model_or_run, runs_dir)
    except (FileNotFoundError, ValueError) as exc:
        raise ConfigError(str(exc).strip("'\"")) from None
    if not path.is_file():
        raise ConfigError(f"{path} is missing: a shared agent carries its SB3 zip for PPO.load users")
    config: dict[str, Any] = read_yaml(run_dir / "config.yaml") if run_dir is not None else {}
    env_id = str(config.get("env", ENV_ID))
    out = Path(out_dir)
    name = model_name(env_id)
    if not has_safe_files(path):  # before anything is written: the conversion may be refused
        _convert(path, run_dir, config, trust_pickle, out / f"{name}.zip")
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, out / f"{name}.zip")
    for src, dst in zip(saved_with(path), [out / "vec_normalize.pkl", *saved_with(out / f"{name}.zip")[1:]]):
        if src.is_file():
            shutil.copyfile(src, dst)
    (out / "config.yml").write_text(_block_yaml(_zoo_config(config)))
    (out / "env_kwargs.yml").write_text(_block_yaml(dict(config.get("env_kwargs") or {})))
    if config:
        (out / "mission_gym.yaml").write_text(dump_yaml(config))
    results = _results(run_dir)
    if results is not None:
        (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "README.md").write_text(model_card(env_id, repo_id, results, config))
    return out


def _convert(path: Path, run_dir: Path | None, config: dict[str, Any], trust_pickle: bool, out_model: Path) -> None:
    """Write the safe files of a model saved before them (loading its pickles) beside ``out_model``.

    :raises PickleRefused: without ``trust_pickle``
    :raises ConfigError: for a model outside a run (no configuration describes its policy)
    """
    if not trust_pickle:
        raise PickleRefused(pickle_refusal(path).replace("to load it", "to convert it to safe files"))
    if run_dir is None:
        raise ConfigError(f"{path} is outside a run, so no config.yaml describes its policy; push its run directory")
    spec = AgentSpec.from_config(config, str(run_dir / "config.yaml"))
    agent = load_agent(path, trust_pickle=True)
    out_model.parent.mkdir(parents=True, exist_ok=True)
    atomic_save_all(agent_files(out_model, agent.policy, agent.stats, spec, agent.timesteps))


def push(
    model_or_run: str | Path,
    repo_id: str | None = None,
    local_dir: str | Path | None = None,
    runs_dir: str | Path = "runs",
    commit_message: str = "Upload PPO agent trained with Mission Gym",
    private: bool = False,
    trust_pickle: bool = False,
) -> str:
    """Share a run's agent: upload the Hub layout to ``repo_id`` (created if needed; log in with ``hf auth login``
    or ``HF_TOKEN``) and/or write it to ``local_dir``. Returns where it went.

    :param trust_pickle: convert a model saved before the safe files by loading its pickles
    :raises ConfigError: with neither destination, for a missing run, or a model to convert without ``trust_pickle``
    """
    if repo_id is None and local_dir is None:
        raise ConfigError("give --repo-id ORG/NAME (the Hub) or --local-dir DIR (a folder of the same layout)")
    if local_dir is not None:
        folder = package(model_or_run, local_dir, runs_dir, repo_id, trust_pickle)
        if repo_id is None:
            return str(folder)
    hub = require("huggingface_hub", "pushing to the Hub")
    with tempfile.TemporaryDirectory() as tmp:
        folder = package(model_or_run, tmp, runs_dir, repo_id, trust_pickle) if local_dir is None else Path(local_dir)
        api = hub.HfApi()
        api.create_repo(repo_id=repo_id, exist_ok=True, private=private)
        api.upload_folder(repo_id=repo_id, folder_path=str(folder), commit_message=commit_message)
    return f"https://huggingface.co/{repo_id}"


def pull(
    repo_id: str | None = None,
    local_dir: str | Path | None = None,
    runs_dir: str | Path = "runs",
    run_name: str | None = None,
) -> Path:
    """Make a run directory (``runs_dir/run_name``: ``config.yaml``, ``best_model.zip`` and the files beside it) of
    an agent on the Hub (``repo_id``; only the layout's files are downloaded) or in a local folder of the Hub layout
    (``local_dir``). Nothing of the files is loaded: each is checked (see the module doc) and copied.

    :raises ConfigError: with neither source, for a folder without a model, a file that fails a check, or an
        existing run directory
    """
    if (repo_id is None) == (local_dir is None):
        raise ConfigError("give one of --repo-id ORG/NAME (the Hub) or --local-dir DIR (a folder of the Hub layout)")
    if repo_id is not None:
        hub = require("huggingface_hub", "pulling from the Hub")
        with tempfile.TemporaryDirectory() as tmp:  # plain files, not links into the Hub's cache
            folder = hub.snapshot_download(repo_id=repo_id, local_dir=tmp, allow_patterns=list(PULLED))
            return _pull_folder(Path(folder), repo_id, {"repo_id": repo_id}, runs_dir, run_name)
    folder = Path(str(local_dir))
    if not folder.is_dir():
        raise ConfigError(f"--local-dir {str(folder)!r} is not a directory")
    return _pull_folder(folder, str(folder), {"local_dir": str(folder)}, runs_dir, run_name)


def _checked(folder: Path, name: str, limit: int) -> Path | None:
    """The file ``name`` of a pulled folder (None when absent), once it passes the checks: a plain name, a regular
    file inside the folder (a link may point within it only) and at most ``limit`` bytes.

    :raises ConfigError: naming the file and the check it fails
    """
    if not NAME_PATTERN.match(name):
        raise ConfigError(f"{str(folder / name)!r}: not a plain file name (letters, digits and . _ + - only, no slashes)")
    path = folder / name
    if not path.exists() and not path.is_symlink():
        return None
    target = path.resolve()
    if not target.is_relative_to(folder):
        raise ConfigError(f"{str(path)!r} links to {str(target)!r}, out of the folder; pull takes the folder's own files")
    if not target.is_file():
        raise ConfigError(f"{str(path)!r} is not a regular file")
    size = target.stat().st_size
    if size > limit:
        raise ConfigError(f"{str(path)!r} holds {size:,} bytes, more than the {limit:,} a pulled {name} may")
    return target


def _mapping(path: Path) -> dict[str, Any]:
    """A pulled YAML file that must hold a mapping (read with the safe loader)."""
    data = read_yaml(path)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping, got {type(data).__name__}")
    return data


def _card(folder: Path, where: str) -> dict[str, Any]:
    """The run configuration a pulled folder gives: its mission_gym.yaml, else (a zoo repository) what its model's
    name and env_kwargs.yml say of the env; checked as a configuration's agent fields are."""
    card = _checked(folder, "mission_gym.yaml", MAX_TEXT_BYTES)
    if card is not None:
        config = _mapping(card)
        AgentSpec.from_config(config, str(card))
        return config
    zips = sorted(p.name for p in folder.glob(f"{ALGO}-*.zip"))
    if not zips:
        raise ConfigError(f"{where!r} holds no model file ({ALGO}-<EnvId>.zip)")
    env_id = zips[0].removeprefix(f"{ALGO}-").removesuffix(".zip")
    kwargs_file = _checked(folder, "env_kwargs.yml", MAX_TEXT_BYTES)
    config = {"preset": "hub", "env": env_id, "env_kwargs": _mapping(kwargs_file) if kwargs_file is not None else {}}
    AgentSpec.from_config(config, str(kwargs_file or folder / zips[0]))
    return config


def _pull_folder(folder: Path, where: str, source: dict[str, str], runs_dir: str | Path, run_name: str | None) -> Path:
    """Check a folder of the Hub layout and make a run directory of it (see :func:`pull`)."""
    folder = folder.resolve()
    config = _card(folder, where)
    name = model_name(str(config.get("env", ENV_ID)))
    model = _checked(folder, f"{name}.zip", MAX_MODEL_BYTES)
    if model is None:
        raise ConfigError(f"{where!r} holds no model file {name}.zip")
    best = Path("best_model.zip")
    files = {best.name: model}
    for src, dst in zip(["vec_normalize.pkl", f"{name}.safetensors", f"{name}.agent.json"], saved_with(best)):
        found = _checked(folder, src, MAX_TEXT_BYTES if src.endswith(".json") else MAX_MODEL_BYTES)
        if found is not None:
            files[dst.name] = found
    card = saved_with(best)[2].name
    if card in files:
        read_agent_file(files[card])  # refuse one this version cannot read now, not at its first use
    run = Path(runs_dir) / check_run_name(run_name or name)
    if run.exists():
        raise ConfigError(f"run directory {str(run)!r} already exists; pick another --run-name")
    tmp = run.with_name(f".{run.name}.tmp{os.getpid()}")  # renamed into place whole: no half-pulled run
    try:
        (tmp / "checkpoints").mkdir(parents=True)
        for dst_name, src_path in files.items():
            shutil.copyfile(src_path, tmp / dst_name)
        (tmp / "config.yaml").write_text(dump_yaml(config))
        (tmp / "lineage.json").write_text(json.dumps({"run": run.name, "pulled_from": source}, indent=2) + "\n")
        os.replace(tmp, run)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return run
