"""An Atari-shaped env that needs nothing but numpy, for GPU checks on machines without ALE.

``uint8 [4, 84, 84]`` observations (a frame stack: each step shifts the stack and draws one new
84x84 frame), ``Discrete(6)`` actions, episodes of 1,000 steps, reward 1 when the action equals
the step's "right" action. A step spends about as much CPU as one of ALE's Pong steps with frame
skip 4 (``work_us``, default 500 µs, busy-waited), so the balance between stepping and a policy
call is Atari's. ``benches/gpu_check.py`` uses it where ``ale-py`` is not installed; workers
build it by import path (``"callable:frames_env:make_env"``), which works because the bench puts
this directory on ``sys.path`` and workers inherit the trainer's ``sys.path``.
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np

OBS_SHAPE = (4, 84, 84)


class FramesEnv(gym.Env[np.ndarray, np.int64]):
    """Random 84x84 frames in a stack of 4, with ``work_us`` of CPU per step."""

    def __init__(self, work_us: float = 500.0, episode_steps: int = 1000) -> None:
        self.observation_space = gym.spaces.Box(0, 255, OBS_SHAPE, np.uint8)
        self.action_space = gym.spaces.Discrete(6)
        self.work_s, self.episode_steps = work_us / 1e6, episode_steps
        self._stack = np.zeros(OBS_SHAPE, np.uint8)
        self._t = 0
        self._rng = np.random.default_rng()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._rng = np.random.default_rng(seed)
        self._stack[:] = self._rng.integers(0, 256, OBS_SHAPE, np.uint8)
        self._t = 0
        return self._stack.copy(), {}

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        until = time.perf_counter() + self.work_s
        while time.perf_counter() < until:  # the emulator's share of a step
            pass
        self._stack[:-1] = self._stack[1:]
        self._stack[-1] = self._rng.integers(0, 256, OBS_SHAPE[1:], np.uint8)
        self._t += 1
        reward = float(int(action) == self._t % 6)
        return self._stack.copy(), reward, False, self._t >= self.episode_steps, {}


def make_env() -> gym.Env[np.ndarray, np.int64]:
    """A :class:`FramesEnv` with its defaults."""
    return FramesEnv()
