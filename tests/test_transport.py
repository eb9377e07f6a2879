"""The shared-memory transport from Python: integrity across processes, zero-copy views,
lifetimes, layout checks, the weights store and interruptible waits."""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from transport_child import payload

from pycollect import ConfigError, LayoutMismatchError, _core
from pycollect.testing import wait_until

CHILD = Path(__file__).with_name("transport_child.py")


def _segment(
    nbytes: int = 64, *, workers: int = 1, slots: int = 4, weights_capacity: int = 0, backing: str = "auto"
) -> _core.Segment:
    return _core.Segment.create(
        [("payload", "uint8", (nbytes,))],
        n_workers=workers,
        envs_per_worker=1,
        steps=1,
        slots_per_worker=slots,
        weights_capacity=weights_capacity,
        weights_buffers=3,
        backing=backing,
    )


def _child(*args: object, **kwargs) -> subprocess.Popen[str]:
    fd = args[1]
    return subprocess.Popen(
        [sys.executable, str(CHILD), *map(str, args)],
        pass_fds=(fd,),
        stdout=subprocess.PIPE,
        text=True,
        cwd=CHILD.parent,
        **kwargs,
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize("nbytes", [64, 4096, 65536, 1 << 20, 4 << 20])
def test_every_slot_arrives_once_in_order_and_intact(nbytes: int) -> None:
    count = 64 if nbytes <= 65536 else 12
    segment = _segment(nbytes, workers=2)
    children = [_child("produce", segment.fd, count, worker, 5 + worker) for worker in range(2)]
    consumers = [segment.consumer(w) for w in range(2)]
    received = {0: [], 1: []}
    start = 0
    while sum(map(len, received.values())) < 2 * count:
        which = _core.wait_any(consumers, timeout_s=30, start=start)
        assert which is not None, "no slot within 30 s"
        start = which + 1
        lease = consumers[which].try_pop()
        assert lease is not None and lease.worker == which
        data = np.asarray(lease.view("payload")).reshape(-1)
        expected_seq = len(received[which])
        assert lease.seq == expected_seq and lease.generation == 5 + which
        np.testing.assert_array_equal(data, payload(nbytes, which, 5 + which, expected_seq))
        received[which].append(lease.seq)
        lease.release()
    for child in children:
        assert child.wait(timeout=30) == 0
    assert received == {0: list(range(count)), 1: list(range(count))}
    assert all(c.try_pop() is None for c in consumers)


@pytest.mark.timeout(60)
def test_killed_producer_publishes_no_partial_slot() -> None:
    segment = _segment(4096)
    consumer = segment.consumer(0)
    done = _child("produce", segment.fd, 2, 0, 0)
    assert done.wait(timeout=30) == 0
    half = _child("half", segment.fd, 0, 0)
    assert half.stdout is not None and half.stdout.readline().strip() == "ready"
    half.send_signal(signal.SIGKILL)
    half.wait(timeout=10)
    seqs = []
    while (lease := consumer.pop(timeout_s=0.5)) is not None:
        data = np.asarray(lease.view("payload")).reshape(-1)
        np.testing.assert_array_equal(data, payload(4096, 0, 0, lease.seq))
        seqs.append(lease.seq)
        lease.release()
    assert seqs == [0, 1]  # the half-written third slot was never published


def test_views_are_zero_copy() -> None:
    segment = _segment(256, workers=2, slots=2)
    producer = segment.producer(1, 0)
    slot = producer.claim(timeout_s=1)
    writer = segment.slot_view("payload", slot, 1, writable=True)
    np.asarray(writer)[:] = 9
    producer.commit(slot)
    lease = segment.consumer(1).pop(timeout_s=1)
    view = lease.view("payload")
    array = np.asarray(view)
    assert np.shares_memory(array, np.asarray(writer))
    tensor = torch.from_numpy(array)
    assert tensor.data_ptr() == view.address == writer.address
    assert view.address - segment.address < segment.total_len
    assert (tensor == 9).all()
    batch = np.asarray(segment.batch_view("payload", slot))
    assert batch.shape == (2, 1, 256)  # both workers' rollouts of one slot form one block
    assert np.shares_memory(batch[1], array)


def test_lease_held_by_a_tensor_keeps_its_slot() -> None:
    segment = _segment(64, slots=2)
    producer, consumer = segment.producer(0, 0), segment.consumer(0)
    for _ in range(2):
        producer.commit(producer.claim(timeout_s=1))
    tensor = torch.from_numpy(np.asarray(consumer.pop(timeout_s=1).view("payload")))  # lease object dropped
    consumer.pop(timeout_s=1).release()
    # Slots return in ring order: the released second slot waits behind the first, which the
    # tensor still holds through its view.
    assert producer.claim(timeout_s=0.2) is None
    del tensor
    gc.collect()
    assert producer.claim(timeout_s=1) is not None
    assert producer.claim(timeout_s=1) is not None


def test_views_keep_the_mapping_alive_after_the_segment_is_gone() -> None:
    segment = _segment(1024)
    array = np.asarray(segment.slot_view("payload", 0, 0, writable=True))
    array[:] = 42
    fd_path = f"/proc/self/fd/{segment.fd}"
    del segment
    gc.collect()
    assert (array == 42).all()  # still mapped: no crash, same data
    del array
    gc.collect()
    assert not os.path.exists(fd_path) or "pycollect" not in os.readlink(fd_path)


def test_segment_is_gone_after_its_last_user() -> None:
    segment = _segment(1024)
    fd = segment.fd
    assert "pycollect" in os.readlink(f"/proc/self/fd/{fd}")
    del segment
    gc.collect()
    assert not [link for link in _open_fd_targets() if "memfd:pycollect" in link]


def _open_fd_targets() -> list[str]:
    targets = []
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(FileNotFoundError):  # the fd that listed the directory
            targets.append(os.readlink(f"/proc/self/fd/{name}"))
    return targets


def test_attach_with_another_layout_is_refused() -> None:
    segment = _segment(64)
    with pytest.raises(LayoutMismatchError, match=f"{segment.layout_hash + 1:#x}"):
        _core.Segment.attach(segment.fd, timeout_s=1, expected_layout_hash=segment.layout_hash + 1)
    same = _core.Segment.attach(segment.fd, timeout_s=1, expected_layout_hash=segment.layout_hash)
    assert same.fields() == segment.fields()


def test_named_segment_is_private_and_unlinked() -> None:
    segment = _segment(64, backing="named")
    name = segment.name
    assert name is not None and name.startswith(f"/pycollect-{os.getpid()}-")
    path = Path("/dev/shm") / name.lstrip("/")
    assert path.stat().st_mode & 0o777 == 0o600
    other = _core.Segment.attach_named(name, timeout_s=1)
    segment.unlink_name()
    assert not path.exists()
    assert other.layout_hash == segment.layout_hash


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_workers": 0}, "n_workers"),
        ({"slots_per_worker": 3}, "slots_per_worker"),
        ({"steps": 0}, "steps"),
    ],
)
def test_bad_layouts_name_the_value(kwargs: dict, message: str) -> None:
    sizes = {"n_workers": 1, "envs_per_worker": 1, "steps": 1, "slots_per_worker": 2}
    rest = {"weights_capacity": 0, "weights_buffers": 3, "backing": "auto"}
    with pytest.raises(ConfigError, match=message):
        _core.Segment.create([("x", "float32", ())], **(sizes | kwargs), **rest)
    with pytest.raises(ConfigError, match="complex64"):
        _core.Segment.create([("x", "complex64", ())], **sizes, **rest)


