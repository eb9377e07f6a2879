"""Child-process side of the transport tests: ``python transport_child.py MODE FD ARGS...``.

Modes started with the segment's fd on the command line:
    produce N WORKER GEN   commit N slots whose payload is a function of (worker, gen, seq)
    half WORKER GEN        claim a slot, write half of it, then hang until killed
    weights-read N         read the weights store N times, checking no set is torn
    weights-spin WORKER    read the weights store as reader WORKER until killed, beating
                           WORKER's heartbeat after every read (a kill almost always lands
                           mid-read, leaving the pin of a dead reader)
    wait                   block in Consumer.pop() forever (for the Ctrl-C test)

Modes started by a ``_core.Supervisor`` (``python transport_child.py MODE``), which find the
segment at ``$PYCOLLECT_SEGMENT_FD``, their worker index in ``$PYCOLLECT_WORKER`` and their
lifeline at ``$PYCOLLECT_LIFELINE_FD``:
    idle                   beat the heartbeat until the shutdown flag is set or the lifeline
                           reads EOF, then exit 0
    supervised-weights-spin
                           weights-spin as this worker
"""

from __future__ import annotations

import os
import select
import sys
import time

import numpy as np

from pycollect import _core


def payload(n: int, worker: int, generation: int, seq: int) -> np.ndarray:
    """The bytes slot ``seq`` of (worker, generation) must hold: cheap to make and to check."""
    out = ((np.arange(n, dtype=np.uint32) * 31 + seq * 7 + worker * 13 + generation * 3) % 251).astype(np.uint8)
    out[: min(8, n)] = np.frombuffer(np.uint64(seq).tobytes(), np.uint8)[: min(8, n)]
    return out


def spin_reading_weights(segment: _core.Segment, worker: int) -> None:
    """Read the weights store as ``worker`` forever, beating its heartbeat after every read."""
    reader, control = segment.weights_reader(worker), segment.worker_control(worker)
    out = np.empty(segment.weights_capacity, np.uint8)
    while True:
        assert reader.read_into(out) is not None, "nothing published"
        control.beat()


def supervised(mode: str) -> None:
    """The modes of a process started by ``_core.Supervisor``."""
    segment = _core.Segment.attach(int(os.environ[_core.ENV_SEGMENT_FD]), timeout_s=10)
    worker = int(os.environ[_core.ENV_WORKER])
    if mode == "idle":
        control = segment.worker_control(worker)
        control.pid = os.getpid()
        control.state = "running"
        lifeline = select.poll()
        lifeline.register(int(os.environ[_core.ENV_LIFELINE_FD]), select.POLLIN)
        while not segment.is_shutdown:
            control.beat()
            if lifeline.poll(50):  # EOF: the supervisor is done with this worker
                break
    elif mode == "supervised-weights-spin":
        spin_reading_weights(segment, worker)
    else:
        raise SystemExit(f"unknown mode {mode!r}")


def main() -> None:
    mode = sys.argv[1]
    if len(sys.argv) == 2:
        supervised(mode)
        return
    fd = int(sys.argv[2])
    segment = _core.Segment.attach(fd, timeout_s=10)
    if mode == "produce":
        count, worker, generation = (int(a) for a in sys.argv[3:6])
        producer = segment.producer(worker, generation)
        for seq in range(count):
            slot = producer.claim(timeout_s=30)
            assert slot is not None, "claim timed out"
            view = np.asarray(segment.slot_view("payload", slot, worker, writable=True))
            view.reshape(-1)[:] = payload(view.size, worker, generation, seq)
            producer.commit(slot)
    elif mode == "half":
        worker, generation = int(sys.argv[3]), int(sys.argv[4])
        producer = segment.producer(worker, generation)
        slot = producer.claim(timeout_s=30)
        assert slot is not None
        view = np.asarray(segment.slot_view("payload", slot, worker, writable=True)).reshape(-1)
        view[: view.size // 2] = 0xAB
        print("ready", flush=True)
        time.sleep(600)
    elif mode == "weights-read":
        reader = segment.weights_reader(0)
        out = np.empty(segment.weights_capacity, np.uint8)
        seen = set()
        for _ in range(int(sys.argv[3])):
            got = reader.read_into(out)
            if got is None:
                continue
            version, nbytes = got
            data = out[:nbytes]
            if not (data == data[0]).all() or int(data[0]) != version % 256:
                print(f"torn weights: version {version}, bytes {np.unique(data)[:5]}", flush=True)
                sys.exit(3)
            seen.add(version)
        print(f"versions {len(seen)}", flush=True)
    elif mode == "weights-spin":
        spin_reading_weights(segment, int(sys.argv[3]))
    elif mode == "wait":
        consumer = segment.consumer(0)
        print("waiting", flush=True)
        try:
            consumer.pop()
        except KeyboardInterrupt:
            print(f"interrupted {time.monotonic()}", flush=True)  # CLOCK_MONOTONIC: system-wide
            raise
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
