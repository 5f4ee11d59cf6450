"""Small tasks of the kinds a user brings, for the tests: pixels, a Dict observation, an image inside a Dict, and an
observation too large to allocate carelessly. Importing the module registers them (``--env task_envs:ImageTarget-v0``
imports it, in worker processes too, when its directory is on the path)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class ImageTarget(gym.Env):
    """A 36x36 RGB image (uint8, channels last) with a bright square left or right; action 0 or 1 names the side.
    Reward 1 for the right side; an episode is 16 guesses."""

    metadata = {"render_modes": []}

    def __init__(self) -> None:
        self.observation_space = spaces.Box(0, 255, (36, 36, 3), dtype=np.uint8)
        self.action_space = spaces.Discrete(2)
        self._side, self._t = 0, 0

    def _obs(self) -> np.ndarray:
        image = np.zeros((36, 36, 3), dtype=np.uint8)
        image[10:26, (2 if self._side == 0 else 20) : (16 if self._side == 0 else 34)] = 255
        return image

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._side, self._t = int(self.np_random.integers(2)), 0
        return self._obs(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        reward = float(int(action) == self._side)
        self._side, self._t = int(self.np_random.integers(2)), self._t + 1
        return self._obs(), reward, False, self._t >= 16, {}


class DictGoal(gym.Env):
    """A point that moves by its continuous action towards a goal, observed as a Dict (``position``, ``goal``) as
    goal-conditioned tasks are; reward the negative distance; 32 steps."""

    metadata = {"render_modes": []}

    def __init__(self) -> None:
        box = spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)
        self.observation_space = spaces.Dict({"position": box, "goal": box})
        self.action_space = spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)
        self._pos = self._goal = np.zeros(2, dtype=np.float32)
        self._t = 0

    def _obs(self) -> dict[str, np.ndarray]:
        return {"position": self._pos.copy(), "goal": self._goal.copy()}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        self._pos = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        self._goal = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        self._t = 0
        return self._obs(), {}

    def step(self, action: np.ndarray) -> tuple[dict, float, bool, bool, dict]:
        self._pos = np.clip(self._pos + 0.1 * np.clip(action, -1, 1), -1, 1).astype(np.float32)
        self._t += 1
        return self._obs(), -float(np.linalg.norm(self._pos - self._goal)), False, self._t >= 32, {}


class DictImage(gym.Env):
    """A Dict of an image (the ImageTarget's) and a vector; discrete actions."""

    metadata = {"render_modes": []}

    def __init__(self) -> None:
        self._inner = ImageTarget()
        self.observation_space = spaces.Dict(
            {"image": self._inner.observation_space, "clock": spaces.Box(0.0, 1.0, (1,), dtype=np.float32)}
        )
        self.action_space = self._inner.action_space

    def _obs(self, image: np.ndarray) -> dict[str, np.ndarray]:
        return {"image": image, "clock": np.array([self._inner._t / 16], dtype=np.float32)}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        image, info = self._inner.reset(seed=seed)
        return self._obs(image), info

    def step(self, action: int) -> tuple[dict, float, bool, bool, dict]:
        image, reward, terminated, truncated, info = self._inner.step(action)
        return self._obs(image), reward, terminated, truncated, info


class Voxels(gym.Env):
    """A 17x49x71x58 float32 observation (13.7 MB a step, a voxel model's), discrete actions: a task whose rollout
    must be planned before it is allocated."""

    metadata = {"render_modes": []}
    SHAPE = (17, 49, 71, 58)

    def __init__(self) -> None:
        self.observation_space = spaces.Box(0.0, 1.0, self.SHAPE, dtype=np.float32)
        self.action_space = spaces.Discrete(4)
        self._t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._t = 0
        return np.zeros(self.SHAPE, dtype=np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self._t += 1
        return np.zeros(self.SHAPE, dtype=np.float32), 0.0, False, self._t >= 8, {}


for _id, _cls in (("ImageTarget-v0", ImageTarget), ("DictGoal-v0", DictGoal), ("DictImage-v0", DictImage),
                  ("Voxels-v0", Voxels)):  # fmt: skip
    if _id not in gym.registry:
        gym.register(_id, entry_point=_cls)
