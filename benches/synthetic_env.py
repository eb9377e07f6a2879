"""A cheap gymnasium env with Atari-sized observations, for measuring how collectors move bytes.

``Synthetic84x84x4`` returns ``uint8`` observations of shape ``(4, 84, 84)`` (28 KiB, a stack of
four 84x84 frames) from a small set of preallocated frames, so a step costs a few microseconds
and nearly all the time a collector spends on it goes to moving observations around. Episodes
last a fixed number of steps (1000 by default) and end truncated; the reward is 1.0 when the
action matches a fixed pattern, so results depend on the actions.

Importing this module registers the id ``Synthetic84x84x4-v0`` with gymnasium, so
``gymnasium.make("Synthetic84x84x4-v0")`` and TorchRL's ``GymEnv("Synthetic84x84x4-v0")``
work wherever the module has been imported (see :func:`make_torchrl_env`).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

ENV_ID = "Synthetic84x84x4-v0"
OBS_SHAPE = (4, 84, 84)
_FRAMES = 16  # distinct preallocated observations cycled through


class Synthetic84x84x4(gym.Env[np.ndarray, np.int64]):
    """Box(0, 255, (4, 84, 84), uint8) observations, Discrete(4) actions, fixed-length episodes.

    Args:
        episode_length: Steps per episode; the last one is truncated.
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 (gymnasium's own convention)

    def __init__(self, episode_length: int = 1000) -> None:
        self.observation_space = gym.spaces.Box(0, 255, OBS_SHAPE, np.uint8)
        self.action_space = gym.spaces.Discrete(4)
        self.episode_length = episode_length
        frames = np.random.default_rng(0).integers(0, 256, (_FRAMES, *OBS_SHAPE), dtype=np.uint8)
        self._frames = [frames[i] for i in range(_FRAMES)]
        self._t = 0
        self._offset = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        """Start an episode at a seed-dependent frame."""
        super().reset(seed=seed)
        self._t = 0
        self._offset = int(self.np_random.integers(_FRAMES))
        return self._frames[self._offset], {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        """Advance one step: the next preallocated frame, reward 1.0 if ``action == t % 4``."""
        self._t += 1
        reward = 1.0 if int(action) == self._t & 3 else 0.0
        obs = self._frames[(self._offset + self._t) % _FRAMES]
        return obs, reward, False, self._t >= self.episode_length, {}


def make_env() -> gym.Env:
    """``gymnasium.make(ENV_ID)``: a picklable factory (pycollect workers import it by name)."""
    return gym.make(ENV_ID)


def make_torchrl_env() -> Any:
    """The same env wrapped by TorchRL's ``GymEnv`` (registers the id in the calling process)."""
    from torchrl.envs import GymEnv

    _register()
    return GymEnv(ENV_ID)


def _register() -> None:
    if ENV_ID not in gym.registry:
        gym.register(ENV_ID, entry_point=Synthetic84x84x4)


_register()
