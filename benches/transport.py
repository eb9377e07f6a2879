"""Slot handoff through the Python bindings next to ``multiprocessing.Pipe``, in the same run.

Two processes share one segment (``pycollect._core.Segment``; the child is started with
``subprocess`` and attaches to the inherited memfd through ``pass_fds``). Measured:

* round-trip latency (p50/p99) of an 8-byte message: the parent claims a slot on ring 0,
  stamps it and commits; the child pops it, checks it, releases it and answers on ring 1.
  Two waits: ``Consumer.pop`` (the bindings' default policy: spin 64, yield 2, futex, GIL
  released) and a Python busy loop on ``Consumer.try_pop`` ("spin"). Next to a
  ``multiprocessing.Pipe`` echo (``send_bytes``/``recv_bytes``). Both with the two processes
  pinned to CPUs 0 and 1 and unpinned.
* throughput for 64 B, 4 KiB, 64 KiB and 1 MiB slots: the parent claims, fills (numpy copy
  plus a sequence stamp) and commits every slot; the child pops, copies the payload out of
  ``np.asarray(lease.view("payload"))``, checks the stamps and releases. Next to a
  ``multiprocessing.Pipe`` sending the same stamped messages (``send_bytes``; the child's
  ``recv_bytes`` copies them out and checks the stamps).

Run:
    python benches/transport.py            # full: 20k latency samples, 3 reps per rate
    python benches/transport.py --quick    # ~15 s

Prints tables and writes ``benches/results/transport.json``.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import json
import multiprocessing as mp
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

RESULTS = Path(__file__).parent / "results"
SIZES = (64, 4096, 64 * 1024, 1024 * 1024)
STAMP = 8
# A commit flag (outside the bits the transport defines) asking the sink to acknowledge.
ACK = 1 << 16
PLACEMENTS = {"pinned 0/1": (0, 1), "unpinned": (None, None)}


def load_core() -> ModuleType:
    """Loads the extension ``pycollect._core`` without running ``pycollect/__init__.py``.

    The package imports torch and friends (about 3 s); children need only the extension.
    """
    spec = importlib.util.find_spec("pycollect")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("pycollect is not installed")
    paths = [p for d in spec.submodule_search_locations for p in sorted(Path(d).glob("_core*.so"))]
    if not paths:
        raise ImportError("pycollect._core is not built (pip install -e .)")
    loader = importlib.machinery.ExtensionFileLoader("pycollect._core", str(paths[0]))
    core_spec = importlib.util.spec_from_file_location("pycollect._core", paths[0], loader=loader)
    assert core_spec is not None
    module = importlib.util.module_from_spec(core_spec)
    loader.exec_module(module)
    return module


_core = load_core()


def ring_slots(size: int) -> int:
    """Slots per ring for a throughput run: about 4 MiB of payload, 4 to 256 slots."""
    return max(4, min(256, (4 << 20) // size))


def pin(cpu: int | None, original: set[int]) -> None:
    os.sched_setaffinity(0, original if cpu is None else {cpu})


def human(size: int) -> str:
    if size >= 1 << 20:
        return f"{size >> 20} MiB"
    if size >= 1 << 10:
        return f"{size >> 10} KiB"
    return f"{size} B"


def flat_u8(view: Any) -> np.ndarray:
    """A flat uint8 numpy view of a SlotView ([K, T, size])."""
    return np.asarray(view).reshape(-1)


# ----------------------------------------------------------------------------- shm child


def shm_child(role: str, fd: int, cpu: int | None, spin: bool) -> None:
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    seg = _core.Segment.attach(fd, timeout_s=10)
    cons = seg.consumer(0)
    size = seg.fields()[0][2][0]
    sink = np.empty(size, dtype=np.uint8)
    sink64 = sink.view(np.uint64)
    if role == "echo":
        prod = seg.producer(1, 0)
        out = [flat_u8(seg.slot_view("payload", s, 1, writable=True)).view(np.uint64) for s in range(prod.slots)]
        while True:
            if spin:
                lease = cons.try_pop()
                while lease is None:
                    if seg.is_shutdown:
                        return
                    lease = cons.try_pop()
            else:
                lease = cons.pop()
                if lease is None:
                    return
            seq = int(np.asarray(lease.view("payload")).reshape(-1).view(np.uint64)[0])
            lease.release()
            idx = prod.claim()
            if idx is None:
                return
            out[idx][0] = seq
            prod.commit(idx)
    else:  # sink
        ack = seg.producer(1, 0)
        while True:
            lease = cons.pop()
            if lease is None:
                return
            np.copyto(sink, flat_u8(lease.view("payload")))
            seq = lease.seq
            if sink64[0] != seq or sink64[-1] != seq:
                raise SystemExit(f"payload check failed at seq {seq}: {sink64[0]}/{sink64[-1]}")
            flags = lease.flags
            lease.release()
            if flags & ACK:
                idx = ack.claim()
                if idx is None:
                    return
                ack.commit(idx)


class ShmPeer:
    """The parent's side of a segment shared with a child process."""

    def __init__(self, role: str, size: int, slots: int, child_cpu: int | None, spin: bool = False):
        self.seg = _core.Segment.create(
            [("payload", "uint8", (size,))],
            n_workers=2,
            envs_per_worker=1,
            steps=1,
            slots_per_worker=slots,
            weights_capacity=0,
            weights_buffers=3,
            backing="auto",
        )
        fd = self.seg.fd
        cmd = [sys.executable, __file__, "--child", role, "--fd", str(fd)]
        if child_cpu is not None:
            cmd += ["--cpu", str(child_cpu)]
        if spin:
            cmd.append("--spin")
        self.child = subprocess.Popen(cmd, pass_fds=(fd,))
        self.prod = self.seg.producer(0, 0)
        self.cons = self.seg.consumer(1)
        self.spin = spin
        self.size = size
        self.views = [flat_u8(self.seg.slot_view("payload", s, 0, writable=True)) for s in range(slots)]
        self.views64 = [v.view(np.uint64) for v in self.views]
        self.src = np.full(size, 0xA5, dtype=np.uint8)
        self.sent = 0

    def close(self) -> None:
        self.seg.shutdown()
        if self.child.wait(timeout=30) != 0:
            raise RuntimeError(f"shm child exited with {self.child.returncode}")

    def _reply(self) -> Any:
        if not self.spin:
            return self.cons.pop()
        lease = self.cons.try_pop()
        while lease is None:
            lease = self.cons.try_pop()
        return lease

    def round_trip(self) -> None:
        idx = self.prod.claim()
        seq = self.sent
        self.views64[idx][0] = seq
        self.prod.commit(idx)
        self.sent += 1
        lease = self._reply()
        got = int(np.asarray(lease.view("payload")).reshape(-1).view(np.uint64)[0])
        lease.release()
        if got != seq:
            raise RuntimeError(f"echo returned {got}, expected {seq}")

    def stream(self, n: int) -> None:
        prod, views, views64, src = self.prod, self.views, self.views64, self.src
        for i in range(n):
            idx = prod.claim()
            np.copyto(views[idx], src)
            v64 = views64[idx]
            v64[0] = v64[-1] = self.sent
            self.sent += 1
            prod.commit(idx, ACK if i == n - 1 else 0)
        lease = self.cons.pop()  # the sink's acknowledgement of the last slot
        lease.release()


