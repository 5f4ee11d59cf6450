"""rl-baselines3-zoo as the peer of `train_ppo --env ID`, run in rl-zoo3's own virtual environment (never in Mission
Gym's): its hyperparameter file for Gymnasium's v5 MuJoCo ids, and the held-out evaluation of a run it made.

    ZOO=/path/to/zoo-venv/bin/python
    $ZOO tools/zoo_peer.py conf ppo_v5.yml            # the zoo's ppo.yml, each v4 MuJoCo entry also under its v5 id
                                                      # (and an entry for the Dict task of docs/results.md)
    $ZOO -m rl_zoo3.train --algo ppo --env Hopper-v5 -conf ppo_v5.yml --seed 0 -f logs   # its own command
    $ZOO tools/zoo_peer.py eval logs/ppo/Hopper-v5_1 Hopper-v5 --episodes 20             # held out, as ours is

The evaluation plays the same held-out seeds as `python -m mission_gym.scripts.evaluate RUN --episodes 20`
(900,000,000 + k, deterministic actions) in the zoo's own test env (`rl_zoo3.utils.create_test_env`: its wrappers,
frame stack and frozen VecNormalize statistics) with the model its `enjoy` loads by default (the final one), and
counts each episode's return as SB3's ``Monitor`` under the wrappers records it (a whole Atari game, not a life).
It prints one JSON line. tools/vs_zoo.sh runs both trainers and both evaluations.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from pathlib import Path

HELD_OUT_SEED_BASE = 900_000_000  # mission_gym.evaluation.HELD_OUT_SEED_BASE (this script runs without the package)
V5 = ("HalfCheetah", "Hopper", "Walker2d", "Ant", "Humanoid")
#: the Dict task of docs/results.md, which the zoo lists no entry for: its Ant entry's form (SB3's defaults, 1M steps,
#: normalisation) with the policy a Dict observation needs
EXTRA = {"PointMaze_UMazeDense-v3": {"n_timesteps": 1e6, "normalize": True, "policy": "MultiInputPolicy"}}


def write_conf(path: Path) -> None:
    """The zoo's own ppo.yml with each of its v4 MuJoCo entries also under the v5 id (it has none for v5), and
    :data:`EXTRA`'s entries."""
    import rl_zoo3
    import yaml

    with open(Path(rl_zoo3.__file__).parent / "hyperparams" / "ppo.yml") as f:
        entries = yaml.safe_load(f)
    for name in V5:
        entries[f"{name}-v5"] = entries[f"{name}-v4"]
    entries.update(EXTRA)
    with open(path, "w") as f:
        yaml.safe_dump(entries, f)


def evaluate(log_dir: str, env_id: str, episodes: int, best: bool, packages: list[str]) -> dict:
    """The zoo's run on the held-out seeds (see the module doc)."""
    import numpy as np
    import rl_zoo3.import_envs  # noqa: F401  (registers ALE and the other optional suites the zoo knows)
    from rl_zoo3.utils import ALGOS, create_test_env, get_saved_hyperparams

    for package in packages:
        importlib.import_module(package)
    stats_path = os.path.join(log_dir, env_id.replace("/", "-"))
    hyperparams, stats_path = get_saved_hyperparams(stats_path, norm_reward=False, test_mode=True)
    model_path = os.path.join(log_dir, "best_model.zip" if best else f"{env_id.replace('/', '-')}.zip")
    model = ALGOS["ppo"].load(model_path, device="cpu")
    returns, lengths = [], []
    for k in range(episodes):
        env = create_test_env(env_id, n_envs=1, stats_path=stats_path, seed=HELD_OUT_SEED_BASE + k, log_dir=None,
                              should_render=False, hyperparams=dict(hyperparams))  # fmt: skip
        obs = env.reset()
        while True:
            action, _ = model.predict(obs, deterministic=True)
            obs, _, _, infos = env.step(action)
            if "episode" in infos[0]:
                returns.append(float(infos[0]["episode"]["r"]))
                lengths.append(int(infos[0]["episode"]["l"]))
                break
        env.close()
    return {"env": env_id, "model": model_path, "episodes": episodes, "mean_return": float(np.mean(returns)),
            "std_return": float(np.std(returns)), "mean_length": float(np.mean(lengths)), "returns": returns}  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    conf = sub.add_parser("conf", help="write the zoo's ppo.yml with v5 MuJoCo entries")
    conf.add_argument("path", type=Path)
    ev = sub.add_parser("eval", help="held-out return of a zoo run, one JSON line")
    ev.add_argument("log_dir", help="the run's folder, e.g. logs/ppo/Hopper-v5_1")
    ev.add_argument("env")
    ev.add_argument("--episodes", type=int, default=20)
    ev.add_argument("--best", action="store_true", help="its best_model.zip instead of the final model")
    ev.add_argument("--gym-packages", nargs="*", default=[], help="modules that register the env, as the zoo's flag")
    args = p.parse_args()
    if args.command == "conf":
        write_conf(args.path)
        return 0
    print(json.dumps(evaluate(args.log_dir, args.env, args.episodes, args.best, args.gym_packages)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
