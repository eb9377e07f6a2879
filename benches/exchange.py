"""Round-trip latency of the step channels: the transport's floor per vector-env step.

The trainer posts a STEP request to every worker (``StepChannel.post``), waits for all the
answers (``_core.wait_answers``) and reads each answer's header (``StepChannel.response``).
Each worker is a process (``subprocess``, attached to the inherited memfd) whose "env" does
nothing: it takes the request (``wait_request``) and answers it at once (``respond``). So a
round is exactly what the transport adds to every step of a vector env: both sides run in
Python through the bindings, wait with the bindings' default policy (spin 64, yield 2, then
futex, GIL released) and pass an empty payload (or ``--payload`` bytes each way).

For scale, the same round trip through a ``multiprocessing.Pipe`` per worker (send_bytes /
recv_bytes of the same payload, forked children) in the same run, interleaved in blocks with
the step channels so that a change in the machine's load affects both alike.

Run:
    python benches/exchange.py              # ~10 s: 1 and 2 workers, 5000 rounds each
    python benches/exchange.py --rounds 20000 --payload 256

Prints the median and p99 in microseconds per round (every worker answered).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import subprocess
import sys
from typing import Any

from transport import load_core, percentiles

_core = load_core()

MAILBOX = 4096


def serve(fd: int, worker: int) -> None:
    """A worker whose env does nothing: answer every request at once, echoing its payload."""
    segment = _core.Segment.attach(fd, timeout_s=10)
    channel = segment.step_channel(worker)
    channel.skip_pending()
    while True:
        got = channel.wait_request(timeout_s=None)
        if got is None:  # shutdown
            return
        _seq, command, _arg, payload = got
        channel.respond(_core.STEP_STATUS_OK, payload)
        if command == _core.STEP_CMD_CLOSE:
            return


class Exchange:
    """The trainer's side of ``workers`` step channels served by child processes."""

    def __init__(self, workers: int, payload: bytes) -> None:
        self.segment = _core.Segment.create(
            [("unused", "uint8", ())],
            n_workers=workers,
            envs_per_worker=1,
            steps=1,
            slots_per_worker=1,
            weights_capacity=0,
            weights_buffers=3,
            backing="auto",
            mailbox_bytes=MAILBOX,
        )
        fd = self.segment.fd
        self.children = [
            subprocess.Popen([sys.executable, __file__, "--serve", str(fd), str(w)], pass_fds=(fd,))
            for w in range(workers)
        ]
        self.channels = [self.segment.step_channel(w) for w in range(workers)]
        self.payload = payload

    def round_trip(self) -> None:
        seqs = [channel.post(_core.STEP_CMD_STEP, 0, self.payload) for channel in self.channels]
        if len(_core.wait_answers(self.channels, seqs, timeout_s=10)) != len(seqs):
            raise RuntimeError("a worker did not answer within 10 s")
        for channel in self.channels:
            _generation, status, payload = channel.response()
            if status != _core.STEP_STATUS_OK or payload != self.payload:
                raise RuntimeError(f"bad answer: status {status}, {len(payload)} bytes")

    def close(self) -> None:
        seqs = [channel.post(_core.STEP_CMD_CLOSE, 0) for channel in self.channels]
        _core.wait_answers(self.channels, seqs, timeout_s=10)
        for child in self.children:
            if child.wait(timeout=30) != 0:
                raise RuntimeError(f"worker exited with {child.returncode}")


def pipe_serve(conn: Any) -> None:
    """The pipe peer of :func:`serve`: echo every message; an empty one ends it."""
    while True:
        msg = conn.recv_bytes()
        conn.send_bytes(msg)
        if not msg:
            return


class Pipes:
    """The same round trip over one ``multiprocessing.Pipe`` per worker (forked children)."""

    def __init__(self, workers: int, payload: bytes) -> None:
        ctx = mp.get_context("fork")
        self.conns, self.procs = [], []
        for _ in range(workers):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=pipe_serve, args=(child,), daemon=True)
            proc.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(proc)
        # Never empty: an empty message is the stop signal.
        self.payload = payload or b"s"

    def round_trip(self) -> None:
        for conn in self.conns:
            conn.send_bytes(self.payload)
        for conn in self.conns:
            if conn.recv_bytes() != self.payload:
                raise RuntimeError("bad pipe echo")

    def close(self) -> None:
        for conn in self.conns:
            conn.send_bytes(b"")
            conn.recv_bytes()
        for proc in self.procs:
            proc.join(timeout=30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5000, help="timed rounds per configuration")
    ap.add_argument("--payload", type=int, default=0, help=f"payload bytes each way (at most {MAILBOX})")
    ap.add_argument("--serve", nargs=2, type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(*args.serve)
        return
    payload = bytes(range(256)) * (args.payload // 256) + bytes(args.payload % 256)
    print(f"{os.cpu_count()} CPUs, {args.rounds} rounds, {args.payload} B payload each way")
    print(f"{'workers':>7}  {'transport':<22}  {'median µs':>9}  {'p99 µs':>8}")
    names = ("step channel", "multiprocessing.Pipe")
    for workers in (1, 2):
        peers: list[Exchange | Pipes] = []
        try:
            peers.append(Exchange(workers, payload))
            peers.append(Pipes(workers, payload))
            results = percentiles([peer.round_trip for peer in peers], args.rounds, rounds=5)
        finally:
            for peer in peers:
                peer.close()
        for name, (median, p99) in zip(names, results, strict=True):
            print(f"{workers:>7}  {name:<22}  {median:>9.1f}  {p99:>8.1f}")


if __name__ == "__main__":
    main()
