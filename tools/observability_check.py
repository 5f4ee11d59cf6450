"""Does one observation tell an agent which defenders it faces? (issue 41's check before distilling per situation)

Plays games with each given model (deterministic, the models' own observation statistics), records every step's raw
observation with its game's situation (the defenders' modes, which the simulation knows and the agent does not see)
and trains a small classifier from observation to situation on three quarters of the games; reports its accuracy on
the other quarter by time into the game, against always guessing the commonest class, for the six situations and for
the number of guards (what decides between the two plans), from one observation and from a stack of four (t, t-5,
t-10, t-15).

    python tools/observability_check.py RUN_OR_MODEL [RUN_OR_MODEL ...] --games 200
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

from mission_gym.agents import load_agent
from mission_gym.envs import MissionVecEnv
from mission_gym.sim import layout as L

SEED_BASE = 700_000_000  # neither the training, the in-training evaluation nor the held-out seeds
BUCKETS = ((0, 10), (10, 30), (30, 60), (60, 120), (120, 10**6))
STACK = (0, 5, 10, 15)


def play(path: str, games: int, seed_base: int, trust_pickle: bool = False) -> tuple[np.ndarray, ...]:
    """Every step of ``games`` games of the model at ``path``: (stacked raw observations, situation codes, guards,
    step, game)."""
    agent = load_agent(path, trust_pickle=trust_pickle)
    env = MissionVecEnv(games, **agent.env_kwargs)
    env.seed_envs([seed_base + k for k in range(games)])
    obs = env.reset()
    modes = np.sort(env.core.dm[:, :, L.D_MODE].astype(int), axis=1)
    code = modes[:, 0] * 3 + modes[:, 1]
    guards = (modes == L.MODES.index("guard_objective")).sum(axis=1)
    history = [obs.copy()] * max(STACK)
    rows, codes, n_guards, steps, game_ids = [], [], [], [], []
    alive = np.ones(games, dtype=bool)
    t = 0
    while alive.any():
        history.append(obs.copy())
        stacked = np.concatenate([history[-1 - k] for k in STACK], axis=1)
        idx = np.flatnonzero(alive)
        rows.append(stacked[idx])
        codes.append(code[idx])
        n_guards.append(guards[idx])
        steps.append(np.full(idx.size, t))
        game_ids.append(idx)
        obs, _, dones, _ = env.step(agent.predict(obs))
        alive &= ~dones
        t += 1
    return (
        np.concatenate(rows),
        np.concatenate(codes),
        np.concatenate(n_guards),
        np.concatenate(steps),
        np.concatenate(game_ids),
    )


def fit(x: np.ndarray, y: np.ndarray, train: np.ndarray, classes: int, epochs: int = 30) -> np.ndarray:
    """A two-layer MLP from ``x`` to ``y``, trained on the rows in ``train``; its predictions of every row."""
    torch.manual_seed(0)
    mean, std = x[train].mean(0), x[train].std(0) + 1e-6
    xt = torch.as_tensor((x - mean) / std, dtype=torch.float32)
    yt = torch.as_tensor(y, dtype=torch.long)
    net = torch.nn.Sequential(torch.nn.Linear(x.shape[1], 128), torch.nn.ReLU(), torch.nn.Linear(128, classes))
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    rows = np.flatnonzero(train)
    for _ in range(epochs):
        for batch in np.array_split(np.random.default_rng(0).permutation(rows), max(1, rows.size // 1024)):
            loss = torch.nn.functional.cross_entropy(net(xt[batch]), yt[batch])
            opt.zero_grad()
            loss.backward()
            opt.step()
    with torch.no_grad():
        return net(xt).argmax(1).numpy()


def report(name: str, pred: np.ndarray, y: np.ndarray, test: np.ndarray, steps: np.ndarray) -> dict[str, object]:
    out: dict[str, object] = {"what": name}
    majority = np.bincount(y[test]).argmax()
    out["all"] = round(float((pred[test] == y[test]).mean()), 3)
    out["majority_guess"] = round(float((y[test] == majority).mean()), 3)
    for lo, hi in BUCKETS:
        sel = test & (steps >= lo) & (steps < hi)
        if sel.any():
            out[f"steps {lo}-{hi}"] = round(float((pred[sel] == y[sel]).mean()), 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", help="runs or model files (e.g. two teachers)")
    parser.add_argument("--games", type=int, default=200, help="games per model")
    parser.add_argument(
        "--trust-pickle", action="store_true", help="load models that exist only as pickles (they can run any code)"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    parts = [play(m, args.games, SEED_BASE + 10_000 * k, args.trust_pickle) for k, m in enumerate(args.models)]
    x = np.concatenate([p[0] for p in parts])
    code = np.concatenate([p[1] for p in parts])
    guards = np.concatenate([p[2] for p in parts])
    steps = np.concatenate([p[3] for p in parts])
    games = np.concatenate([p[4] + k * args.games for k, p in enumerate(parts)])
    test = (games % 4) == 3  # whole games held out
    train = ~test
    one = x[:, : x.shape[1] // len(STACK)]
    results = []
    for name, feats in (("one observation", one), ("4 stacked", x)):
        _, y6 = np.unique(code, return_inverse=True)
        results.append(report(f"situation (6), {name}", fit(feats, y6, train, int(y6.max()) + 1), y6, test, steps))
        results.append(report(f"guards (0/1/2), {name}", fit(feats, guards, train, 3), guards, test, steps))
    for r in results:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
