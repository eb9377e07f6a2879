"""Every error path of the native module, provoked from Python.

Each raises the exact class that the bindings' one error mapping (``errors.rs``) picks: a bad
value from the caller is a ConfigError, a segment of another layout or build a
LayoutMismatchError, a runtime failure of the transport a TransportError, a refused buffer
export a BufferExportError, and worker processes that cannot be started a SupervisorError.
All of them are PyCollectErrors; none is a bare RuntimeError or ValueError.
"""

from __future__ import annotations

import ctypes
import os
import re
import resource
import signal
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from pycollect import _core
from pycollect.exceptions import (
    BufferExportError,
    ConfigError,
    LayoutMismatchError,
    PyCollectError,
    SupervisorError,
    TransportError,
)
from pycollect.testing import wait_until

CHILD = Path(__file__).with_name("transport_child.py")

# Every supervision setting, explicitly (the native side has no defaults). The native side reads
# them as attributes of any object: a namespace lets its own checks see values that
# pycollect.SupervisionConfig would refuse first.
SUPERVISION: dict[str, Any] = {
    "restart": "never",
    "max_restarts": 0,
    "restart_window_s": 60.0,
    "backoff_initial_s": 0.1,
    "backoff_max_s": 1.0,
    "startup_timeout_s": 60.0,
    "heartbeat_timeout_s": 60.0,
    "check_interval_s": 0.05,
    "shutdown_grace_s": 1.0,
    "term_timeout_s": 1.0,
}


@contextmanager
def raises_exactly(error_class: type[PyCollectError], match: str) -> Iterator[None]:
    """Like ``pytest.raises``, but the class must be exactly ``error_class``."""
    with pytest.raises(PyCollectError) as info:
        yield
    error = info.value
    assert type(error) is error_class, f"{type(error).__name__} raised instead: {error}"
    assert isinstance(error, PyCollectError)
    assert type(error) not in (RuntimeError, ValueError, BufferError, TypeError)
    assert re.search(match, str(error)), f"{match!r} not in {str(error)!r}"


def _create(fields: list[tuple[str, str, tuple[int, ...]]] | None = None, **overrides: Any) -> _core.Segment:
    settings: dict[str, Any] = {
        "n_workers": 1,
        "envs_per_worker": 1,
        "steps": 1,
        "slots_per_worker": 2,
        "weights_capacity": 0,
        "weights_buffers": 3,
        "backing": "auto",
    }
    return _core.Segment.create([("x", "float32", (2,))] if fields is None else fields, **(settings | overrides))


# -- ConfigError: a bad value passed by the caller ----------------------------------------------


@pytest.mark.parametrize(
    ("fields", "overrides", "match"),
    [
        ([("x", "complex64", ())], {}, "unsupported dtype 'complex64'"),
        ([("", "uint8", ())], {}, 'bad field name ""'),
        ([("x" * 64, "uint8", ())], {}, "longer than 63"),
        ([("a", "uint8", ()), ("a", "uint8", ())], {}, 'bad field name "a"'),
        ([("x", "uint8", (3, 0))], {}, r"shape \[3, 0\]"),
        ([("x", "uint8", (1,) * 7)], {}, "at most 6"),
        ([], {}, "got 0"),
        ([(f"f{i}", "uint8", ()) for i in range(65)], {}, "got 65"),
        (None, {"n_workers": 0}, "n_workers"),
        (None, {"envs_per_worker": 0}, "envs_per_worker"),
        (None, {"steps": 0}, "steps"),
        (None, {"slots_per_worker": 0}, "slots_per_worker"),
        (None, {"slots_per_worker": 3}, "power of two, got 3"),
        (None, {"weights_buffers": 2}, "weight_buffers must be in 3..=255, got 2"),
        (None, {"n_workers": 1 << 33}, "n_workers is too large"),
        (None, {"steps": -1}, "steps must be an integer in 0..=18446744073709551615, got -1"),
        (None, {"n_workers": 1 << 64}, r"n_workers must be an integer in 0..=\d+, got 18446744073709551616"),
        (None, {"weights_capacity": 2.5}, "weights_capacity must be an integer in 0..=18446744073709551615, got 2.5"),
        ([("x", "uint8", (1 << 40,))], {"steps": 1 << 30}, "overflows"),
        (None, {"backing": "disk"}, "'disk'"),
    ],
)
def test_bad_layouts_are_config_errors(fields: Any, overrides: dict[str, Any], match: str) -> None:
    with raises_exactly(ConfigError, match):
        _create(fields, **overrides)


