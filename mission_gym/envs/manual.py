"""Driving the attackers from the keyboard in a pygame window (the ``play_manual`` command).

The loop is a plain function over an env and a :class:`~mission_gym.envs.rendering.HumanWindow`, and
key state comes from pygame *events* (not ``pygame.key.get_pressed``), so a test can run it headless
(``SDL_VIDEODRIVER=dummy``) and drive it with ``pygame.event.post``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from mission_gym.envs.mission_env import MissionEnv
from mission_gym.envs.rendering import HumanWindow, get_font, make_view, render_frame, require_pygame
from mission_gym.sim.layout import A_SCAN, A_STOP, A_TAG, ACTION_NAMES

KEYS_HELP = """\
keys:
  1-9          select attacker 1-9        0 / `    select all attackers
  Tab          select the next attacker   Shift+Tab the previous one
  arrows/WASD  move the selection (hold two for the diagonals: NE, SE, SW, NW); release to stop
  space        TAG (fire the tag beam)    e         SCAN (boost sensors)
  r            reset the episode          Esc / q   quit
Attackers you are not steering keep their last command, so you can send one off and switch to another."""

# compass action for a (dx, dy) key direction
_DIRECTIONS: dict[tuple[int, int], int] = {
    (0, 1): ACTION_NAMES.index("N"),
    (1, 1): ACTION_NAMES.index("NE"),
    (1, 0): ACTION_NAMES.index("E"),
    (1, -1): ACTION_NAMES.index("SE"),
    (0, -1): ACTION_NAMES.index("S"),
    (-1, -1): ACTION_NAMES.index("SW"),
    (-1, 0): ACTION_NAMES.index("W"),
    (-1, 1): ACTION_NAMES.index("NW"),
}


class KeyboardController:
    """Turns pygame key events into one MultiDiscrete action per env step.

    :param n_attackers: how many attackers there are
    :param pygame: the pygame module (for key constants)
    """

    def __init__(self, n_attackers: int, pygame: Any) -> None:
        self.pg = pygame
        self.n = n_attackers
        self.selected: int | None = 0  # None = all attackers
        self.commands = np.full(n_attackers, A_STOP, dtype=np.int64)
        self.held: set[str] = set()
        self._one_shot: int | None = None
        k = pygame
        self._moves = {
            k.K_UP: "up",
            k.K_w: "up",
            k.K_DOWN: "down",
            k.K_s: "down",
            k.K_LEFT: "left",
            k.K_a: "left",
            k.K_RIGHT: "right",
            k.K_d: "right",
        }

    def handle(self, event: Any) -> str | None:
        """Update the state from one event.

        :return: ``"quit"``, ``"reset"`` or None
        """
        k = self.pg
        if event.type == k.QUIT:
            return "quit"
        if event.type == k.KEYUP and event.key in self._moves:
            self.held.discard(self._moves[event.key])
            self._steer()
            return None
        if event.type != k.KEYDOWN:
            return None
        return self._key_down(event)

    def _key_down(self, event: Any) -> str | None:
        """Act on one key press: quit, reset, steer, queue a TAG or SCAN, or change the selection."""
        k = self.pg
        key = event.key
        if key in (k.K_ESCAPE, k.K_q):
            return "quit"
        if key == k.K_r:
            return "reset"
        if key in self._moves:
            self.held.add(self._moves[key])
            self._steer()
        elif key == k.K_SPACE:
            self._one_shot = A_TAG
        elif key == k.K_e:
            self._one_shot = A_SCAN
        else:
            self._select_by_key(event)
        return None

    def _select_by_key(self, event: Any) -> None:
        """Change the selection: Tab / Shift+Tab the next / previous attacker, 0 or ` all of them, 1-9 that one."""
        k = self.pg
        key = event.key
        if key == k.K_TAB:
            back = bool(getattr(event, "mod", 0) & k.KMOD_SHIFT)
            start = 0 if self.selected is None else self.selected
            self._select((start + (-1 if back else 1)) % self.n)
        elif key in (k.K_0, k.K_BACKQUOTE):
            self._select(None)
        elif k.K_1 <= key <= k.K_9 and key - k.K_1 < self.n:
            self._select(key - k.K_1)

    def _select(self, unit: int | None) -> None:
        self.selected = unit
        self.held.clear()  # keys held for the old selection do not carry over

    def _targets(self) -> list[int] | slice:
        return slice(None) if self.selected is None else [self.selected]

    def _steer(self) -> None:
        dx = ("right" in self.held) - ("left" in self.held)
        dy = ("up" in self.held) - ("down" in self.held)
        self.commands[self._targets()] = _DIRECTIONS.get((dx, dy), A_STOP)

    def action(self) -> np.ndarray:
        """This step's action: every attacker's standing command, with a pending TAG/SCAN for the selection."""
        act = self.commands.copy()
        if self._one_shot is not None:
            act[self._targets()] = self._one_shot
            self.commands[self._targets()] = A_STOP  # tag and scan stop the unit ("stop and shoot")
            self._one_shot = None
        return act

    def reset(self) -> None:
        """Forget standing commands and held keys (the selection stays)."""
        self.commands[:] = A_STOP
        self.held.clear()
        self._one_shot = None


def annotate(frame: np.ndarray, snapshot: dict[str, Any], controller: KeyboardController, attackers: list[int]) -> np.ndarray:
    """Mark the selected attacker(s) with a ring and write a one-line key hint at the bottom."""
    img = Image.fromarray(frame)
    draw = ImageDraw.Draw(img)
    h, w = frame.shape[:2]
    view = make_view(snapshot, w, h)
    chosen = attackers if controller.selected is None else [attackers[controller.selected]]
    for j in chosen:
        u = snapshot["units"][j]
        x, y = view.to_px(u["x"], u["y"])
        r = max(8.0, u["radius"] * view.scale + 6)
        draw.ellipse([x - r, y - r, x + r, y + r], outline=(250, 204, 21), width=2)
    who = "all" if controller.selected is None else f"{controller.selected + 1} {snapshot['units'][chosen[0]]['name']}"
    hint = f"unit {who} | arrows/WASD move  space TAG  e SCAN  Tab/1-9 select  r reset  Esc quit"
    font = get_font(max(10, w // 55))
    box = draw.textbbox((6, h - 6), hint, font=font, anchor="ls")
    draw.rectangle([box[0] - 3, box[1] - 3, box[2] + 3, box[3] + 3], fill=(31, 41, 55))
    draw.text((6, h - 6), hint, fill=(243, 244, 246), font=font, anchor="ls")
    return np.asarray(img)


@dataclass
class PlaySummary:
    """What happened in a manual session."""

    frames: int = 0
    episodes: list[dict[str, Any]] = field(default_factory=list)
    quit: bool = False
    last_snapshot: dict[str, Any] | None = None


def play(
    env: MissionEnv,
    seed: int | None = None,
    fps: float = 8.0,
    width: int = 700,
    max_frames: int | None = None,
    end_pause_s: float = 2.0,
    before_frame: Callable[[int], None] | None = None,
    window: HumanWindow | None = None,
    echo: Callable[[str], None] | None = print,
) -> PlaySummary:
    """Run the keyboard-controlled game loop until Esc, the window closes, or ``max_frames``.

    One env step per frame. When an episode ends its outcome is shown for ``end_pause_s`` seconds,
    then a new episode starts (``r`` restarts at any time).

    :param env: a Mission Gym env
    :param seed: seed of the first episode (later ones continue the env's generator)
    :param fps: env steps (frames) per second; the game runs in real time at 4
    :param width: window width and height in pixels
    :param max_frames: stop after this many frames (for tests and demos)
    :param end_pause_s: seconds to show an episode's outcome before the next starts
    :param before_frame: called with the frame number before each frame's events are read (tests post key events here)
    :param window: the window to draw in (default: a new :class:`HumanWindow`)
    :param echo: where episode results are reported (None: nowhere)
    """
    pg = require_pygame("play_manual")
    core = env.unwrapped.core
    attackers = [j for j, u in enumerate(core.snapshot(0)["units"]) if u["team"] == "attacker"]
    controller = KeyboardController(len(attackers), pg)
    window = window or HumanWindow(title="Mission Gym: manual play", fps=fps)
    summary = PlaySummary()
    env.reset(seed=seed)
    episode_return, pause = 0.0, 0
    try:
        while max_frames is None or summary.frames < max_frames:
            if before_frame is not None:
                before_frame(summary.frames)
            snap = core.snapshot(0)
            summary.last_snapshot = snap
            events = window.show(annotate(render_frame(snap, width, width), snap, controller, attackers))
            summary.frames += 1
            command = None
            for event in events:
                command = controller.handle(event) or command
            if command == "quit" or window.closed:
                summary.quit = True
                break
            if command == "reset" or (pause and (pause := pause - 1) == 0):
                env.reset()
                controller.reset()
                episode_return, pause = 0.0, 0
                continue
            if pause:
                continue
            _, reward, terminated, truncated, info = env.step(controller.action())
            episode_return += reward
            if terminated or truncated:
                result = {"outcome": info.get("outcome"), "return": episode_return, "sim_time": core.snapshot(0)["time"]}
                summary.episodes.append(result)
                if echo is not None:
                    echo(f"episode {len(summary.episodes)}: {result['outcome']}, return {episode_return:.1f}")
                pause = max(1, int(round(end_pause_s * fps)))
    finally:
        window.close()
    return summary
