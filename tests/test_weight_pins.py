"""A worker killed while it reads the weights store never keeps a buffer pinned.

The supervisor clears a worker's pin as soon as the generation that held it has been reaped,
before any backoff and before its restart, so the trainer can publish right away even when
every reader died holding a buffer and no restart is due for a long time.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pycollect import _core
from pycollect.config import SupervisionConfig
from pycollect.testing import wait_until

CHILD = Path(__file__).with_name("transport_child.py")

# Restarts come only after 30 s, long after the test has published.
SUPERVISION: dict[str, Any] = {
    "env": {},
    "pass_fds": [],
    "supervision": SupervisionConfig(
        restart="permanent",
        max_restarts=5,
        restart_window_s=60.0,
        backoff_initial_s=30.0,
        backoff_max_s=60.0,
        startup_timeout_s=60.0,
        heartbeat_timeout_s=60.0,
        check_interval_s=0.05,
        shutdown_grace_s=1.0,
        term_timeout_s=1.0,
    ),
}


def _wait_for_event(supervisor: _core.Supervisor, kind: str, worker: int) -> _core.WorkerEvent:
    found: list[_core.WorkerEvent] = []

    def arrived() -> bool:
        event = supervisor.next_event(0.05)
        if event is not None and event.kind == kind and event.worker == worker:
            found.append(event)
        return bool(found)

    wait_until(arrived, timeout_s=60, what=f"a {kind!r} event of worker {worker}")
    return found[0]


def _kill_while_reading(segment: _core.Segment, supervisor: _core.Supervisor, worker: int) -> None:
    """SIGKILL ``worker`` once it is in its read loop, and wait until it has been reaped.

    Its copy-out of the 16 MiB weights is nearly all of its time, so the kill almost always
    lands while it holds a pin (on the buffer of the latest version when it started reading).
    """
    control = segment.worker_control(worker)
    before = control.heartbeats  # at least two whole reads started after this
    wait_until(lambda: control.heartbeats >= before + 3, timeout_s=60, what=f"worker {worker} to read", poll_s=0.001)
    pid = supervisor.stats()[worker].pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    exited = _wait_for_event(supervisor, "exited", worker)
    assert exited.exit is not None and exited.exit.signal == signal.SIGKILL, exited


@pytest.mark.timeout(180)
def test_publishing_succeeds_once_readers_killed_while_pinning_are_reaped() -> None:
    nbytes = 16 << 20
    data = np.zeros(nbytes, np.uint8)
    segment = _core.Segment.create(
        [("x", "uint8", ())],
        n_workers=2,
        envs_per_worker=1,
        steps=1,
        slots_per_worker=2,
        weights_capacity=nbytes,
        weights_buffers=3,
        backing="auto",
    )
    writer = segment.weights_writer()
    writer.publish(data, timeout_s=1.0)  # version 1 in buffer 0, before the readers start
    supervisor = _core.Supervisor(segment, [sys.executable, str(CHILD), "supervised-weights-spin"], **SUPERVISION)
    try:
        _kill_while_reading(segment, supervisor, 0)  # dies pinning buffer 0 (version 1)
        writer.publish(data, timeout_s=1.0)  # version 2 in buffer 1
        _kill_while_reading(segment, supervisor, 1)  # dies pinning buffer 1 (version 2)
        for worker in range(2):
            assert supervisor.stats()[worker].state == "backingoff"
        # Version 3 takes buffer 2; versions 4 and 5 need the buffers the dead readers held.
        versions = [writer.publish(data, timeout_s=1.0) for _ in range(3)]
        assert versions == [3, 4, 5]
        # Nothing was restarted for it: the pins went with the reaps.
        assert [s.generation for s in supervisor.stats()] == [1, 1]
    finally:
        endings = supervisor.shutdown(grace_s=1.0)
    assert [e.ending for e in endings] == ["not_running", "not_running"], endings
