"""Child-process side of the step-channel tests: ``python exchange_child.py MODE FD ARGS...``.

Modes (the segment's fd on the command line, inherited through ``pass_fds``):
    serve WORKER     skip what a predecessor left pending (prints ``ready <seq or None>``), then
                     answer requests until STEP_CMD_CLOSE: a STEP with :func:`answer`, a CALL by
                     trying an answer one byte over the mailbox and answering the ConfigError's
                     message with STEP_STATUS_ERROR
    take WORKER      take one request without answering it (prints ``took <seq>``), then hang
                     until killed: a worker that dies while serving
    wait-answers     post a request to worker 0 (which nobody serves) and wait for its answer
                     without a deadline (for the Ctrl-C test)
    oldest-answered  the same, waiting as a pool's recv() does (StepRequests.oldest_answered)
"""

from __future__ import annotations

import sys
import time

from pycollect import ConfigError, _core


def answer(worker: int, seq: int, arg: int, payload: bytes) -> bytes:
    """What ``serve`` answers a STEP with: a function of everything the request carried."""
    return bytes([worker, seq % 256]) + arg.to_bytes(8, "little") + payload[::-1]


def serve(channel: _core.StepChannel) -> None:
    """Answer requests until STEP_CMD_CLOSE."""
    while True:
        got = channel.wait_request(timeout_s=60)
        if got is None:
            raise SystemExit("no request within 60 s")
        seq, command, arg, payload = got
        if command == _core.STEP_CMD_CLOSE:
            channel.respond(_core.STEP_STATUS_OK, b"bye")
            return
        if command == _core.STEP_CMD_CALL:
            try:
                channel.respond(_core.STEP_STATUS_OK, b"x" * (channel.mailbox_bytes + 1))
            except ConfigError as error:
                channel.respond(_core.STEP_STATUS_ERROR, str(error).encode())
            continue
        channel.respond(_core.STEP_STATUS_OK, answer(channel.worker, seq, arg, payload))


def main() -> None:
    mode, fd = sys.argv[1], int(sys.argv[2])
    segment = _core.Segment.attach(fd, timeout_s=10)
    if mode == "serve":
        channel = segment.step_channel(int(sys.argv[3]))
        print(f"ready {channel.skip_pending()}", flush=True)
        serve(channel)
    elif mode == "take":
        channel = segment.step_channel(int(sys.argv[3]))
        channel.skip_pending()
        got = channel.wait_request(timeout_s=60)
        assert got is not None, "no request within 60 s"
        print(f"took {got[0]}", flush=True)
        time.sleep(600)
    elif mode in ("wait-answers", "oldest-answered"):  # a trainer's wait for an answer that never comes
        channel = segment.step_channel(0)
        requests = _core.StepRequests([channel])
        requests.post_all(_core.STEP_CMD_STEP, [0])
        print("waiting", flush=True)
        try:
            if mode == "wait-answers":
                _core.wait_answers([channel], [channel.pending], timeout_s=None)
            else:  # a pool's recv()
                requests.oldest_answered([0], 1, timeout_s=None)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            raise
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
