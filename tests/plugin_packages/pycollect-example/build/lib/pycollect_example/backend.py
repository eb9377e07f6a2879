"""The ``example`` env backend: ``"example:walk-N"`` is a random walk that ends at +N or -N."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from pycollect import UnknownEnvError
from pycollect.envs import EnvBackend


class Walk(gym.Env):
    """Position on the integers; action 0 steps left, 1 right; terminates at +bound or -bound."""

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self.observation_space = gym.spaces.Box(-bound, bound, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._position = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._position = int(self.np_random.integers(-self.bound + 1, self.bound))
        return np.array([self._position], np.float32), {}

    def step(self, action):
        self._position += 1 if int(action) == 1 else -1
        terminated = abs(self._position) >= self.bound
        return np.array([self._position], np.float32), float(self._position), terminated, False, {}


def _bound(target: str) -> int:
    name, _, bound = target.partition("-")
    if name != "walk" or not bound.isdigit() or int(bound) < 1:
        raise UnknownEnvError(f"unknown example env {target!r}; the example backend builds 'walk-N' with N >= 1")
    return int(bound)


class WalkBackend(EnvBackend):
    name = "example"

    def check(self, target, env_kwargs):
        _bound(target)

    def make(self, target, env_kwargs):
        return Walk(_bound(target), **env_kwargs)