@pytest.mark.timeout(120)
def test_weights_reader_never_sees_a_torn_set() -> None:
    segment = _segment(64, weights_capacity=1 << 20)
    writer = segment.weights_writer()
    reader = _child("weights-read", segment.fd, 20000)
    version = 0
    while reader.poll() is None:
        version = writer.publish(np.full(1 << 20, (version + 1) % 256, np.uint8), timeout_s=5)
    out, _ = reader.communicate(timeout=60)
    assert reader.returncode == 0, out
    assert int(out.split()[1]) > 1  # it saw several versions while they were being written


def test_weights_round_trip_and_errors() -> None:
    segment = _segment(64, weights_capacity=16)
    writer, reader = segment.weights_writer(), segment.weights_reader(0)
    out = bytearray(16)
    assert reader.read_into(out) is None
    assert writer.publish(b"abc", timeout_s=1) == 1 and writer.publish(b"defg", timeout_s=1) == 2
    assert reader.read_into(out) == (2, 4) and bytes(out[:4]) == b"defg"
    with pytest.raises(ConfigError, match="16"):
        writer.publish(b"x" * 17, timeout_s=1)


def test_worker_control_fields() -> None:
    control = _segment(64).worker_control(0)
    control.state = "running"
    control.pid = 1234
    control.beat()
    control.write_error("Traceback: boom")
    assert (control.state, control.pid, control.read_error()) == ("running", 1234, "Traceback: boom")
    assert control.last_heartbeat_ns > 0 and control.heartbeats == 1
    with pytest.raises(ConfigError, match="'sleeping'"):
        control.state = "sleeping"