def test_bad_indices_and_names_are_config_errors() -> None:
    segment = _create(n_workers=2)
    with raises_exactly(ConfigError, "no field 'y'.*fields: x"):
        segment.slot_view("y", 0, 0)
    with raises_exactly(ConfigError, "slot 2 out of range"):
        segment.slot_view("x", 2, 0)
    with raises_exactly(ConfigError, "slot 5 out of range"):
        segment.batch_view("x", 5)
    with raises_exactly(ConfigError, "worker 2 out of range"):
        segment.slot_view("x", 0, 2)
    for make in (
        lambda: segment.producer(2, 0),
        lambda: segment.consumer(2),
        lambda: segment.worker_control(2),
        lambda: segment.weights_reader(2),
    ):
        with raises_exactly(ConfigError, "worker 2 out of range: the segment has 2 workers"):
            make()
    with raises_exactly(ConfigError, "fd must be a file descriptor, got -1"):
        _core.Segment.attach(-1, timeout_s=1)
    with raises_exactly(ConfigError, 'bad segment name "bogus"'):
        _core.Segment.attach_named("bogus", timeout_s=1)
    control = segment.worker_control(0)
    with raises_exactly(ConfigError, "unknown worker state 'sleeping'"):
        control.state = "sleeping"


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), 1e300])
def test_bad_timeouts_are_config_errors(bad: float) -> None:
    segment = _create(weights_capacity=8)
    producer, consumer = segment.producer(0, 0), segment.consumer(0)
    with raises_exactly(ConfigError, "timeout_s must be a non-negative number"):
        producer.claim(timeout_s=bad)
    with raises_exactly(ConfigError, "timeout_s must be a non-negative number"):
        consumer.pop(timeout_s=bad)
    with raises_exactly(ConfigError, "timeout_s must be a non-negative number"):
        _core.wait_any([consumer], timeout_s=bad)
    with raises_exactly(ConfigError, "timeout_s must be a non-negative number"):
        segment.weights_writer().publish(b"abc", timeout_s=bad)
    with raises_exactly(ConfigError, "timeout_s must be a non-negative number"):
        _core.Segment.attach(segment.fd, timeout_s=bad)


def test_ring_misuse_is_a_config_error_and_a_second_release_is_not_an_error() -> None:
    segment = _create()
    producer = segment.producer(0, 1)
    with raises_exactly(ConfigError, r"commit\(0\): no slot is claimed"):
        producer.commit(0)
    first, second = producer.claim(timeout_s=1), producer.claim(timeout_s=1)
    assert first is not None and second is not None
    with raises_exactly(ConfigError, f"oldest claimed slot is {first}"):
        producer.commit(second)
    producer.commit(first)
    producer.commit(second)
    with raises_exactly(ConfigError, "at least one consumer"):
        _core.wait_any([])
    lease = segment.consumer(0).pop(timeout_s=1)
    assert lease is not None
    lease.release()
    lease.release()  # idempotent: the lease gives its slot back once
    assert lease.released


def test_weights_that_do_not_fit_and_bad_buffers_are_config_errors() -> None:
    segment = _create(weights_capacity=16)
    writer, reader = segment.weights_writer(), segment.weights_reader(0)
    with raises_exactly(ConfigError, "17 bytes exceed the buffer capacity of 16"):
        writer.publish(b"x" * 17, timeout_s=1)
    with raises_exactly(ConfigError, "data must be a bytes-like object"):
        writer.publish("not bytes", timeout_s=1)  # type: ignore[arg-type]
    with raises_exactly(ConfigError, "data must be a bytes-like object of unsigned bytes"):
        writer.publish(np.zeros(2, np.float32), timeout_s=1)
    with raises_exactly(ConfigError, "data must be C-contiguous"):
        writer.publish(np.zeros((4, 4), np.uint8)[:, 0], timeout_s=1)
    assert writer.publish(b"abcdef", timeout_s=1) == 1
    with raises_exactly(ConfigError, "destination of 2 bytes cannot hold published weights of 6 bytes"):
        reader.read_into(bytearray(2))
    with raises_exactly(ConfigError, "out is read-only"):
        reader.read_into(b"0123456789")


# -- Sizes the Python side checks before it allocates ------------------------------------------

_SIZES: dict[str, int] = {
    "n_workers": 1,
    "envs_per_worker": 1,
    "steps": 1,
    "slots_per_worker": 2,
    "weights_capacity": 0,
    "weights_buffers": 3,
}


