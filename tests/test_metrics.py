"""The counters behind ``stats().metrics``: what workers and the trainer count, on every engine."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

import pycollect
from pycollect import Collector, ConfigError, make_vec
from pycollect.metrics import MetricsReader, attach
from pycollect.metrics._segment import counters_segment
from pycollect.testing.envs import RaisingEnv
from pycollect.testing.policies import argmax_mlp

pytestmark = pytest.mark.timeout(120)


def _check_shares(worker: pycollect.metrics.WorkerMetrics) -> None:
    total = worker.env_share + worker.policy_share + worker.wait_share
    assert total == pytest.approx(1.0), worker


def test_workers_count_every_frame_they_make_and_the_trainer_every_frame_delivered() -> None:
    act, policy = argmax_mlp(4, 2)
    with Collector(
        env="CartPole-v1",
        policy=act,
        weights_from=policy,
        num_workers=2,
        envs_per_worker=4,
        frames_per_batch=256,
        total_frames=2560,
    ) as collector:
        for _ in collector:
            collector.update_policy_weights_()
    # After shutdown: the last reading, taken once the workers stopped (a reading of running
    # workers may see one counter before a step and the next after it).
    metrics = collector.stats().metrics
    assert metrics is not None
    assert metrics.trainer.batches == 10 and metrics.trainer.frames == 2560
    assert metrics.trainer.publishes == 10 and metrics.trainer.policy_version == 10
    assert metrics.trainer.publish_bytes == 10 * sum(p.numel() * 4 for p in policy.parameters())
    assert len(metrics.workers) == 2
    for worker in metrics.workers:
        # A worker goes on stepping (it may be rollouts ahead), never behind what was delivered of it.
        assert worker.frames >= 1280 and worker.steps * 4 == worker.frames
        assert worker.rollouts >= 10 and 128 * worker.rollouts <= worker.frames <= 128 * (worker.rollouts + 1)
        assert worker.policy_time_s > 0 and worker.env_time_s > 0
        assert worker.step_p50_s is not None and worker.step_p99_s is not None
        assert 0 < worker.step_p50_s <= worker.step_p99_s
        assert worker.weight_updates >= 1 and 1 <= worker.policy_version <= 10
        assert worker.ring_slots == 2 and worker.pid is not None and worker.restarts == 0
        _check_shares(worker)


def test_the_trainer_of_a_run_is_watched_from_its_pid_read_only() -> None:
    with Collector(env="CartPole-v1", num_workers=2, envs_per_worker=2, frames_per_batch=64, total_frames=640) as c:
        for _ in c:
            pass
        reader = attach(os.getpid())
        metrics = reader.read()
        assert metrics.pid == os.getpid() and "CartPole-v1" in metrics.description
        assert metrics.trainer.frames == 640 and len(metrics.workers) == 2
        later = c.stats().metrics
        assert later is not None  # the workers go on: the collector's own reading, taken later, is no smaller
        assert all(w.frames <= own.frames for w, own in zip(metrics.workers, later.workers, strict=True))


def test_in_process_counts_the_steps_taken_here() -> None:
    with Collector(env="CartPole-v1", envs_per_worker=4, frames_per_batch=64, total_frames=640) as collector:
        for _ in collector:
            pass
        metrics = collector.stats().metrics
    assert metrics is not None and metrics.trainer.frames == 640
    (worker,) = metrics.workers
    assert worker.frames == 640 and worker.steps == 160 and worker.rollouts == 10
    assert worker.pid == os.getpid() and worker.state == "running"


def test_metrics_false_leaves_the_rollout_loops_uncounted() -> None:
    with Collector(
        env="CartPole-v1", num_workers=1, envs_per_worker=2, frames_per_batch=64, total_frames=128, metrics=False
    ) as collector:
        for _ in collector:
            pass
        metrics = collector.stats().metrics
    assert metrics is not None and metrics.trainer.frames == 128  # the trainer counts regardless
    assert metrics.workers[0].steps == 0 and metrics.workers[0].rollouts >= 2


def test_a_restarted_worker_carries_on_its_totals() -> None:
    with Collector(
        RaisingEnv, frames_per_batch=20, num_workers=1, env_kwargs={"only_generation": 1}, max_restarts=2
    ) as collector:
        collector.next_batch()
        metrics = collector.stats().metrics
    assert metrics is not None
    (worker,) = metrics.workers
    assert worker.restarts == 1 and worker.generation == 2
    assert worker.steps >= 6 + 20  # the 6 steps of the generation that crashed still count


def test_policy_lag_key_and_max_policy_lag_drop_stale_rollouts() -> None:
    act, policy = argmax_mlp(4, 2)
    with Collector(
        env="CartPole-v1",
        policy=act,
        weights_from=policy,
        num_workers=2,
        envs_per_worker=2,
        frames_per_batch=64,
        total_frames=64 * 20,
        sync=False,
        max_policy_lag=0,
        policy_lag_key=True,
    ) as collector:
        for batch in collector:
            lag = batch["collector", "policy_lag"]
            assert torch.equal(lag, collector.policy_version - batch["policy_version"])
            assert int(lag.max()) <= 0  # nothing older than the latest weights is delivered
            collector.update_policy_weights_()
        metrics = collector.stats().metrics
    assert metrics is not None
    assert metrics.trainer.frames == 64 * 20 and metrics.trainer.batches == 20
    assert metrics.trainer.frames_dropped % 64 == 0  # whole rollouts
    assert metrics.trainer.lag_max == 0


def test_max_policy_lag_is_refused_where_nothing_can_be_dropped() -> None:
    with pytest.raises(ConfigError, match="max_policy_lag=2.*sync=False"):
        Collector(env="CartPole-v1", num_workers=1, frames_per_batch=8, max_policy_lag=2)
    with pytest.raises(ConfigError, match="max_policy_lag"):
        Collector(env="CartPole-v1", num_workers=1, frames_per_batch=8, sync=False, max_policy_lag=-1)


def test_a_vector_envs_workers_count_their_steps_natively() -> None:
    env = make_vec("CartPole-v1", num_envs=4, num_workers=2)
    try:
        env.reset(seed=0)
        for _ in range(200):
            env.step(np.zeros(4, dtype=np.int64))
        metrics = env.stats().metrics
    finally:
        env.close()
    assert metrics is not None
    assert metrics.trainer.batches == 200 and metrics.trainer.frames == 800
    assert [w.frames for w in metrics.workers] == [400, 400]
    assert all(w.steps == 200 and w.policy_time_s == 0 for w in metrics.workers)
    after = env.stats().metrics  # after close: the last figures read
    assert after is not None and after.trainer.frames == 800


def test_a_straggler_is_the_worker_far_below_the_median() -> None:
    segment = counters_segment()  # one worker block; a reader over fabricated readings of four
    reader = MetricsReader(segment.watch(), workers=1)
    from pycollect.metrics._reading import _mark_stragglers

    rows = [dict(vars(reader.read().workers[0]), worker=w, state="running") for w in range(4)]
    for row, rate in zip(rows, (100.0, 110.0, 95.0, 20.0), strict=True):
        row.pop("straggler")
        row["frames_per_s"] = rate
    marked = _mark_stragglers(rows)
    assert [w.straggler for w in marked] == [False, False, False, True]


@pytest.mark.parametrize("env", ["CartPole-v1", "gymnasium-vector:CartPole-v1"], ids=["native", "batched"])
def test_a_vector_envs_counting_can_be_turned_off(env: str) -> None:
    for metered in (True, False):
        venv = make_vec(env, num_envs=8, num_workers=2, metrics=metered)
        try:
            venv.reset(seed=0)
            for _ in range(50):
                venv.step(np.zeros(8, dtype=np.int64))
            metrics = venv.stats().metrics
        finally:
            venv.close()
        assert metrics is not None
        # A batched env's group steps in Python (no native stepper): counted all the same.
        assert [w.steps for w in metrics.workers] == ([50, 50] if metered else [0, 0])
        assert metrics.trainer.batches == (50 if metered else 0)