def blocked_in_futex(pid: int) -> bool:
    """Whether the process's main thread sleeps in a futex wait (where a sliced wait sleeps)."""
    try:
        return Path(f"/proc/{pid}/wchan").read_text().startswith("futex")
    except OSError:
        return False


def start_waiting_consumer(segment: _core.Segment) -> subprocess.Popen[str]:
    """A child blocked in ``Consumer.pop()`` on an empty ring (its main thread in the futex wait)."""
    child = _child("wait", segment.fd, stderr=subprocess.PIPE)
    assert child.stdout is not None and child.stdout.readline().strip() == "waiting"
    wait_until(lambda: blocked_in_futex(child.pid), timeout_s=30, what="the child to block in pop()")
    return child


@pytest.mark.timeout(60)
def test_ctrl_c_interrupts_a_waiting_consumer() -> None:
    child = start_waiting_consumer(_segment(64))
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=30)
    assert "interrupted" in out and "KeyboardInterrupt" in err  # how fast: tests/test_timing.py


@pytest.mark.timeout(60)
def test_shutdown_wakes_a_blocked_claim() -> None:
    segment = _segment(64, slots=2)
    producer = segment.producer(0, 0)
    for _ in range(2):
        producer.commit(producer.claim(timeout_s=1))
    results: list[object] = []
    claimer = threading.Thread(target=lambda: results.append(producer.claim(timeout_s=None)))
    claimer.start()  # the ring is full: this claim can only end through shutdown
    segment.shutdown()
    claimer.join(timeout=30)
    assert not claimer.is_alive() and results == [None] and segment.is_shutdown


def test_stale_named_segments_of_dead_creators_are_swept() -> None:
    dead_pid = 4_000_000  # above pid_max: no such process
    stale = Path("/dev/shm") / f"pycollect-{dead_pid}-1-0"
    stale.write_bytes(b"")
    live = _segment(64, backing="named")
    try:
        removed = _core.sweep_stale_segments()
        # Every start of worker processes sweeps too, so a test running beside this one (xdist)
        # may have removed it first: what must hold is that it is gone and the live one is not.
        assert not stale.exists()
        assert live.name is not None and (Path("/dev/shm") / live.name.lstrip("/")).exists()
        assert live.name.lstrip("/") not in [name.lstrip("/") for name in removed]
    finally:
        stale.unlink(missing_ok=True)
        live.unlink_name()
