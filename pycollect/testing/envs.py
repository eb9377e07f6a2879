"""Small environments with known behaviour, for tests of pycollect and of its plugins.

They live in the installed package, not in a test folder, so that spawned worker processes
can import them (``env=CountingEnv`` pickles the class by reference, and
``"callable:pycollect.testing.envs:make_counting"`` names it by path). Each is a plain
gymnasium ``Env``:

* :class:`CountingEnv`: deterministic observations ``[episode base, step]``, reward = step.
* :class:`DictObsEnv`: a nested Dict observation and a MultiDiscrete action.
* :class:`MultiBinaryActionEnv`: a MultiBinary action.
* :class:`TupleObsEnv`: an observation space the Collector refuses (Tuple).
* :class:`SpacesEnv`: any of Box, Discrete, MultiDiscrete, MultiBinary, Dict and Tuple
  observation and action spaces, short episodes of seeded lengths, infos of many types (for
  comparing vector envs with gymnasium's).
* :class:`RaisingEnv`: raises ``ZeroDivisionError`` at a given step (a crashing simulator).
* :class:`HangingEnv`: never returns from a given step (a stuck simulator).
* :class:`ExitingEnv`: ends its worker process with status 0 at a given step (a library that
  calls ``exit``).
* :class:`OrphanChildEnv`: starts a child process that only ``close()`` stops.
* :class:`ChildProcessEnv`: steps through a child process of its own (a simulator server).
* :class:`UnsaveableEnv`: an env of its own whose state pycollect cannot save (it implements
  no ``get_state``): what snapshots and crash replay refuse by name.

:class:`CountingEnv` (and the envs built on it), :class:`DictObsEnv`, :class:`MultiBinaryActionEnv`
and :class:`SpacesEnv` implement :class:`pycollect.envs.state.SnapshotEnv`: ``get_state()`` /
``set_state()`` save and restore where they are, their random stream included. A fault an env
injects is not part of its state: a restored :class:`RaisingEnv` raises at the same step,
:class:`ExitingEnv` counts the steps its process took.
"""

from __future__ import annotations

import copy
import multiprocessing as mp
import os
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from pycollect.envs.state import rng_state, set_rng_state

__all__ = [
    "ChildProcessEnv",
    "CountingEnv",
    "DictObsEnv",
    "ExitingEnv",
    "HangingEnv",
    "MultiBinaryActionEnv",
    "OrphanChildEnv",
    "RaisingEnv",
    "SpacesEnv",
    "TupleObsEnv",
    "UnsaveableEnv",
    "make_counting",
]


Info = dict[str, Any]


class _Snapshots(gym.Env[Any, Any]):
    """Saves the attributes named in :attr:`_state_attributes` and the env's random stream."""

    _state_attributes: tuple[str, ...] = ()

    def get_state(self) -> dict[str, Any]:
        """Where the env is: its step counters and its random stream (pycollect's snapshot protocol)."""
        state = {name: copy.deepcopy(getattr(self, name)) for name in self._state_attributes}
        state["np_random"] = rng_state(self._np_random)
        state["np_random_seed"] = self._np_random_seed
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`get_state`'s ``state``."""
        for name in self._state_attributes:
            setattr(self, name, copy.deepcopy(state[name]))
        self._np_random = set_rng_state(self._np_random, state["np_random"])  # type: ignore[assignment]
        self._np_random_seed = state["np_random_seed"]


class CountingEnv(_Snapshots, gym.Env[np.ndarray, Any]):
    """Observation ``[base, step]``, reward = step, termination after ``length`` steps.

    ``base`` is drawn from the reset seed, so episodes are fully deterministic given it.

    Args:
        length: Steps per episode.
        n_actions: Size of the Discrete action space (actions are checked, not used).
    """

    _state_attributes = ("_base", "_t")

    def __init__(self, length: int = 5, n_actions: int = 3) -> None:
        self.length = length
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(n_actions)
        self._base = 0.0
        self._t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, Info]:
        """Start an episode at step 0, with a base drawn from the seeded generator."""
        super().reset(seed=seed)
        self._base = float(self.np_random.integers(0, 1000))
        self._t = 0
        return self._obs(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, Info]:
        """Advance one step; terminate after ``length`` steps."""
        assert self.action_space.contains(action), action
        self._t += 1
        return self._obs(), float(self._t), self._t >= self.length, False, {}

    def _obs(self) -> np.ndarray:
        return np.array([self._base, self._t], np.float32)


