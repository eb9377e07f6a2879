"""Frames/s of 2 Ray actors x 1 worker next to a local Collector with 2 workers (same total envs).

CartPole, random policy, sync batches, interleaved rounds (ray, local, ray, local, ...) so both
see the same machine state; plus what the object store adds per batch (ray.put in an actor's
place and ray.get plus the trainer's copy, of one packed batch). Run inside a loopback-only
network namespace::

    unshare --net bash -c 'ip link set lo up && python plugins/pycollect-ray/benches/ray_throughput.py'
"""

from __future__ import annotations

import argparse
import statistics
import time

import ray

from pycollect import Collector
from pycollect_ray import RayEngine
from pycollect_ray.actor import pack
from pycollect_ray.engine import _unpack


def _rate(collector: Collector, batches: int) -> float:
    collector.next_batch()  # warm: workers started, first rollout in flight
    start = time.perf_counter()
    frames = sum(collector.next_batch().numel() for _ in range(batches))
    return frames / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--frames-per-batch", type=int, default=4000)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    common = {"frames_per_batch": args.frames_per_batch, "num_workers": 1, "seed": 0}
    ray_collector = Collector("CartPole-v1", engine=RayEngine(num_actors=2, num_cpus_per_actor=1), **common)
    local = Collector("CartPole-v1", **{**common, "num_workers": 2})
    rates: dict[str, list[float]] = {"ray 2 actors x 1 worker": [], "local 2 workers": []}
    try:
        for _ in range(args.rounds):
            rates["ray 2 actors x 1 worker"].append(_rate(ray_collector, args.batches))
            rates["local 2 workers"].append(_rate(local, args.batches))
        half = local.next_batch().clone()[:1]  # one actor's share of a sync batch
    finally:
        ray_collector.shutdown()
        local.shutdown()
    for name, values in rates.items():
        rounds = ", ".join(f"{value:.0f}" for value in values)
        print(f"{name:26s} {statistics.median(values):10.0f} frames/s (rounds: {rounds})")
    packed = pack(half)
    puts, gets = [], []
    for _ in range(50):
        start = time.perf_counter()
        ref = ray.put(packed)
        middle = time.perf_counter()
        _unpack([(0, ray.get(ref))], 1)
        gets.append(time.perf_counter() - middle)
        puts.append(middle - start)
        del ref
    nbytes = sum(array.nbytes for _, array in packed["fields"])
    print(
        f"object store, one actor batch ({half.numel()} frames, {nbytes / 1e3:.0f} kB): ray.put "
        f"{statistics.median(puts) * 1e3:.2f} ms, ray.get + copy {statistics.median(gets) * 1e3:.2f} ms"
    )
    ray.shutdown()


if __name__ == "__main__":
    main()
