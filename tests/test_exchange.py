"""Step channels from Python: round trips between processes, the restart rule, payload limits,
misuse, timeouts and interruptible waits."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from exchange_child import answer

from pycollect import ConfigError, TransportError, _core
from pycollect.testing import wait_until

CHILD = Path(__file__).with_name("exchange_child.py")
MAILBOX = 512


def _segment(*, workers: int = 1, mailbox_bytes: int = MAILBOX) -> _core.Segment:
    return _core.Segment.create(
        [("x", "uint8", ())],
        n_workers=workers,
        envs_per_worker=1,
        steps=1,
        slots_per_worker=2,
        weights_capacity=0,
        weights_buffers=3,
        backing="auto",
        mailbox_bytes=mailbox_bytes,
    )


def _child(mode: str, segment: _core.Segment, *args: object, stderr: int | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(CHILD), mode, str(segment.fd), *map(str, args)],
        pass_fds=(segment.fd,),
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        cwd=CHILD.parent,
    )


@contextlib.contextmanager
def _children() -> Iterator[list[subprocess.Popen[str]]]:
    """Children started in the block; any still running at its end are killed and reaped."""
    started: list[subprocess.Popen[str]] = []
    try:
        yield started
    finally:
        for child in started:
            if child.poll() is None:
                child.kill()
            child.wait(timeout=30)
            for pipe in (child.stdout, child.stderr):
                if pipe is not None:
                    pipe.close()


def _line(child: subprocess.Popen[str]) -> str:
    assert child.stdout is not None
    return child.stdout.readline().strip()


def _close(channel: _core.StepChannel, child: subprocess.Popen[str]) -> None:
    seq = channel.post(_core.STEP_CMD_CLOSE, 0)
    assert _core.wait_answers([channel], [seq], timeout_s=30) == [0]
    assert channel.response()[1:] == (_core.STEP_STATUS_OK, b"bye")
    assert child.wait(timeout=30) == 0


def _payload(worker: int, round_: int) -> bytes:
    """Payloads of every length from 0 to the most an answer can echo."""
    n = (round_ * 37 + worker * 11) % (MAILBOX - 9)
    return bytes((i * 7 + round_ + worker) % 256 for i in range(n))


@pytest.mark.timeout(120)
def test_round_trips_between_processes_carry_every_payload_intact() -> None:
    segment = _segment(workers=2)
    channels = [segment.step_channel(w) for w in range(2)]
    with _children() as children:
        for w in range(2):
            segment.worker_control(w).begin_generation()
            children.append(_child("serve", segment, w))
            assert _line(children[w]) == "ready None"
        # Sync: a request to every worker, then wait for all the answers.
        for round_ in range(300):
            seqs = [ch.post(_core.STEP_CMD_STEP, round_ * 10 + w, _payload(w, round_)) for w, ch in enumerate(channels)]
            assert seqs == [round_ + 1] * 2
            assert _core.wait_answers(channels, seqs, timeout_s=30) == [0, 1]
            for w, ch in enumerate(channels):
                generation, status, payload = ch.response()
                assert (generation, status) == (1, _core.STEP_STATUS_OK)
                assert payload == answer(w, seqs[w], round_ * 10 + w, _payload(w, round_))
        # Pool: take whichever answers first and post to it again, 100 more rounds each.
        counts = [0, 0]
        pending = {w: ch.post(_core.STEP_CMD_STEP, 0, _payload(w, 0)) for w, ch in enumerate(channels)}
        while pending:
            waiting = sorted(pending)
            ready = _core.wait_answers(
                [channels[w] for w in waiting], [pending[w] for w in waiting], timeout_s=30, any=True
            )
            assert ready, "no answer within 30 s"
            for w in (waiting[i] for i in ready):
                assert channels[w].response()[2] == answer(w, pending[w], counts[w], _payload(w, counts[w]))
                counts[w] += 1
                if counts[w] < 100:
                    pending[w] = channels[w].post(_core.STEP_CMD_STEP, counts[w], _payload(w, counts[w]))
                else:
                    del pending[w]
        assert counts == [100, 100]
        for ch, child in zip(channels, children, strict=True):
            _close(ch, child)


@pytest.mark.timeout(120)
def test_a_request_left_to_a_dead_worker_is_answered_restarted_by_its_successor() -> None:
    segment = _segment()
    channel, control = segment.step_channel(0), segment.worker_control(0)
    with _children() as children:
        control.begin_generation()
        children.append(_child("take", segment, 0))
        seq = channel.post(_core.STEP_CMD_STEP, 7, b"for generation 1")
        assert _line(children[0]) == f"took {seq}"
        children[0].send_signal(signal.SIGKILL)
        children[0].wait(timeout=30)
        assert channel.pending == seq
        with pytest.raises(ConfigError, match=f"worker 0 has not answered request {seq}"):
            channel.post(_core.STEP_CMD_RESET, 0)
        assert control.begin_generation() == 2
        children.append(_child("serve", segment, 0))
        assert _line(children[1]) == f"ready {seq}"  # skipped, never served
        assert _core.wait_answers([channel], [seq], timeout_s=30) == [0]
        assert channel.response() == (2, _core.STEP_STATUS_RESTARTED, b"")
        # The successor serves what is posted after it started.
        reset = channel.post(_core.STEP_CMD_RESET, 3, b"seeds")
        assert _core.wait_answers([channel], [reset], timeout_s=30) == [0]
        assert channel.response() == (2, _core.STEP_STATUS_OK, answer(0, reset, 3, b"seeds"))
        _close(channel, children[1])


@pytest.mark.timeout(120)
def test_oversize_payloads_are_refused_naming_both_sizes() -> None:
    segment = _segment(mailbox_bytes=100)
    channel = segment.step_channel(0)
    with pytest.raises(ConfigError, match="request payload of 101 bytes for worker 0 exceeds the mailbox of 100 bytes"):
        channel.post(_core.STEP_CMD_STEP, 0, b"x" * 101)
    assert channel.pending is None  # nothing was posted
    with _children() as children:
        segment.worker_control(0).begin_generation()
        children.append(_child("serve", segment, 0))
        assert _line(children[0]) == "ready None"
        seq = channel.post(_core.STEP_CMD_CALL, 0, bytearray(100))  # exactly full; any buffer
        assert _core.wait_answers([channel], [seq], timeout_s=30) == [0]
        _generation, status, payload = channel.response()
        assert status == _core.STEP_STATUS_ERROR
        assert "response payload of 101 bytes for worker 0 exceeds the mailbox of 100 bytes" in payload.decode()
        _close(channel, children[0])


def test_both_ends_in_one_process_and_misuse_named() -> None:
    channel = _segment(workers=2).step_channel(1)
    assert (channel.worker, channel.mailbox_bytes, channel.pending) == (1, MAILBOX, None)
    with pytest.raises(ConfigError, match="no request was posted to worker 1"):
        channel.response()
    with pytest.raises(ConfigError, match="worker 1 serves no request"):
        channel.respond(_core.STEP_STATUS_OK)
    assert channel.wait_request(timeout_s=0) is None
    seq = channel.post(_core.STEP_CMD_RESET, 2**64 - 1, memoryview(b"abc"))
    assert (seq, channel.pending, channel.answered(seq)) == (1, 1, False)
    with pytest.raises(ConfigError, match="worker 1 has not answered request 1 yet: no response"):
        channel.response()
    assert channel.wait_request(timeout_s=0) == (1, _core.STEP_CMD_RESET, 2**64 - 1, b"abc")
    with pytest.raises(ConfigError, match="worker 1 is serving request 1"):
        channel.wait_request(timeout_s=0)
    with pytest.raises(ConfigError, match="RESTARTED"):
        channel.respond(_core.STEP_STATUS_RESTARTED)
    with pytest.raises(ConfigError, match="unsigned bytes"):
        channel.respond(_core.STEP_STATUS_OK, "text")
    assert channel.respond(42, b"answer") == 1
    assert channel.answered(1) and channel.pending is None
    assert channel.response() == (0, 42, b"answer")  # generation 0: never begun
    assert channel.skip_pending() is None


def test_requests_for_an_older_generation_are_never_served() -> None:
    segment = _segment()
    channel, control = segment.step_channel(0), segment.worker_control(0)
    control.begin_generation()
    stale = channel.post(_core.STEP_CMD_STEP, 0, b"for generation 1")
    assert control.begin_generation() == 2  # restarted before the request was taken
    # The worker's end (opened now, as generation 2) answers it RESTARTED on the way.
    assert channel.wait_request(timeout_s=0) is None
    assert channel.answered(stale) and channel.response() == (2, _core.STEP_STATUS_RESTARTED, b"")
    # A request posted for generation 2 is served.
    seq = channel.post(_core.STEP_CMD_RESET, 1)
    assert channel.wait_request(timeout_s=0) == (seq, _core.STEP_CMD_RESET, 1, b"")
    channel.respond(_core.STEP_STATUS_OK)
    assert channel.response() == (2, _core.STEP_STATUS_OK, b"")
    # One for generation 3 means this (generation 2) process was replaced: it must not serve it.
    assert control.begin_generation() == 3
    seq = channel.post(_core.STEP_CMD_STEP, 0)
    superseded = f"worker 0 generation 2 was superseded: request {seq} is for generation 3"
    with pytest.raises(TransportError, match=superseded):
        channel.wait_request(timeout_s=0)
    assert channel.pending == seq


def test_segments_without_a_mailbox_have_no_step_channels_and_do_not_grow() -> None:
    sizes = {"n_workers": 3, "envs_per_worker": 1, "steps": 1, "slots_per_worker": 2}
    sizes |= {"weights_capacity": 0, "weights_buffers": 3}
    fields = [("x", "uint8", ())]
    plain = _core.segment_bytes(fields, **sizes)
    assert _core.segment_bytes(fields, **sizes, mailbox_bytes=0) == plain
    # 3 workers, each 384 B of control words and 2 x 4096 B of mailbox, in 4 KiB pages.
    assert _core.segment_bytes(fields, **sizes, mailbox_bytes=4096) == plain + 3 * 3 * 4096
    segment = _core.Segment.create(fields, **sizes, backing="auto")
    assert segment.total_len == plain and segment.mailbox_bytes == 0
    with pytest.raises(ConfigError, match="no step channels: it was created with mailbox_bytes=0"):
        segment.step_channel(0)
    with_mailbox = _core.Segment.create(fields, **sizes, backing="auto", mailbox_bytes=4096)
    assert with_mailbox.total_len == plain + 3 * 3 * 4096 and with_mailbox.mailbox_bytes == 4096
    assert with_mailbox.layout_hash != segment.layout_hash
    with pytest.raises(ConfigError, match="worker 3 out of range"):
        with_mailbox.step_channel(3)
    with pytest.raises(ConfigError, match="mailbox_bytes"):
        _core.segment_bytes(fields, **sizes, mailbox_bytes=-1)
    assert with_mailbox.step_channel(2) is with_mailbox.step_channel(2)
    attached = _core.Segment.attach(with_mailbox.fd, timeout_s=1)
    assert attached.mailbox_bytes == 4096 and attached.layout_hash == with_mailbox.layout_hash


def test_waits_time_out_and_wait_answers_checks_its_arguments() -> None:
    segment = _segment(workers=2)
    a, b = segment.step_channel(0), segment.step_channel(1)
    assert a.wait_request(timeout_s=0.05) is None
    seqs = [a.post(_core.STEP_CMD_STEP, 0), b.post(_core.STEP_CMD_STEP, 0)]
    assert _core.wait_answers([a, b], seqs, timeout_s=0.05) == []
    assert b.wait_request(timeout_s=1) is not None
    b.respond(_core.STEP_STATUS_OK)
    assert _core.wait_answers([a, b], seqs, timeout_s=0.05) == [1]  # not all: what answered
    assert _core.wait_answers([a, b], seqs, timeout_s=0.05, any=True) == [1]
    with pytest.raises(ConfigError, match="at least one channel"):
        _core.wait_answers([], [], timeout_s=0)
    with pytest.raises(ConfigError, match="one seq per channel: 2 channels, 1 seqs"):
        _core.wait_answers([a, b], [1], timeout_s=0)
    other = _segment().step_channel(0)
    with pytest.raises(ConfigError, match="channel 1 belongs to another"):
        _core.wait_answers([a, other], [1, 1], timeout_s=0)
    with pytest.raises(ConfigError, match="timeout_s"):
        _core.wait_answers([a], [1], timeout_s=-1)


def _serve(channel: _core.StepChannel, status: int = _core.STEP_STATUS_OK, payload: bytes = b"") -> None:
    """Answer the request waiting on ``channel``, as its worker would."""
    assert channel.wait_request(timeout_s=1) is not None
    channel.respond(status, payload)


@pytest.mark.timeout(60)
def test_a_pool_takes_the_longest_waiting_of_the_answered_workers_first() -> None:
    segment = _segment(workers=3)
    channels = [segment.step_channel(w) for w in range(3)]
    requests = _core.StepRequests(channels)
    requests.post_all(_core.STEP_CMD_STEP, [0, 0, 0])
    queue = [2, 1, 0]  # the pool's order: worker 2's request was posted first, then 1's, then 0's
    assert requests.oldest_answered(queue, 1, timeout_s=0.05) == ([], [])  # none answered: nothing taken
    _serve(channels[0])
    _serve(channels[1], 42, b"more")
    more = (1, 0, 42, b"more")  # (worker, generation, status, payload) of an answer that says more than "done"
    assert requests.oldest_answered(queue, 1, timeout_s=1) == ([1], [more])  # 1 waited longer than 0
    assert requests.oldest_answered(queue, 2, timeout_s=1) == ([1, 0], [more])
    assert requests.oldest_answered(queue, 3, timeout_s=0.05) == ([], [])  # 2 has not answered
    # A wait for more than have answered returns once they have (the GIL is released meanwhile).
    late = threading.Thread(target=_serve, args=(channels[2],))
    late.start()
    try:
        assert requests.oldest_answered(queue, 3, timeout_s=30) == ([2, 1, 0], [more])
    finally:
        late.join(timeout=30)
    assert requests.oldest_answered(queue, 1, timeout_s=0) == ([2], [])
    for bad_queue, count, match in [
        (queue, 0, "oldest_answered of 0 workers out of 3"),
        ([0], 2, "oldest_answered of 2 workers out of 1"),
        ([1, 1], 1, "each once"),
        ([3], 1, "below 3"),
    ]:
        with pytest.raises(ConfigError, match=match):
            requests.oldest_answered(bad_queue, count, timeout_s=0)


@pytest.mark.timeout(60)
def test_shutdown_ends_a_waiting_worker_and_a_waiting_trainer() -> None:
    segment = _segment()
    channel = segment.step_channel(0)
    results: list[object] = []
    worker = threading.Thread(target=lambda: results.append(channel.wait_request(timeout_s=None)))
    worker.start()  # nothing is ever posted: this wait can only end through shutdown
    segment.shutdown()
    worker.join(timeout=30)
    assert not worker.is_alive() and results == [None]
    seq = channel.post(_core.STEP_CMD_STEP, 0)
    assert _core.wait_answers([channel], [seq], timeout_s=None) == []


def _blocked_in_futex(pid: int) -> bool:
    """Whether the process's main thread sleeps in a futex wait (where a sliced wait sleeps)."""
    try:
        return Path(f"/proc/{pid}/wchan").read_text().startswith("futex")
    except OSError:
        return False


@pytest.mark.timeout(60)
@pytest.mark.parametrize("wait", ["wait-answers", "oldest-answered"])
def test_ctrl_c_interrupts_a_trainer_waiting_for_answers(wait: str) -> None:
    segment = _segment()
    with _children() as children:
        children.append(_child(wait, segment, stderr=subprocess.PIPE))
        child = children[0]
        assert _line(child) == "waiting"
        wait_until(lambda: _blocked_in_futex(child.pid), timeout_s=30, what=f"the child to block in its wait ({wait})")
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=30)
        assert "interrupted" in out and "KeyboardInterrupt" in err