class DictObsEnv(_Snapshots, gym.Env[dict[str, Any], np.ndarray]):
    """A Dict observation (with a nested Dict) and a MultiDiscrete action; truncates after 7 steps."""

    _state_attributes = ("_t",)

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Dict(
            {
                "position": gym.spaces.Box(-1, 1, (3,), np.float32),
                "sensors": gym.spaces.Dict({"touch": gym.spaces.MultiBinary(4), "mode": gym.spaces.Discrete(5)}),
            }
        )
        self.action_space = gym.spaces.MultiDiscrete([2, 3])
        self._t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict[str, Any], Info]:
        """Start an episode at step 0."""
        super().reset(seed=seed)
        self._t = 0
        return self._obs(), {}

    def step(self, action: np.ndarray) -> tuple[dict[str, Any], float, bool, bool, Info]:
        """Advance one step; the reward is the sum of the action."""
        assert self.action_space.contains(np.asarray(action)), action
        self._t += 1
        return self._obs(), float(np.sum(action)), False, self._t >= 7, {}

    def _obs(self) -> dict[str, Any]:
        return {
            "position": np.full(3, self._t / 10, np.float32),
            "sensors": {"touch": np.array([1, 0, 1, self._t % 2], np.int8), "mode": self._t % 5},
        }


class MultiBinaryActionEnv(_Snapshots, gym.Env[np.ndarray, np.ndarray]):
    """A MultiBinary action; the observation is the last action."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(0, 1, (4,), np.float32)
        self.action_space = gym.spaces.MultiBinary(4)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, Info]:
        """Start with a zero observation."""
        super().reset(seed=seed)
        return np.zeros(4, np.float32), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, Info]:
        """Echo the action as the observation."""
        assert self.action_space.contains(np.asarray(action, np.int8)), action
        return np.asarray(action, np.float32), 1.0, False, False, {}


class TupleObsEnv(gym.Env[Any, Any]):
    """An observation space pycollect does not support (a Tuple); never stepped."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Discrete(3)))
        self.action_space = gym.spaces.Discrete(2)


def _space(kind: str) -> gym.Space[Any]:
    spaces: dict[str, Callable[[], gym.Space[Any]]] = {
        "box": lambda: gym.spaces.Box(-10, 10, (3,), np.float32),
        "discrete": lambda: gym.spaces.Discrete(5, start=2),
        "multidiscrete": lambda: gym.spaces.MultiDiscrete([3, 4]),
        "multibinary": lambda: gym.spaces.MultiBinary(4),
        "dict": lambda: gym.spaces.Dict(
            {
                "position": gym.spaces.Box(-10, 10, (2,), np.float32),
                "inner": gym.spaces.Dict({"count": gym.spaces.Discrete(6), "bits": gym.spaces.MultiBinary(3)}),
            }
        ),
        "tuple": lambda: gym.spaces.Tuple((gym.spaces.Box(-10, 10, (2,), np.float64), gym.spaces.Discrete(3))),
        # Every leaf an array: the native stepper's kind of Dict and Tuple observation.
        "nested": lambda: gym.spaces.Dict(
            {
                "position": gym.spaces.Box(-10, 10, (2,), np.float32),
                "pair": gym.spaces.Tuple((gym.spaces.MultiDiscrete([5, 7]), gym.spaces.MultiBinary(3))),
            }
        ),
    }
    if kind not in spaces:
        raise ValueError(f"unknown space kind {kind!r}: one of {sorted(spaces)}")
    return spaces[kind]()


def _total(value: Any) -> float:
    """The sum of every number in a (nested) action."""
    if isinstance(value, dict):
        return sum(_total(item) for item in value.values())
    if isinstance(value, tuple):
        return sum(_total(item) for item in value)
    return float(np.sum(value))


