"""The native stepper (``_core.EnvStepper``) stores exactly what the Python loop stores.

The runner hands the common case of a step result (a numpy observation of the field's dtype
and shape, a ``float`` reward, ``bool`` flags) to Rust and checks everything else in Python.
Both paths must give the same batch, whichever envs take which path at which step.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from pycollect import Collector, ConfigError, EnvOutputError, _core
from pycollect.testing.envs import CountingEnv

pytestmark = pytest.mark.timeout(120)


class LooseTypesEnv(CountingEnv):
    """A CountingEnv whose results, at some steps, are not the exact types (numpy scalars, lists).

    Args:
        every: Steps that return loose types: those whose count is a multiple of ``every``
            (1: every step; 0: never).
    """

    def __init__(self, length: int = 5, every: int = 1) -> None:
        super().__init__(length)
        self.every = every
        self._steps = 0

    def step(self, action: int) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        obs, reward, term, trunc, info = super().step(action)
        self._steps += 1
        if self.every and self._steps % self.every == 0:
            return obs.tolist(), np.float64(reward), np.bool_(term), np.bool_(trunc), info
        return obs, reward, term, trunc, info


def _batches(every: int, **kwargs: Any) -> list[Any]:
    env_kwargs = {"length": 5, "every": every}
    with Collector(LooseTypesEnv, seed=5, frames_per_batch=24, envs_per_worker=3, env_kwargs=env_kwargs, **kwargs) as c:
        return [c.next_batch() for _ in range(3)]


@pytest.mark.parametrize("every", [1, 2, 3])
@pytest.mark.parametrize("limit", [None, 3])
def test_native_and_python_paths_store_the_same_batches(every: int, limit: int | None) -> None:
    exact = _batches(0, max_frames_per_traj=limit)
    mixed = _batches(every, max_frames_per_traj=limit)
    for a, b in zip(exact, mixed, strict=True):
        assert set(a.keys(True, True)) == set(b.keys(True, True))
        for key in a.keys(True, True):
            assert torch.equal(a[key], b[key]), key


def test_a_limit_truncates_in_the_native_path() -> None:
    (batch, *_) = _batches(0, max_frames_per_traj=3)
    truncated = batch["next", "truncated"][0, :, 0].tolist()
    assert truncated == [False, False, True] * 2 + [False, False]
    assert batch["next", "observation"][0, :, 1].tolist() == [1, 2, 3] * 2 + [1, 2]


class WrongShapeEnv(CountingEnv):
    """Returns an observation of the wrong shape at step 3: the Python checks must name it."""

    def step(self, action: int) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, term, trunc, info = super().step(action)
        if self._t == 3:
            return np.zeros(3, np.float32), reward, term, trunc, info
        return obs, reward, term, trunc, info


def test_an_odd_result_still_gets_the_python_checks() -> None:
    with (
        Collector(WrongShapeEnv, frames_per_batch=8, env_kwargs={"length": 9}) as collector,
        pytest.raises(EnvOutputError, match="shape"),
    ):
        collector.next_batch()


def _flags(steps: int, envs: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.zeros((steps, envs)), np.zeros((steps, envs), bool), np.zeros((steps, envs), bool)


def test_the_stepper_refuses_arrays_it_cannot_write() -> None:
    env = gym.make("CartPole-v1")
    steps, frames = [env.step], np.zeros((1, 4, 4), np.float32)
    frame = ([4], "f", 4)
    with pytest.raises(ConfigError, match="frames must be a writable C-contiguous"):
        _core.EnvStepper(steps, frames[:, ::2], *frame, 2, np.ndarray, *_flags(2, 1), [0], None)
    with pytest.raises(ConfigError, match="frames holds 64 bytes, not 1 envs x 3 steps"):
        _core.EnvStepper(steps, frames, *frame, 3, np.ndarray, *_flags(3, 1), [0], None)
    rewards, terminated, truncated = _flags(4, 1)
    with pytest.raises(ConfigError, match="rewards must have buffer format"):
        _core.EnvStepper(
            steps, frames, *frame, 4, np.ndarray, rewards.astype(np.float32), terminated, truncated, [0], None
        )
    terminated.flags.writeable = False
    with pytest.raises(ConfigError, match="terminated must be a writable C-contiguous"):
        _core.EnvStepper(steps, frames, *frame, 4, np.ndarray, rewards, terminated, truncated, [0], None)
    env.close()


def test_the_stepper_stores_each_result_where_it_belongs() -> None:
    envs = [CountingEnv(length=2) for _ in range(2)]
    for env in envs:
        env.reset(seed=0)
    frames = np.full((2, 3, 2), -1.0, np.float32)
    rewards, terminated, truncated = _flags(3, 2)
    counts = [0, 1]
    stepper = _core.EnvStepper(
        [env.step for env in envs], frames, [2], "f", 4, 3, np.ndarray, rewards, terminated, truncated, counts, 2
    )
    finished: list[int] = []
    assert stepper.step(1, np.zeros(2, np.int64), finished, [None] * 2) == []
    assert frames[:, 1, 1].tolist() == [1.0, 1.0] and (frames[:, [0, 2]] == -1).all()
    assert rewards[1].tolist() == [1.0, 1.0] and not rewards[[0, 2]].any()
    assert counts == [1, 2] and finished == [1]  # env 1 reached the limit of 2 steps
    assert truncated[1].tolist() == [False, True] and not terminated.any()
    assert stepper.step(2, np.zeros(2, np.int64), finished, [None] * 2) == []
    assert terminated[2].tolist() == [True, True] and finished == [1, 0, 1]
    with pytest.raises(ConfigError, match="step 3 is outside a rollout of 3 steps"):
        stepper.step(3, np.zeros(2, np.int64), finished, [None] * 2)
