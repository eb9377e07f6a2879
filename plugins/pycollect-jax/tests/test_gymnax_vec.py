"""``make_vec("gymnax:CartPole-v1", ...)``: a gymnasium vector env of gymnax sub-envs, in workers or not."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnax_helpers import fell, is_reset

import pycollect
from pycollect import ConfigError

SPEC = "gymnax:CartPole-v1"
N = 8


def _run(num_workers: int, steps: int = 60) -> list[tuple[Any, ...]]:
    env = pycollect.make_vec(SPEC, N, num_workers=num_workers, autoreset_mode="same_step")
    try:
        assert env.single_observation_space == gym.spaces.Box(
            np.array([-4.8, -np.inf, -0.41887903, -np.inf], np.float32),
            np.array([4.8, np.inf, 0.41887903, np.inf], np.float32),
        )
        assert env.single_action_space == gym.spaces.Discrete(2)
        obs, _ = env.reset(seed=0)
        assert obs.shape == (N, 4) and obs.dtype == np.float32 and is_reset(obs).all()
        rng = np.random.default_rng(0)
        out = []
        for _ in range(steps):
            obs, reward, terminated, truncated, infos = env.step(rng.integers(0, 2, N))
            out.append((obs, reward, terminated, truncated, infos))
        # where the sub-envs run: JAX configured for a worker there (pycollect_jax.configure_jax), or left alone
        for runtime in env.get_attr("jax_runtime"):
            assert runtime["configured"] is (num_workers > 0), runtime
            assert runtime["async_dispatch"] is (num_workers == 0), runtime
        return out
    finally:
        env.close()


def _check(steps: list[tuple[Any, ...]]) -> None:
    finals = 0
    for obs, reward, terminated, truncated, infos in steps:
        assert obs.shape == (N, 4) and obs.dtype == np.float32
        assert reward.dtype == np.float64 or reward.dtype == np.float32
        assert terminated.dtype == truncated.dtype == np.bool_
        assert not truncated.any()
        ended = terminated | truncated
        if not ended.any():
            assert "final_obs" not in infos
            continue
        np.testing.assert_array_equal(infos["_final_obs"], ended)
        for i in np.flatnonzero(ended):
            assert fell(infos["final_obs"][i]), i  # the final observation: the pole fell
            finals += 1
        assert is_reset(obs[ended]).all()  # and the observation is the next episode's first
    assert finals > 0


def _assert_same(a: list[tuple[Any, ...]], b: list[tuple[Any, ...]]) -> None:
    for x, y in zip(a, b, strict=True):
        for u, v in zip(x[:4], y[:4], strict=True):
            np.testing.assert_array_equal(u, v)


@pytest.mark.timeout(240)
def test_two_workers_step_and_final_observations_appear() -> None:
    a, b = _run(2), _run(2)
    _check(a)
    _assert_same(a, b)  # the same seed: the same steps
    # sub-env i is seeded alike wherever it runs: in-process, the same steps again
    in_process = _run(0)
    _check(in_process)
    _assert_same(a, in_process)


def test_next_step_mode_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="same_step"):
        pycollect.make_vec(SPEC, 4, num_workers=0)