class SpacesEnv(_Snapshots, gym.Env[Any, Any]):
    """Short deterministic episodes in spaces of a chosen kind, with infos of many types.

    Episodes last 2 to ``max_length`` steps (drawn from the seeded generator at each reset)
    and end by termination, truncation or both. The observation is built from the step count,
    a base drawn at reset and the last action, so it shows which action an env got. Step infos
    hold, on some steps only, a Python int, a numpy float32, a string, an int32 array, a nested
    dict and, at an episode's end, ``{"episode": {"r": ..., "l": ...}}``; some are empty. Reset
    infos hold the base on some episodes and the options given. Rewards are Python floats or
    numpy float32, flags Python bools or numpy bools.

    Args:
        observation: ``"box"``, ``"discrete"``, ``"multidiscrete"``, ``"multibinary"``,
            ``"dict"``, ``"tuple"`` or ``"nested"`` (a Dict holding a Tuple, every leaf an array).
        action: The same kinds, for the action space.
        max_length: The longest episode.
    """

    _state_attributes = ("_t", "_base", "_length", "_last", "_return", "last_options")

    def __init__(self, observation: str = "box", action: str = "discrete", max_length: int = 6) -> None:
        self.observation_space = _space(observation)
        self.action_space = _space(action)
        self.kind = observation
        self.max_length = max_length
        self.last_options: dict[str, Any] | None = None
        self._t, self._base, self._length, self._last, self._return = 0, 0, 1, 0.0, 0.0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, Info]:
        """Start an episode of a drawn length from a drawn base."""
        super().reset(seed=seed)
        self._base = int(self.np_random.integers(0, 100))
        self._length = int(self.np_random.integers(2, self.max_length + 1))
        self._t, self._last, self._return = 0, 0.0, 0.0
        self.last_options = options
        info: Info = {"base": self._base} if self._base % 2 == 0 else {}
        if options:
            info["options"] = dict(options)
        return self._obs(), info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, Info]:
        """Advance one step; the episode ends at its drawn length."""
        assert self.action_space.contains(action), action
        t = self._t = self._t + 1
        self._last = _total(action) % 7
        reward: Any = t + self._last / 10
        self._return += float(reward)
        if t % 2:
            reward = np.float32(reward)
        end = t >= self._length
        terminated: Any = end and self._base % 3 != 1
        truncated: Any = end and self._base % 3 != 0
        if self._base % 2:
            terminated, truncated = np.bool_(terminated), np.bool_(truncated)
        info: Info = {}
        if not (self._base % 3 == 0 and t % 2 == 0):
            info["t"] = t
            if t % 2 == 0:
                info["half"] = np.float32(t / 2)
            if t % 3 == 0:
                info["label"] = f"step {t}"
            if t % 2 == 1:
                info["pair"] = np.array([t, self._base], np.int32)
            if t % 4 == 1:
                info["nested"] = {"a": float(t), "b": bool(t % 3)}
        if end:
            info["episode"] = {"r": self._return, "l": t}
        return self._obs(), reward, terminated, truncated, info

    def _obs(self) -> Any:
        t, base, last = self._t, self._base, self._last
        parts: dict[str, Callable[[], Any]] = {
            "box": lambda: np.array([base / 10, t, last], np.float32),
            "discrete": lambda: 2 + (t + int(last)) % 5,
            "multidiscrete": lambda: np.array([t % 3, (base + int(last)) % 4], np.int64),
            "multibinary": lambda: np.array([(base + t) >> k & 1 for k in range(4)], np.int8),
            "dict": lambda: {
                "position": np.array([base / 10, last], np.float32),
                "inner": {"count": t % 6, "bits": np.array([t & 1, base & 1, int(last) & 1], np.int8)},
            },
            "tuple": lambda: (np.array([t / 10, last], np.float64), (base + t) % 3),
            "nested": lambda: {
                "position": np.array([base / 10, last], np.float32),
                "pair": (np.array([t % 5, base % 7], np.int64), np.array([t & 1, base & 1, int(last) & 1], np.int8)),
            },
        }
        return parts[self.kind]()


def make_counting(length: int = 5) -> CountingEnv:
    """A :class:`CountingEnv`, for the callable backend's import-path form."""
    return CountingEnv(length=length)


