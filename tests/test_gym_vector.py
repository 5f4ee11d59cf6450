"""Gymnasium's vector API over the batched core: ``import mission_gym`` registers the id (light, string entry points),
``gym.make_vec(..., vectorization_mode="vector_entry_point")`` gives :class:`MissionVectorEnv`, whose env ``i``
replays a ``MissionEnv`` seeded ``seed + i``, and a CleanRL-style PPO loop runs on it."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode

import mission_gym
from mission_gym.envs import MissionEnv, MissionVectorEnv

SHORT = {"world": {"physics": {"episode_seconds": 5.0}}}  # episodes of at most 20 steps (timeout)


def test_import_registers_light_string_entry_points() -> None:
    code = (
        "import sys, gymnasium as gym, mission_gym\n"
        "spec = gym.spec('MissionGym-v0')\n"
        "assert spec.entry_point == 'mission_gym.envs.mission_env:MissionEnv', spec.entry_point\n"
        "assert spec.vector_entry_point == 'mission_gym.envs.gym_vector:MissionVectorEnv', spec.vector_entry_point\n"
        "heavy = [m for m in ('numba', 'torch', 'stable_baselines3', 'mission_gym.sim') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_gym_make_with_module_prefix_in_a_fresh_interpreter() -> None:
    code = (
        "import gymnasium as gym\n"
        "env = gym.make('mission_gym:MissionGym-v0')\n"
        "obs, _ = env.reset(seed=0)\n"
        "assert obs.shape == env.observation_space.shape\n"
        "print(type(env.unwrapped).__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "MissionEnv"


def test_make_vec_gives_the_batched_vector_env() -> None:
    envs = gym.make_vec(mission_gym.ENV_ID, num_envs=8, vectorization_mode="vector_entry_point", reward={"win_bonus": 7.0})
    assert isinstance(envs, MissionVectorEnv)
    assert envs.metadata["autoreset_mode"] is AutoresetMode.SAME_STEP
    assert envs.config.reward.win_bonus == 7.0
    obs, info = envs.reset(seed=3)
    assert obs.shape == (8, *envs.single_observation_space.shape) and envs.observation_space.contains(obs)
    obs, rewards, terminated, truncated, info = envs.step(envs.action_space.sample())
    assert rewards.shape == terminated.shape == truncated.shape == (8,)
    envs.close()


def test_env_i_replays_a_mission_env_seeded_seed_plus_i_across_autoresets() -> None:
    n, seed, steps = 3, 11, 70  # several 20-step episodes per env: the same-step resets continue each stream
    envs = MissionVectorEnv(num_envs=n, **SHORT)
    singles = [MissionEnv(**SHORT) for _ in range(n)]
    obs, _ = envs.reset(seed=seed)
    single_obs = [env.reset(seed=seed + i)[0] for i, env in enumerate(singles)]
    np.testing.assert_array_equal(obs, np.stack(single_obs))
    rng = np.random.default_rng(0)
    ends = 0
    for _ in range(steps):
        actions = rng.integers(0, 11, size=envs.action_space.shape)
        obs, rewards, terminated, truncated, info = envs.step(actions)
        for i, env in enumerate(singles):
            o, r, te, tr, single_info = env.step(actions[i])
            assert r == rewards[i] and te == terminated[i] and tr == truncated[i]
            if te or tr:
                ends += 1
                assert info["_final_obs"][i]
                np.testing.assert_array_equal(info["final_obs"][i], o)
                assert info["final_info"]["outcome"][i] == single_info["outcome"]
                o, _ = env.reset()  # the single env's next episode: its stream continues, as the vector env's
            np.testing.assert_array_equal(obs[i], o)
    assert ends >= 2 * n


def test_cleanrl_style_ppo_loop() -> None:
    """The loop of docs/environment.md: rollouts with RecordEpisodeStatistics, GAE, a clipped PPO update."""
    num_envs, num_steps, gamma, lam = 16, 32, 0.99, 0.95
    envs = gym.make_vec("mission_gym:MissionGym-v0", num_envs=num_envs, vectorization_mode="vector_entry_point", **SHORT)
    envs = gym.wrappers.vector.RecordEpisodeStatistics(envs)
    n_obs = envs.single_observation_space.shape[0]
    nvec = envs.single_action_space.nvec
    actor = torch.nn.Sequential(torch.nn.Linear(n_obs, 64), torch.nn.Tanh(), torch.nn.Linear(64, int(nvec.sum())))
    critic = torch.nn.Sequential(torch.nn.Linear(n_obs, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    optimizer = torch.optim.Adam([*actor.parameters(), *critic.parameters()], lr=3e-4)

    def dist(x: torch.Tensor) -> list[torch.distributions.Categorical]:
        return [torch.distributions.Categorical(logits=lg) for lg in torch.split(actor(x), nvec.tolist(), dim=1)]

    obs_buf = torch.zeros((num_steps, num_envs, n_obs))
    act_buf = torch.zeros((num_steps, num_envs, len(nvec)), dtype=torch.long)
    logp_buf, rew_buf, done_buf, val_buf = (torch.zeros((num_steps, num_envs)) for _ in range(4))
    next_obs = torch.tensor(envs.reset(seed=1)[0])
    next_done = torch.zeros(num_envs)
    returns_seen = []
    for step in range(num_steps):
        obs_buf[step], done_buf[step] = next_obs, next_done
        with torch.no_grad():
            heads = dist(next_obs)
            action = torch.stack([d.sample() for d in heads], dim=1)
            logp_buf[step] = sum(d.log_prob(a) for d, a in zip(heads, action.T))
            val_buf[step] = critic(next_obs).squeeze(1)
        act_buf[step] = action
        obs, reward, terminated, truncated, infos = envs.step(action.numpy())
        rew_buf[step] = torch.tensor(reward, dtype=torch.float32)
        next_obs, next_done = torch.tensor(obs), torch.tensor(terminated | truncated, dtype=torch.float32)
        if "episode" in infos:
            returns_seen += infos["episode"]["r"][infos["_episode"]].tolist()
    assert returns_seen, "episodes of 20 steps end within a 32-step rollout"
    with torch.no_grad():  # GAE (same-step autoreset: a done step's successor is the next episode's first)
        advantages = torch.zeros_like(rew_buf)
        last, next_value = 0.0, critic(next_obs).squeeze(1)
        for t in reversed(range(num_steps)):
            nonterminal = 1.0 - (next_done if t == num_steps - 1 else done_buf[t + 1])
            nv = next_value if t == num_steps - 1 else val_buf[t + 1]
            delta = rew_buf[t] + gamma * nv * nonterminal - val_buf[t]
            advantages[t] = last = delta + gamma * lam * nonterminal * last
        returns = advantages + val_buf
    b_obs, b_act = obs_buf.reshape(-1, n_obs), act_buf.reshape(-1, len(nvec))
    heads = dist(b_obs)
    new_logp = sum(d.log_prob(a) for d, a in zip(heads, b_act.T))
    ratio = (new_logp - logp_buf.reshape(-1)).exp()
    adv = advantages.reshape(-1)
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    pg_loss = torch.max(-adv * ratio, -adv * ratio.clamp(0.8, 1.2)).mean()
    v_loss = ((critic(b_obs).squeeze(1) - returns.reshape(-1)) ** 2).mean()
    loss = pg_loss + 0.5 * v_loss
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    assert torch.isfinite(loss)
    envs.close()