# ----------------------------------------------------------------------------- pipe child


def pipe_child(conn: Any, parent_end: Any, role: str, cpu: int | None) -> None:
    parent_end.close()  # the fork copied it; an empty message is the stop signal
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    expected = 0
    while True:
        try:
            msg = conn.recv_bytes()
        except EOFError:
            return
        if not msg:
            return
        if role == "echo":
            conn.send_bytes(msg)
            continue
        for _ in range(int.from_bytes(msg, "little")):
            m = conn.recv_bytes()
            a = np.frombuffer(m, dtype=np.uint64)
            if a[0] != expected or a[-1] != expected:
                raise SystemExit(f"pipe payload check failed at {expected}")
            expected += 1
        conn.send_bytes(b"k")


class PipePeer:
    """The parent's end of a ``multiprocessing.Pipe`` to a forked child."""

    def __init__(self, role: str, size: int, child_cpu: int | None):
        ctx = mp.get_context("fork")
        self.conn, child_conn = ctx.Pipe()
        self.proc = ctx.Process(target=pipe_child, args=(child_conn, self.conn, role, child_cpu), daemon=True)
        self.proc.start()
        child_conn.close()
        self.buf = np.full(size, 0xA5, dtype=np.uint8)
        self.buf64 = self.buf.view(np.uint64)
        self.sent = 0

    def close(self) -> None:
        self.conn.send_bytes(b"")
        self.conn.close()
        self.proc.join(timeout=30)
        if self.proc.exitcode != 0:
            raise RuntimeError(f"pipe child exited with {self.proc.exitcode}")

    def round_trip(self) -> None:
        seq = self.sent
        self.sent += 1
        self.conn.send_bytes(seq.to_bytes(STAMP, "little"))
        got = int.from_bytes(self.conn.recv_bytes(), "little")
        if got != seq:
            raise RuntimeError(f"pipe echo returned {got}, expected {seq}")

    def stream(self, n: int) -> None:
        conn, buf, buf64 = self.conn, self.buf, self.buf64
        conn.send_bytes(n.to_bytes(8, "little"))
        for _ in range(n):
            buf64[0] = buf64[-1] = self.sent
            self.sent += 1
            conn.send_bytes(buf)
        conn.recv_bytes()


