"""Heterogeneous pools: ``env=[...]`` or ``env_kwargs=[...]``, one entry per worker.

Worker ``w`` steps the envs of entry ``w`` (an id, a spec, a factory or a batched factory), with
the seeds it would have with one env for all, so its rows are those of a collector whose every
worker had entry ``w``; envs that would not fill one batch layout are refused by name before any
worker starts.
"""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import pycollect
from pycollect import ConfigError
from pycollect.testing.envs import CountingEnv
from pycollect.vector import make_vec

pytestmark = pytest.mark.timeout(120)

K = 2


def _batches(env: Any, engine: str = "workers", env_kwargs: Any = None, count: int = 2) -> list[Any]:
    collector = pycollect.Collector(
        env,
        None,
        frames_per_batch=2 * K * 12,
        envs_per_worker=K,
        num_workers=2,
        engine=engine,
        seed=9,
        env_kwargs=env_kwargs,
    )
    try:
        return [collector.next_batch() for _ in range(count)]
    finally:
        collector.shutdown()


@pytest.mark.parametrize("engine", ["workers", "central"])
def test_each_worker_steps_its_own_entry_with_the_seeds_it_would_have_alone(engine: str) -> None:
    short, long = functools.partial(CountingEnv, length=3), functools.partial(CountingEnv, length=7)
    pool = _batches([short, long], engine)
    alone = {0: _batches(short, engine), 1: _batches(long, engine)}
    for batch, index in ((pool, 0), (pool, 1)):
        rows = slice(index * K, (index + 1) * K)
        for ours, theirs in zip(batch, alone[index], strict=True):
            for key in ("observation", ("next", "observation"), ("next", "reward"), ("next", "done")):
                assert torch.equal(ours[key][rows], theirs[key][rows]), (engine, index, key)
    assert pool[0]["next", "done"][:K].sum() > pool[0]["next", "done"][K:].sum()  # short episodes in worker 0


def test_env_kwargs_per_worker_reach_that_worker_only() -> None:
    batch = _batches("CartPole-v1", env_kwargs=[{}, {"sutton_barto_reward": True}], count=1)[0]
    rewards = batch["next", "reward"]
    assert torch.all(rewards[:K] == 1)  # gymnasium's reward: 1 a step
    assert torch.all(rewards[K:] <= 0)  # Sutton and Barto's: 0 a step, -1 at a failure


def test_a_pool_may_mix_single_and_batched_factories() -> None:
    batched = functools.partial(
        SyncVectorEnv, [functools.partial(gym.make, "CartPole-v1")] * K, autoreset_mode=AutoresetMode.NEXT_STEP
    )
    pool = _batches([functools.partial(gym.make, "CartPole-v1"), batched], count=1)[0]
    single = _batches("CartPole-v1", count=1)[0]
    for key in ("observation", ("next", "reward"), ("next", "done")):
        assert torch.equal(pool[key], single[key]), key  # the same envs and seeds, one worker's batched


def test_envs_that_would_not_fill_one_layout_are_refused_naming_both_workers() -> None:
    with pytest.raises(ConfigError, match=r"disagree on their spaces: worker 0's env .*CartPole.* worker 1's env"):
        pycollect.Collector(["CartPole-v1", "Pendulum-v1"], None, frames_per_batch=8, num_workers=2)


def test_a_pool_of_the_wrong_length_or_without_workers_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"env is a list of 3 envs, one per worker, but num_workers=2"):
        pycollect.Collector(["CartPole-v1"] * 3, None, frames_per_batch=8, num_workers=2)
    with pytest.raises(ConfigError, match=r"env_kwargs is a list of 1 dicts, one per worker, but num_workers=2"):
        pycollect.Collector("CartPole-v1", None, frames_per_batch=8, num_workers=2, env_kwargs=[{}])
    with pytest.raises(ConfigError, match=r"one env per worker.*num_workers=0"):
        pycollect.Collector(["CartPole-v1"], None, frames_per_batch=8, num_workers=0)
    with pytest.raises(ConfigError, match=r"env_kwargs\[1\] must be a mapping"):
        pycollect.Collector("CartPole-v1", None, frames_per_batch=8, num_workers=2, env_kwargs=[{}, 3])


def test_make_vec_takes_a_pool_one_entry_per_worker() -> None:
    short, long = functools.partial(CountingEnv, length=3), functools.partial(CountingEnv, length=7)
    envs = make_vec([short, long], 2 * K, num_workers=2)
    try:
        envs.reset(seed=0)
        ended = np.zeros(2 * K, int)
        for _ in range(21):
            *_, terminated, truncated, _ = envs.step(np.zeros(2 * K, np.int64))
            ended += terminated | truncated
        assert ended[:K].tolist() == [5] * K  # episodes of 3 steps, a reset step after each (next_step)
        assert ended[K:].tolist() == [2] * K  # of 7
    finally:
        envs.close()
