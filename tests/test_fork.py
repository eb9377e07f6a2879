"""A process forked from one that holds native objects never acts on the parent's share of them.

``os.fork()`` copies every native handle into the child. The supervisor thread, the worker
processes and the segment's lifetime belong to the parent: in the child, ``Supervisor.shutdown``
returns an empty report and touches nothing, dropping a supervisor or a segment does nothing
(no teardown, no unlink), ``Segment.shutdown`` sets no flag, and dropping a lease gives no slot
back. The parent's workers keep running, and it shuts them down as usual.
"""

from __future__ import annotations

import gc
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import pytest

from pycollect import _core
from pycollect.config import SupervisionConfig
from pycollect.testing import wait_until

CHILD = Path(__file__).with_name("transport_child.py")

SUPERVISION: dict[str, Any] = {
    "env": {},
    "pass_fds": [],
    "supervision": SupervisionConfig(
        restart="never",
        max_restarts=0,
        restart_window_s=60.0,
        backoff_initial_s=0.1,
        backoff_max_s=1.0,
        startup_timeout_s=60.0,
        heartbeat_timeout_s=60.0,
        check_interval_s=0.05,
        shutdown_grace_s=5.0,
        term_timeout_s=1.0,
    ),
}


Backing = Literal["auto", "memfd", "named"]


def _segment(backing: Backing, n_workers: int = 2) -> _core.Segment:
    return _core.Segment.create(
        [("x", "float32", (2,))],
        n_workers=n_workers,
        envs_per_worker=1,
        steps=1,
        slots_per_worker=2,
        weights_capacity=64,
        weights_buffers=3,
        backing=backing,
    )


def _in_fork(body: Callable[[], bool]) -> int:
    """Run ``body`` in a forked child that leaves with ``os._exit``; return its exit code.

    The child exits 0 when ``body`` returns True, 4 when it returns False, and 3 when it
    raises (the traceback goes to stderr).
    """
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        status = 3
        try:
            status = 0 if body() else 4
        except BaseException:
            traceback.print_exc()
            sys.stderr.flush()
        finally:
            os._exit(status)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _alive(pid: int) -> bool:
    """Present and not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backing", ["memfd", "named"])
def test_a_forked_child_neither_stops_nor_unlinks_what_its_parent_supervises(backing: Backing) -> None:
    segment = _segment(backing)
    name = segment.name
    supervisor = _core.Supervisor(segment, [sys.executable, str(CHILD), "idle"], **SUPERVISION)
    try:
        controls = [segment.worker_control(worker) for worker in range(2)]
        wait_until(lambda: all(c.heartbeats > 0 for c in controls), timeout_s=60, what="both workers to beat")
        pids = [stats.pid for stats in supervisor.stats()]
        assert all(pid is not None and _alive(pid) for pid in pids), pids

        def child() -> bool:
            nonlocal supervisor, segment
            report = supervisor.shutdown(grace_s=1.0)
            again = supervisor.shutdown(grace_s=1.0)
            segment.shutdown()
            del supervisor, segment  # the native Drops run here, in the child
            gc.collect()
            if report or again:
                print(f"shutdown in the child reported {report} and {again}", file=sys.stderr)
                return False
            return True

        assert _in_fork(child) == 0, "the forked child failed (see its stderr above)"

        assert not segment.is_shutdown, "the child set the parent's shutdown flag"
        stats = supervisor.stats()
        assert [s.state for s in stats] == ["running", "running"], stats
        assert [s.pid for s in stats] == pids
        assert all(_alive(pid) for pid in pids if pid is not None), "a worker died with the child"
        assert supervisor.next_event(0) is not None  # the two "started" events, nothing more
        assert supervisor.next_event(0) is not None
        assert supervisor.next_event(0) is None
        beats = [c.heartbeats for c in controls]
        wait_until(
            lambda: all(c.heartbeats > b for c, b in zip(controls, beats, strict=True)),
            timeout_s=60,
            what="both workers to keep beating",
        )
        if name is not None:
            assert Path(f"/dev/shm{name}").exists(), "the child unlinked the parent's segment"
    finally:
        endings = supervisor.shutdown(grace_s=5.0)
        if name is not None:
            segment.unlink_name()
    assert [(e.ending, e.code) for e in endings] == [("exited", 0), ("exited", 0)], endings


@pytest.mark.timeout(60)
def test_a_lease_dropped_in_a_forked_child_stays_held_by_the_parent() -> None:
    segment = _segment("memfd", n_workers=1)
    producer, consumer = segment.producer(0, 1), segment.consumer(0)
    for _ in range(2):  # fill the ring
        slot = producer.claim(timeout_s=1)
        assert slot is not None
        producer.commit(slot)
    lease = consumer.pop(timeout_s=1)
    assert lease is not None

    def child() -> bool:
        nonlocal lease
        del lease  # a Drop that would give the slot back
        gc.collect()
        return True

    assert _in_fork(child) == 0, "the forked child failed (see its stderr above)"
    assert not lease.released
    assert producer.claim(timeout_s=0) is None, "the child gave the parent's slot back"
    lease.release()
    assert producer.claim(timeout_s=0) is not None


@pytest.mark.timeout(60)
def test_a_named_segment_dropped_in_a_forked_child_keeps_its_name_and_runs_on() -> None:
    segment = _segment("named")
    name = segment.name
    assert name is not None
    try:

        def child() -> bool:
            nonlocal segment
            segment.unlink_name()
            segment.shutdown()
            del segment  # the creator's Drop, which unlinks the name in its own process
            gc.collect()
            return True

        assert _in_fork(child) == 0, "the forked child failed (see its stderr above)"
        assert Path(f"/dev/shm{name}").exists(), "the child unlinked the parent's segment"
        assert segment.name == name
        assert not segment.is_shutdown, "the child set the parent's shutdown flag"
        attached = _core.Segment.attach_named(name, timeout_s=1, expected_layout_hash=segment.layout_hash)
        assert attached.n_workers == 2
    finally:
        segment.unlink_name()
    assert not Path(f"/dev/shm{name}").exists()