@pytest.mark.parametrize(
    ("fields", "sizes"),
    [
        ([("x", "float32", (2,))], {}),
        (
            [
                ("observation", "float32", (4,)),
                ("next/observation", "float32", (4,)),
                ("action", "int64", ()),
                ("next/done", "bool", (1,)),
            ],
            {"n_workers": 3, "envs_per_worker": 8, "steps": 128, "weights_capacity": 100_000},
        ),
        (
            [("pixels", "uint8", (3, 64, 64)), ("reward", "bfloat16", (1,))],
            {"n_workers": 2, "envs_per_worker": 4, "steps": 16, "slots_per_worker": 4, "weights_buffers": 5},
        ),
        ([(f"f{i}", "float64", (i + 1,)) for i in range(64)], {"n_workers": 5, "weights_capacity": 4097}),
    ],
)
def test_segment_bytes_is_exactly_what_create_maps(fields: list[Any], sizes: dict[str, int]) -> None:
    settings = _SIZES | sizes
    expected = _core.Segment.create(fields, **settings, backing="auto").total_len
    assert _core.segment_bytes(fields, **settings) == expected


def test_segment_bytes_of_an_absurd_layout_is_computed_without_allocating() -> None:
    # frames_per_batch=10**13 with one worker: a 1.2 PiB segment if it were created.
    fields = [("observation", "float32", (4,)), ("next/observation", "float32", (4,))]
    total = _core.segment_bytes(fields, **(_SIZES | {"steps": 10**13}))
    assert total >= 2 * 2 * 10**13 * 16  # two slots of two fields of 16 bytes per step
    physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert total > physical  # more than this machine has: it cannot have been allocated


@pytest.mark.parametrize(
    ("fields", "overrides", "match"),
    [
        (None, {"steps": 1 << 62}, "segment size overflows while sizing field"),
        ([("x", "uint8", (1 << 40,))], {"steps": 1 << 30}, "overflows"),
        (None, {"steps": 0}, "steps must be positive, got 0"),
        (None, {"steps": -1}, "steps must be an integer in 0..=18446744073709551615, got -1"),
        (None, {"envs_per_worker": 1 << 64}, "envs_per_worker must be an integer in 0..=18446744073709551615"),
        (None, {"slots_per_worker": 3}, "slots_per_worker must be a power of two, got 3"),
        (None, {"weights_buffers": 256}, "weight_buffers must be in 3..=255, got 256"),
        ([("x", "uint8", (2, -3))], {}, r"field 'x': every shape dimension must be an integer in 0..=\d+, got -3"),
        ([("x", "complex64", ())], {}, "unsupported dtype 'complex64'"),
        ([], {}, "got 0"),
    ],
)
def test_bad_sizes_for_segment_bytes_are_config_errors(fields: Any, overrides: dict[str, Any], match: str) -> None:
    with raises_exactly(ConfigError, match):
        _core.segment_bytes([("x", "float32", (2,))] if fields is None else fields, **(_SIZES | overrides))


# -- The error text of a worker ----------------------------------------------------------------


def test_error_texts_are_cut_to_the_exported_capacity_at_a_character_boundary() -> None:
    capacity = _core.WORKER_ERROR_CAPACITY
    assert capacity == 8192
    control = _create().worker_control(0)
    assert control.write_error("x" * (capacity + 100)) == capacity
    assert control.read_error() == "x" * capacity
    for char in ("é", "€", "🐍"):  # 2, 3 and 4 bytes: a cut at the capacity would split one
        text = "a" + char * capacity
        stored = control.write_error(text)
        assert capacity - len(char.encode()) < stored <= capacity, (char, stored)
        read = control.read_error()
        assert read is not None and text.startswith(read)
        assert read.encode() == text.encode()[:stored]  # the head, whole characters only
    # A lone surrogate (a traceback naming an undecodable file) is stored as U+FFFD.
    assert control.write_error("in /tmp/\udcff.py") == len("in /tmp/\ufffd.py".encode())
    assert control.read_error() == "in /tmp/\ufffd.py"


# -- LayoutMismatchError: not a segment of this layout or build -------------------------------


def _attach_copy(segment: _core.Segment, patch: Callable[[bytearray], None], *, size: int | None = None) -> None:
    """Attach to a copy of ``segment``'s bytes, changed by ``patch`` (and cut to ``size``)."""
    data = bytearray(os.pread(segment.fd, segment.total_len, 0))
    patch(data)
    fd = os.memfd_create("pycollect-test-copy")
    try:
        os.write(fd, bytes(data[:size]))
        _core.Segment.attach(fd, timeout_s=0.1)
    finally:
        os.close(fd)


