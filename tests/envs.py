"""Small environments with known behaviour, used by the tests."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class CountingEnv(gym.Env[np.ndarray, int]):
    """Observation = [episode id seed offset, step in episode]; reward = step index; the
    episode terminates after ``length`` steps. Fully deterministic given the reset seed."""

    def __init__(self, length: int = 5, n_actions: int = 3) -> None:
        self.length = length
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(n_actions)
        self._base = 0.0
        self._t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._base = float(self.np_random.integers(0, 1000))
        self._t = 0
        return self._obs(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        assert self.action_space.contains(action), action
        self._t += 1
        return self._obs(), float(self._t), self._t >= self.length, False, {}

    def _obs(self) -> np.ndarray:
        return np.array([self._base, self._t], np.float32)


class DictObsEnv(gym.Env[dict, np.ndarray]):
    """Dict observation (with a nested Dict) and a MultiDiscrete action."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Dict(
            {
                "position": gym.spaces.Box(-1, 1, (3,), np.float32),
                "sensors": gym.spaces.Dict({"touch": gym.spaces.MultiBinary(4), "mode": gym.spaces.Discrete(5)}),
            }
        )
        self.action_space = gym.spaces.MultiDiscrete([2, 3])
        self._t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        self._t = 0
        return self._obs(), {}

    def step(self, action: np.ndarray) -> tuple[dict, float, bool, bool, dict]:
        assert self.action_space.contains(np.asarray(action)), action
        self._t += 1
        return self._obs(), float(np.sum(action)), False, self._t >= 7, {}

    def _obs(self) -> dict:
        return {
            "position": np.full(3, self._t / 10, np.float32),
            "sensors": {"touch": np.array([1, 0, 1, self._t % 2], np.int8), "mode": self._t % 5},
        }


class MultiBinaryActionEnv(gym.Env[np.ndarray, np.ndarray]):
    """A MultiBinary action; observation is the last action."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(0, 1, (4,), np.float32)
        self.action_space = gym.spaces.MultiBinary(4)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        return np.zeros(4, np.float32), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        assert self.action_space.contains(np.asarray(action, np.int8)), action
        return np.asarray(action, np.float32), 1.0, False, False, {}


class TupleObsEnv(gym.Env[tuple, int]):
    """An observation space pycollect does not support."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Discrete(3)))
        self.action_space = gym.spaces.Discrete(2)


def make_counting(length: int = 5) -> CountingEnv:
    """Factory used through the callable backend's import-path form."""
    return CountingEnv(length=length)


class RaisingEnv(CountingEnv):
    """Raises ``ZeroDivisionError("boom at step N")`` on step ``fail_at`` of an episode; with
    ``only_generation`` only in that worker generation (so a restarted worker recovers)."""

    def __init__(self, fail_at: int = 7, only_generation: int | None = None) -> None:
        import os

        super().__init__(length=1000)
        self.fail_at = fail_at
        generation = int(os.environ.get("PYCOLLECT_GENERATION", "1"))
        self.armed = only_generation is None or generation == only_generation

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        if self.armed and self._t + 1 == self.fail_at:
            raise ZeroDivisionError(f"boom at step {self.fail_at}")
        return super().step(action)


class HangingEnv(CountingEnv):
    """Hangs forever (a stuck simulator) on step ``hang_at``."""

    def __init__(self, hang_at: int = 5) -> None:
        super().__init__(length=1000)
        self.hang_at = hang_at

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        if self._t + 1 == self.hang_at:
            import time

            while True:
                time.sleep(1)
        return super().step(action)


def _echo_server(conn: Any) -> None:
    while True:
        message = conn.recv()
        if message is None:
            return
        conn.send(message + 1)


class ChildProcessEnv(CountingEnv):
    """Steps through a child process of its own (like a simulator server): the observation's
    step counter comes back from a ``multiprocessing`` child. Daemonic workers could not start it."""

    def __init__(self) -> None:
        import multiprocessing as mp

        super().__init__(length=4)
        ctx = mp.get_context("spawn")
        self._conn, child_conn = ctx.Pipe()
        self._server = ctx.Process(target=_echo_server, args=(child_conn,))
        self._server.start()

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = super().step(action)
        self._conn.send(int(obs[1]) - 1)
        obs[1] = self._conn.recv()
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        self._conn.send(None)
        self._server.join(timeout=10)