class RaisingEnv(CountingEnv):
    """Raises ``ZeroDivisionError("boom at step N")`` on step ``fail_at`` of an episode.

    Args:
        fail_at: The step of an episode that raises.
        only_generation: Raise only in this worker generation (so a restarted worker recovers).
    """

    def __init__(self, fail_at: int = 7, only_generation: int | None = None) -> None:
        super().__init__(length=1000)
        self.fail_at = fail_at
        generation = int(os.environ.get("PYCOLLECT_GENERATION", "1"))
        self.armed = only_generation is None or generation == only_generation

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, Info]:
        """Advance one step, or raise at step ``fail_at``."""
        if self.armed and self._t + 1 == self.fail_at:
            raise ZeroDivisionError(f"boom at step {self.fail_at}")
        return super().step(action)


class HangingEnv(CountingEnv):
    """Never returns from step ``hang_at`` of an episode (a stuck simulator)."""

    def __init__(self, hang_at: int = 5) -> None:
        super().__init__(length=1000)
        self.hang_at = hang_at

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, Info]:
        """Advance one step, or hang at step ``hang_at``."""
        if self._t + 1 == self.hang_at:
            while True:
                time.sleep(1)  # the simulator is stuck: what the heartbeat must catch
        return super().step(action)


def _echo_server(conn: Any) -> None:
    while True:
        message = conn.recv()
        if message is None:
            return
        conn.send(message + 1)


class ChildProcessEnv(CountingEnv):
    """Steps through a child process of its own, as a simulator server would.

    The observation's step counter comes back from a ``multiprocessing`` child, which a
    daemonic worker could not start.
    """

    def __init__(self) -> None:
        super().__init__(length=4)
        ctx = mp.get_context("spawn")
        self._conn, child_conn = ctx.Pipe()
        self._server = ctx.Process(target=_echo_server, args=(child_conn,))
        self._server.start()

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, Info]:
        """Advance one step; the step counter makes a round trip through the child."""
        obs, reward, terminated, truncated, info = super().step(action)
        self._conn.send(int(obs[1]) - 1)
        obs[1] = self._conn.recv()
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        """Stop the child process."""
        self._conn.send(None)
        self._server.join(timeout=10)


class ExitingEnv(CountingEnv):
    """Ends the process it runs in with status 0 after ``exit_at`` steps (over all episodes).

    Args:
        exit_at: How many steps to take first.
        only_worker: Exit only in this worker (by index); ``None``: in every process.
    """

    def __init__(self, exit_at: int = 20, only_worker: int | None = None) -> None:
        super().__init__(length=1000)
        self.exit_at = exit_at
        self.armed = only_worker is None or os.environ.get("PYCOLLECT_WORKER") == str(only_worker)
        self._taken = 0

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, Info]:
        """Advance one step, or end the process cleanly (as ``os._exit(0)`` does)."""
        self._taken += 1
        if self.armed and self._taken > self.exit_at:
            os._exit(0)
        return super().step(action)


class OrphanChildEnv(CountingEnv):
    """Starts a child process (``sleep``) that nothing but :meth:`close` stops.

    Unlike :class:`ChildProcessEnv`'s server, the child does not notice when its parent dies,
    so it shows whether the environment was closed in an orderly way. Its pid is
    :attr:`child_pid`, also appended to the file named by ``pid_file``, if given. It runs in
    the worker's process group (``subprocess``'s default), as most simulators' helpers do.

    Args:
        pid_file: A file to append the child's pid to.
        ignore_sigterm: The child ignores SIGTERM (only SIGKILL stops it).
    """

    def __init__(self, pid_file: str | None = None, ignore_sigterm: bool = False) -> None:
        import subprocess

        super().__init__(length=1000)
        # An ignored signal stays ignored across exec: `sleep` inherits the shell's trap.
        command = ["sh", "-c", "trap '' TERM; exec sleep 600"] if ignore_sigterm else ["sleep", "600"]
        self._child = subprocess.Popen(command)
        self.child_pid = self._child.pid
        if pid_file is not None:
            with open(pid_file, "a") as file:
                file.write(f"{self.child_pid}\n")

    def close(self) -> None:
        """Stop the child process."""
        self._child.kill()
        self._child.wait(timeout=10)


class UnsaveableEnv(gym.Env[np.ndarray, np.int64]):
    """An env of its own whose state no one knows how to save: it implements no ``get_state``.

    Observations are zeros and episodes never end; what it is for is being refused.
    """

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(0, 1, (1,))
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, Info]:
        """A zero observation."""
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, Info]:
        """A zero observation, no reward, never done."""
        return np.zeros(1, np.float32), 0.0, False, False, {}