# Offsets in the fixed header (rust/pycollect-core/src/header.rs, `SegmentHeader`).
_MAGIC, _ABI, _STATE, _HASH, _N_FIELDS = 0, 8, 12, 16, 104


@pytest.mark.parametrize(
    ("patch", "size", "match"),
    [
        (lambda b: None, 200, "200 bytes is too small for a segment"),
        (lambda b: struct.pack_into("<Q", b, _MAGIC, 0), None, "not a pycollect segment: magic is 0x0000000000000000"),
        (lambda b: struct.pack_into("<I", b, _ABI, 99), None, "ABI version 99"),
        (lambda b: struct.pack_into("<Q", b, _HASH, 0x3039), None, "layout hash 0x0000000000003039 does not match"),
        (lambda b: struct.pack_into("<Q", b, _N_FIELDS, 1000), None, "invalid field count: 1000"),
    ],
)
def test_memory_that_is_not_a_segment_of_this_build_is_a_layout_mismatch(
    patch: Callable[[bytearray], None], size: int | None, match: str
) -> None:
    with raises_exactly(LayoutMismatchError, match):
        _attach_copy(_create(), patch, size=size)


def test_another_expected_layout_is_a_layout_mismatch() -> None:
    segment = _create()
    with raises_exactly(LayoutMismatchError, f"differs from the expected {segment.layout_hash ^ 1:#018x}"):
        _core.Segment.attach(segment.fd, timeout_s=1, expected_layout_hash=segment.layout_hash ^ 1)


# -- TransportError: the transport failed at run time ----------------------------------------


def test_a_segment_never_marked_ready_is_a_transport_error() -> None:
    with raises_exactly(TransportError, "not marked ready within"):
        _attach_copy(_create(), lambda b: struct.pack_into("<I", b, _STATE, 0))


def test_a_missing_named_segment_is_a_transport_error() -> None:
    with raises_exactly(TransportError, "shm_open failed"):
        _core.Segment.attach_named(f"/pycollect-{os.getpid()}-0-missing", timeout_s=1)


def _kill_while_reading(segment: _core.Segment, worker: int) -> None:
    """Start a process that reads the weights store as ``worker`` over and over, and kill it.

    The copy-out is nearly all of its time, so once it is in its loop (its heartbeat counts
    the reads) a kill almost always lands while it holds a pin.
    """
    control = segment.worker_control(worker)
    before = control.heartbeats
    child = subprocess.Popen(
        [sys.executable, str(CHILD), "weights-spin", str(segment.fd), str(worker)],
        pass_fds=(segment.fd,),
        cwd=CHILD.parent,
    )
    try:

        def reading() -> bool:
            assert child.poll() is None, f"the reader exited with status {child.returncode}"
            return control.heartbeats >= before + 3

        wait_until(reading, timeout_s=30, what="the reader to be in its read loop", poll_s=0.001)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)


@pytest.mark.timeout(120)
def test_publishing_while_dead_readers_pin_every_buffer_times_out_with_a_transport_error() -> None:
    nbytes = 16 << 20
    data = np.zeros(nbytes, np.uint8)
    for _ in range(5):  # a kill that lands between two reads pins nothing: try again
        segment = _create(n_workers=2, weights_capacity=nbytes)
        writer = segment.weights_writer()
        writer.publish(data, timeout_s=1)  # version 1, buffer 0
        _kill_while_reading(segment, 0)  # dies pinning buffer 0
        writer.publish(data, timeout_s=1)  # version 2, buffer 1
        _kill_while_reading(segment, 1)  # dies pinning buffer 1
        writer.publish(data, timeout_s=1)  # version 3 takes the last free buffer
        try:
            writer.publish(data, timeout_s=0.2)
        except PyCollectError as error:
            assert type(error) is TransportError, error
            assert "within 0.2 s: every weights buffer is held by a reader" in str(error)
            return
    pytest.fail("no attempt left every weights buffer pinned by a dead reader")


# -- BufferExportError: a refused export -----------------------------------------------------


