"""``Collector.env_call``, ``env_get_attr``, ``env_set_attr`` and ``env_apply`` on a running collector.

On every engine that reaches its envs (``inprocess``, ``workers``, ``central``): results in the
order of the indices named, a change of an env's attribute showing in the batches after it (at
once where the envs step in the trainer's thread; within the rollouts a worker's ring already
holds), errors raised in the trainer with the workers going on, bad indices and arguments refused
before anything is sent, a restarted worker answering in its predecessor's place, and the
``device`` engine refusing by name.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from pycollect import Collector, CollectorClosedError, ConfigError, WorkerCrashedError
from pycollect.config import SLOTS_PER_WORKER
from pycollect.testing.device_envs import TorchCartPole
from pycollect.testing.envs import CountingEnv
from pycollect.testing.waiting import wait_until

pytestmark = pytest.mark.timeout(120)

K = 2  # envs per worker


class ScaledEnv(CountingEnv):
    """A :class:`CountingEnv` whose reward is its ``scale``; it can be told to fail, and holds a lock."""

    def __init__(self) -> None:
        super().__init__(length=1000)
        self.scale = 1.0
        self.lock = threading.Lock()  # an attribute that cannot be pickled

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        obs, _, terminated, truncated, info = super().step(action)
        return obs, self.scale, terminated, truncated, info

    def where(self, tag: str, *, twice: bool = False) -> tuple[str, int]:
        return (tag * 2 if twice else tag), os.getpid()

    def fail(self) -> None:
        raise ValueError(f"env told to fail in process {os.getpid()}")


def _collector(engine: str, **kwargs: Any) -> Collector:
    workers = 0 if engine == "inprocess" else 2
    return Collector(
        ScaledEnv,
        None,
        frames_per_batch=K * max(workers, 1) * 4,
        total_frames=-1,
        num_workers=workers,
        envs_per_worker=K,
        engine=engine,
        seed=0,
        **kwargs,
    )


@pytest.fixture(params=["inprocess", "workers", "central"])
def collector(request: pytest.FixtureRequest) -> Iterator[Collector]:
    c = _collector(request.param)
    try:
        c.next_batch()
        yield c
    finally:
        c.shutdown()


def _num_envs(c: Collector) -> int:
    return max(c.num_workers, 1) * c.envs_per_worker


def test_results_come_in_the_order_of_the_indices_from_where_each_env_lives(collector: Collector) -> None:
    n = _num_envs(collector)
    assert collector.env_get_attr("scale") == [1.0] * n
    assert collector.env_call("where", "x", indices=[n - 1, 0])[0][0] == "x"
    assert [tag for tag, _ in collector.env_call("where", "y", twice=True)] == ["yy"] * n
    pids = collector.env_apply(lambda env: os.getpid())
    if collector.num_workers:  # env i lives in worker i // K, a process of its own
        assert len({pids[w * K] for w in range(collector.num_workers)}) == collector.num_workers
        assert all(pids[i] == pids[(i // K) * K] != os.getpid() for i in range(n))
    else:
        assert pids == [os.getpid()] * n
    assert collector.env_call("length") == [1000] * n  # an attribute that is not callable: its value
    assert collector.env_get_attr("scale", indices=[]) == []


def test_a_value_set_shows_in_the_batches_after_it(collector: Collector) -> None:
    n = _num_envs(collector)
    collector.env_set_attr("scale", 5.0)
    assert collector.env_get_attr("scale") == [5.0] * n
    # In the trainer's thread the next batch is stepped after the call; a worker's ring may
    # still hold the rollouts it made before it (its slots, the one it was stepping included).
    ahead = SLOTS_PER_WORKER if collector.num_workers and collector.config.engine.name == "workers" else 0
    rewards = [collector.next_batch()["next", "reward"] for _ in range(ahead + 2)]
    assert (rewards[ahead] == 5.0).all() and (rewards[-1] == 5.0).all()
    assert all(((r == 1.0) | (r == 5.0)).all() for r in rewards)
    collector.env_set_attr("scale", [float(i) for i in range(n)])  # one value per env
    assert collector.env_get_attr("scale") == [float(i) for i in range(n)]
    rows = [collector.next_batch()["next", "reward"] for _ in range(ahead + 1)][-1]
    assert [float(rows[i].unique()) for i in range(n)] == [float(i) for i in range(n)]
    collector.env_set_attr("scale", 7.0, indices=[n - 1])
    assert collector.env_get_attr("scale", indices=[n - 1, 0]) == [7.0, 0.0]


def test_an_env_error_is_raised_here_and_the_workers_go_on(collector: Collector) -> None:
    with pytest.raises(ValueError, match="env told to fail"):
        collector.env_call("fail", indices=[0])
    with pytest.raises(AttributeError, match="no_such_attribute"):
        collector.env_get_attr("no_such_attribute")
    collector.next_batch()
    assert collector.env_get_attr("scale", indices=[0]) == [1.0]
    assert collector.stats().restarts == 0


def test_bad_input_is_refused_before_anything_is_sent(collector: Collector) -> None:
    n = _num_envs(collector)
    with pytest.raises(ConfigError, match=str(n)):
        collector.env_get_attr("scale", indices=[n])
    with pytest.raises(ConfigError, match="3 values for 2 envs"):
        collector.env_set_attr("scale", [1.0, 2.0, 3.0], indices=[0, 1])
    if collector.num_workers:  # only what goes to a worker is pickled
        with pytest.raises(ConfigError, match="cannot be pickled"):
            collector.env_call("where", threading.Lock())
        with pytest.raises(Exception, match="cannot be pickled"):
            collector.env_get_attr("lock")  # the answer: the worker says so, and serves on
    collector.next_batch()
    assert collector.env_get_attr("scale") == [1.0] * n


def test_a_shut_down_collector_refuses() -> None:
    c = _collector("workers")
    c.shutdown()
    with pytest.raises(CollectorClosedError):
        c.env_get_attr("scale")


def test_a_worker_that_is_waiting_for_a_free_slot_serves_a_call() -> None:
    # Nothing is consumed: every worker's ring fills and its worker waits for a free slot.
    with _collector("workers") as c:
        c.next_batch()
        wait_until(
            lambda: all(consumer.available() == SLOTS_PER_WORKER for consumer in c._engine.consumers),
            timeout_s=60,
            what="every worker's ring to fill",
        )
        assert c.env_get_attr("scale") == [1.0] * _num_envs(c)
        c.env_set_attr("scale", 3.0)
        batches = [c.next_batch()["next", "reward"] for _ in range(SLOTS_PER_WORKER + 1)]
    assert (batches[-1] == 3.0).all()
    assert all((b == 1.0).all() for b in batches[:SLOTS_PER_WORKER])  # made before the call


def test_a_restarted_worker_answers_in_its_predecessors_place() -> None:
    with _collector("workers") as c:
        c.next_batch()
        before = c.env_apply(lambda env: os.getpid())
        victim = c.stats().workers[1].pid
        os.kill(victim, signal.SIGKILL)
        # Posted to whichever generation is alive: the dead one's request goes again to the new one.
        pids = c.env_apply(lambda env: os.getpid())
        assert pids[:K] == before[:K]
        assert victim not in pids[K:] and pids[K] == pids[K + 1]
        wait_until(lambda: c.stats().restarts == 1, timeout_s=60, what="the restart to be counted")
        assert c.env_get_attr("scale") == [1.0] * _num_envs(c)  # built afresh: a value set before is gone
        c.next_batch()


def test_a_worker_given_up_on_ends_the_call_with_its_error() -> None:
    with _collector("workers", restart="never") as c:
        c.next_batch()
        os.kill(c.stats().workers[0].pid, signal.SIGKILL)
        with pytest.raises(WorkerCrashedError, match="worker 0"):
            c.env_get_attr("scale")


def test_the_device_engine_refuses_by_name() -> None:
    kwargs = {"num_envs": 4, "device": "cpu"}
    c = Collector(TorchCartPole, frames_per_batch=16, envs_per_worker=4, engine="device", env_kwargs=kwargs)
    with c, pytest.raises(ConfigError, match="engine='device'.*env_call"):
        c.env_call("step_count")


def test_an_engine_that_does_not_reach_its_envs_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    # What a plugin's engine that keeps Engine.env_calls' default (None) gives.
    with _collector("inprocess") as c:
        monkeypatch.setattr(c._engine, "env_calls", lambda: None)
        with pytest.raises(ConfigError, match="engine 'inprocess' does not reach its envs"):
            c.env_get_attr("scale")