# ----------------------------------------------------------------------------- measuring


def percentiles(fs: list[Callable[[], None]], n: int, rounds: int = 10) -> list[tuple[float, float]]:
    """p50 and p99 in microseconds for each of ``fs``.

    ``n // 10`` warm-up calls each, then ``rounds`` rounds of ``n // rounds`` timed calls of
    every function in turn, so that the machine's drift affects all of them alike.
    """
    for f in fs:
        for _ in range(n // 10):
            f()
    clock = time.perf_counter_ns
    samples: list[list[int]] = [[] for _ in fs]
    for _ in range(rounds):
        for f, out in zip(fs, samples, strict=True):
            for _ in range(n // rounds):
                t = clock()
                f()
                out.append(clock() - t)
    result = []
    for v in samples:
        v.sort()
        result.append((v[len(v) // 2] / 1e3, v[len(v) * 99 // 100] / 1e3))
    return result


def rate(f: Callable[[int], None], n: int, reps: int, warm: int = 1) -> float:
    """Median slots/s of ``reps`` runs moving ``n`` slots, after a warm-up of ``n // 10`` (>= ``warm``)."""
    f(max(1, n // 10, warm))
    runs = []
    for _ in range(reps):
        t = time.perf_counter()
        f(n)
        runs.append(n / (time.perf_counter() - t))
    return statistics.median(runs)


def latencies(placement: str, n: int, original: set[int]) -> list[dict[str, Any]]:
    parent_cpu, child_cpu = PLACEMENTS[placement]
    measured: list[tuple[str, tuple[float, float]]] = []
    # The Python busy loop alone (it would steal cycles from the others), then the blocking
    # pop and the pipe interleaved in rounds.
    pin(parent_cpu, original)
    spin = ShmPeer("echo", STAMP, 8, child_cpu, spin=True)
    try:
        measured.append(("shm try_pop spin", percentiles([spin.round_trip], n, rounds=1)[0]))
    finally:
        spin.close()
    pin(parent_cpu, original)
    shm = ShmPeer("echo", STAMP, 8, child_cpu)
    pipe = PipePeer("echo", STAMP, child_cpu)
    try:
        both = percentiles([shm.round_trip, pipe.round_trip], n)
    finally:
        shm.close()
        pipe.close()
        pin(None, original)
    measured += [("shm pop (default)", both[0]), ("mp.Pipe", both[1])]
    pipe_p50, pipe_p99 = both[1]
    return [
        {
            "placement": placement,
            "mechanism": name,
            "p50_us": p50,
            "p99_us": p99,
            "pipe_over_this_p50": pipe_p50 / p50,
            "pipe_over_this_p99": pipe_p99 / p99,
        }
        for name, (p50, p99) in measured
    ]


def throughput(placement: str, quick: bool, reps: int, original: set[int]) -> list[dict[str, Any]]:
    parent_cpu, child_cpu = PLACEMENTS[placement]
    total = (32 << 20) if quick else (256 << 20)
    max_count = 20_000 if quick else 200_000
    rows = []
    for size in SIZES:
        count = max(32, min(max_count, total // size))
        slots = ring_slots(size)
        pin(parent_cpu, original)
        shm = ShmPeer("sink", size, slots, child_cpu)
        try:
            shm_rate = rate(shm.stream, count, reps, warm=2 * slots)
        finally:
            shm.close()
        pin(parent_cpu, original)
        pipe = PipePeer("sink", size, child_cpu)
        try:
            pipe_rate = rate(pipe.stream, count, reps, warm=2 * slots)
        finally:
            pipe.close()
        pin(None, original)
        rows.append(
            {
                "placement": placement,
                "size": size,
                "slots": slots,
                "count": count,
                "shm_slots_per_s": shm_rate,
                "shm_gb_per_s": shm_rate * size / 1e9,
                "pipe_slots_per_s": pipe_rate,
                "pipe_gb_per_s": pipe_rate * size / 1e9,
                "shm_over_pipe": shm_rate / pipe_rate,
            }
        )
    return rows


def print_tables(lat: list[dict[str, Any]], thr: list[dict[str, Any]], n: int) -> None:
    print(f"\n== Python round trip, 8-byte message, {n} samples each (µs) ==")
    print(f"{'placement':<12} {'mechanism':<18} {'p50':>8} {'p99':>8} {'pipe/this p50':>14} {'pipe/this p99':>14}")
    for r in lat:
        print(
            f"{r['placement']:<12} {r['mechanism']:<18} {r['p50_us']:>8.2f} {r['p99_us']:>8.2f}"
            f" {r['pipe_over_this_p50']:>13.2f}x {r['pipe_over_this_p99']:>13.2f}x"
        )
    print("\n== Python throughput, one slot per claim/pop (consumer copies out and checks every slot) ==")
    print(
        f"{'placement':<12} {'size':>7} {'slots':>5} {'shm slots/s':>12} {'shm GB/s':>9}"
        f" {'pipe slots/s':>13} {'pipe GB/s':>9} {'shm/pipe':>9}"
    )
    for r in thr:
        print(
            f"{r['placement']:<12} {human(r['size']):>7} {r['slots']:>5} {r['shm_slots_per_s']:>12.0f}"
            f" {r['shm_gb_per_s']:>9.3f} {r['pipe_slots_per_s']:>13.0f} {r['pipe_gb_per_s']:>9.3f}"
            f" {r['shm_over_pipe']:>8.2f}x"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer samples and bytes (~15 s)")
    ap.add_argument("--out", type=Path, default=RESULTS / "transport.json")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--fd", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--cpu", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--spin", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        shm_child(args.child, args.fd, args.cpu, args.spin)
        return

    original = os.sched_getaffinity(0)
    n = 2000 if args.quick else 20_000
    reps = 1 if args.quick else 3
    placements = [p for p, (a, b) in PLACEMENTS.items() if a is None or {a, b} <= original]
    lat = [row for p in placements for row in latencies(p, n, original)]
    thr = [
        row for p in ("unpinned", "pinned 0/1") if p in placements for row in throughput(p, args.quick, reps, original)
    ]
    print_tables(lat, thr, n)

    args.out.parent.mkdir(parents=True, exist_ok=True)
    result = {
        "bench": "transport",
        "mode": "quick" if args.quick else "full",
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {
            "cpus": sorted(original),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "numpy": np.__version__,
            "pycollect_core": _core.__version__,
        },
        "latency_samples": n,
        "rate_reps": reps,
        "latency": lat,
        "throughput": thr,
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