def test_a_writable_export_of_a_read_only_view_is_a_buffer_export_error() -> None:
    segment = _create()
    get_buffer = ctypes.pythonapi.PyObject_GetBuffer
    get_buffer.argtypes = [ctypes.py_object, ctypes.c_void_p, ctypes.c_int]
    release = ctypes.pythonapi.PyBuffer_Release
    release.argtypes = [ctypes.c_void_p]
    py_buffer = ctypes.create_string_buffer(256)  # room for a Py_buffer
    pybuf_writable = 0x0001
    with raises_exactly(BufferExportError, "read-only"):
        get_buffer(segment.slot_view("x", 0, 0), ctypes.addressof(py_buffer), pybuf_writable)
    assert issubclass(BufferExportError, BufferError) and issubclass(BufferExportError, TransportError)
    get_buffer(segment.slot_view("x", 0, 0, writable=True), ctypes.addressof(py_buffer), pybuf_writable)
    release(ctypes.addressof(py_buffer))


# -- Supervisor: ConfigError for its settings, SupervisorError for its processes --------------


def _supervisor(segment: _core.Segment, argv: list[str], **overrides: Any) -> _core.Supervisor:
    supervision = SimpleNamespace(**(SUPERVISION | {k: v for k, v in overrides.items() if k in SUPERVISION}))
    settings = {"env": {}, "pass_fds": []} | {k: v for k, v in overrides.items() if k not in SUPERVISION}
    return _core.Supervisor(segment, argv, supervision=supervision, **settings)


QUIET = [sys.executable, "-c", "pass"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"restart": "sometimes"}, "restart must be 'permanent', 'transient' or 'never', got 'sometimes'"),
        ({"startup_timeout_s": 0.0}, "startup_timeout_s must be a positive number of seconds, got 0"),
        ({"shutdown_grace_s": -1.0}, "shutdown_grace_s must be a positive number"),
        ({"check_interval_s": float("nan")}, "check_interval_s must be a positive number"),
        ({"backoff_initial_s": 5.0}, "invalid supervisor setting backoff_initial = 5s: must not exceed backoff_max"),
        ({"pass_fds": [(0, 4)]}, r"pass_fds entry \(0, 4\): fd numbers 3 and 4 are taken"),
        ({"pass_fds": [(0, 3)]}, r"pass_fds entry \(0, 3\): fd numbers 3 and 4 are taken"),
        ({"pass_fds": [(-1, 7)]}, r"pass_fds entry \(-1, 7\): -1 is not a file descriptor"),
        ({"pass_fds": [(0, 2000)]}, "cannot start workers: worker 0: cannot pass fd number 2000: must be in 3..=1023"),
        ({"pass_fds": [(0, 7), (1, 7)]}, "cannot pass fd number 7: requested twice"),
    ],
)
def test_bad_supervisor_settings_are_config_errors(overrides: dict[str, Any], match: str) -> None:
    with raises_exactly(ConfigError, match):
        _supervisor(_create(), QUIET, **overrides)


def test_a_supervisor_without_a_program_is_a_config_error() -> None:
    with raises_exactly(ConfigError, "argv must name a program"):
        _supervisor(_create(), [])


@pytest.mark.timeout(60)
def test_a_program_that_does_not_exist_is_a_supervisor_error() -> None:
    with raises_exactly(SupervisorError, 'cannot start workers: worker 0 generation 1: cannot spawn "/nonexistent/'):
        _supervisor(_create(n_workers=2), ["/nonexistent/pycollect-worker"])


@pytest.mark.timeout(60)
def test_a_descriptor_that_is_not_open_is_a_supervisor_error() -> None:
    closed = resource.getrlimit(resource.RLIMIT_NOFILE)[0] + 7  # above the limit: never open
    with raises_exactly(SupervisorError, "cannot start workers: worker 0 generation 1: launcher failed"):
        _supervisor(_create(), QUIET, pass_fds=[(closed, 7)])


@pytest.mark.timeout(60)
def test_bad_arguments_of_a_running_supervisor_are_config_errors() -> None:
    supervisor = _supervisor(_create(), QUIET)
    try:
        for bad in (-1.0, float("nan"), float("inf")):
            with raises_exactly(ConfigError, "timeout_s must be a non-negative number of seconds"):
                supervisor.next_event(timeout_s=bad)
            with raises_exactly(ConfigError, "grace_s must be a non-negative number of seconds"):
                supervisor.shutdown(grace_s=bad)
        with raises_exactly(ConfigError, "worker 1 out of range: the supervisor has 1 workers"):
            supervisor.last_error(1)
    finally:
        supervisor.shutdown(grace_s=1.0)
