"""How long ``Collector.env_get_attr`` takes on a running collector, whatever its workers are doing.

CartPole-v1, random actions, 2 workers x 8 envs, 64 steps a rollout. Two cases, each timed
``--calls`` times:

``rings full``
    The trainer has not taken the workers' rollouts: every worker's ring is full and the worker
    waits for a free slot, which the call's request ends (``Producer.claim(until_request=)``,
    woken by ``Consumer.wake_producer``).
``collecting``
    Right after a batch was taken: each worker is stepping a rollout, and serves the call
    after it (a worker serves requests between two rollouts, never in one).

Usage: ``python benches/env_calls.py [--calls 30] [--json]``. Prints the median and the
largest time of each case, in milliseconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import pycollect
from pycollect.config import SLOTS_PER_WORKER
from pycollect.testing.waiting import wait_until


def main() -> None:
    """Time the calls and print (or ``--json``) the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=30, help="calls timed per case (default 30)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    times: dict[str, list[float]] = {"rings full": [], "collecting": []}
    with pycollect.Collector(
        "CartPole-v1", None, frames_per_batch=2 * 8 * 64, total_frames=-1, num_workers=2, envs_per_worker=8
    ) as collector:
        consumers = collector._engine.consumers  # type: ignore[attr-defined]
        collector.next_batch()
        for _ in range(args.calls):
            wait_until(
                lambda: all(c.available() == SLOTS_PER_WORKER for c in consumers),
                timeout_s=60,
                what="every worker's ring to fill",
            )
            start = time.perf_counter()
            collector.env_get_attr("force_mag")
            times["rings full"].append(time.perf_counter() - start)
            collector.next_batch()
            start = time.perf_counter()
            collector.env_get_attr("force_mag")
            times["collecting"].append(time.perf_counter() - start)
    figures = {
        case: {"median_ms": statistics.median(values) * 1e3, "max_ms": max(values) * 1e3}
        for case, values in times.items()
    }
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    for case, figure in figures.items():
        print(f"{case:<12} median {figure['median_ms']:.2f} ms, max {figure['max_ms']:.2f} ms ({args.calls} calls)")


if __name__ == "__main__":
    main()
