"""The step backends' ``indices`` and ``apply``, what ``pycollect.vector.SB3VecEnv`` stands on.

Both backends (in this process, and two worker processes of two envs each) run
``call``/``get_attr``/``set_attr``/``apply`` on the envs named, in the order named, and on no
other env; with workers, a worker none of whose envs is named gets no request at all.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from pycollect import ConfigError, TransportError
from pycollect.testing.envs import CountingEnv
from pycollect.vector import StepBackend, make_vec
from pycollect.vector.backend import check_indices

pytestmark = pytest.mark.timeout(120)


class MarkedEnv(CountingEnv):
    """Records the marks it is given, and holds a lock (which cannot be pickled)."""

    def __init__(self) -> None:
        super().__init__(length=4)
        self.marks: list[str] = []
        self.lock = threading.Lock()

    def mark(self, tag: str, *, twice: bool = False) -> tuple[str, int]:
        self.marks.extend([tag] * (2 if twice else 1))
        return tag, os.getpid()


@pytest.fixture(params=["inprocess", "workers"])
def backend(request: pytest.FixtureRequest) -> Iterator[StepBackend]:
    """Four MarkedEnvs: in this process, or in two worker processes (envs 0-1 and 2-3)."""
    workers = {"inprocess": 0, "workers": 2}[request.param]
    venv = make_vec(MarkedEnv, 4, num_workers=workers, restart="never")
    try:
        yield venv._backend
    finally:
        venv.close()


def _marks(backend: StepBackend) -> list[list[str]]:
    return backend.get_attr("marks")


def test_call_runs_on_the_envs_named_in_their_order_and_on_no_other(backend: StepBackend) -> None:
    results = backend.call("mark", ["a"], {}, indices=[3])
    assert [tag for tag, _ in results] == ["a"]
    assert _marks(backend) == [[], [], [], ["a"]]  # env 2, in the same worker as env 3, was not called
    results = backend.call("mark", ["b"], {"twice": True}, indices=[3, 0, 3])
    assert [tag for tag, _ in results] == ["b", "b", "b"]
    assert _marks(backend) == [["b", "b"], [], [], ["a", "b", "b", "b", "b"]]
    assert backend.call("mark", ["c"], {}, indices=[]) == []
    assert [tag for tag, _ in backend.call("mark", ["d"], {})] == ["d"] * 4  # None: every env, in env order


def test_get_attr_set_attr_and_apply_take_indices(backend: StepBackend) -> None:
    backend.set_attr("length", [7, 9], indices=[2, 1])
    assert backend.get_attr("length") == [4, 9, 7, 4]
    assert backend.get_attr("length", indices=[2, 2, 0]) == [7, 7, 4]
    assert backend.apply(lambda env: env.unwrapped.length * 10, indices=[1, 3]) == [90, 40]
    pids = backend.apply(lambda env: os.getpid())
    if backend.workers():  # envs 0-1 in one worker process, 2-3 in the other
        assert pids[0] == pids[1] != pids[2] == pids[3] != os.getpid()
    else:
        assert pids == [os.getpid()] * 4
    assert backend.apply(lambda env: env.mark("e"), indices=[0])[0][0] == "e"
    assert _marks(backend) == [["e"], [], [], []]


def test_a_worker_none_of_whose_envs_is_named_gets_no_request(monkeypatch: pytest.MonkeyPatch) -> None:
    venv = make_vec(MarkedEnv, 4, num_workers=2, restart="never")
    backend: Any = venv._backend
    asked: list[list[int]] = []
    requests = backend._env_requests
    exchange = requests.exchange

    def spy(command: int, payloads: dict[int, bytes], *, retry: bool) -> dict[int, Any]:
        asked.append(sorted(payloads))
        return exchange(command, payloads, retry=retry)  # type: ignore[no-any-return]

    monkeypatch.setattr(requests, "exchange", spy)
    try:
        backend.call("mark", ["x"], {}, indices=[3])
        backend.get_attr("marks", indices=[1, 0])
        backend.set_attr("length", [2], indices=[2])
        backend.apply(len, indices=[])  # nothing named: no request at all (len is never called)
        backend.get_attr("marks")
    finally:
        venv.close()
    assert asked == [[1], [0], [1], [], [0, 1]]


def test_bad_indices_are_refused_before_anything_is_sent(backend: StepBackend) -> None:
    for bad, message in [([4], "out of range"), ([-1], "out of range"), ([True], "not an int"), (["0"], "not an int")]:
        with pytest.raises(ConfigError, match=message):
            backend.call("mark", ["z"], {}, indices=bad)
        with pytest.raises(ConfigError, match=message):
            backend.apply(len, indices=bad)
    with pytest.raises(ConfigError, match="2 values for 1 envs"):
        backend.set_attr("length", [1, 2], indices=[0])
    assert _marks(backend) == [[], [], [], []]
    assert check_indices(np.array([3, 0]), 4) == [3, 0]
    assert check_indices(None, 4) is None


def test_an_attribute_that_cannot_be_pickled_is_the_callers_error_and_the_worker_serves_on() -> None:
    # Before the fix the worker failed to pickle its answer and died with its envs.
    venv = make_vec(MarkedEnv, 2, num_workers=1, restart="never")
    try:
        venv.reset(seed=0)
        with pytest.raises(TransportError, match="cannot be pickled to go to the trainer: TypeError"):
            venv.get_attr("lock")
        observations, *_ = venv.step(np.zeros(2, np.int64))  # the same worker, its envs as they were
        assert observations[:, 1].tolist() == [1.0, 1.0]
        assert venv.workers[0].generation == 1
        with pytest.raises(ConfigError, match="cannot be pickled to go to the worker processes"):
            lock = threading.Lock()
            venv._backend.apply(lambda env: lock)
    finally:
        venv.close()
