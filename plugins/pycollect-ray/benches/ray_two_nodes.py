"""Frames/s of 2 Ray actors on 2 nodes vs 2 actors on 1 node vs a local collector; the cost of a rollout between nodes.

The cluster is a :class:`pycollect_ray.testing.TwoNodeCluster` (this namespace the head, the worker
node in a namespace of its own, a veth pair between them): both "nodes" share this machine's
cores, so the figures show what Ray's placement and the object store's transfer cost, not what a
second machine adds. CartPole, random policy, sync batches, interleaved rounds (2 nodes, 1 node,
local, 2 nodes, ...) so all three see the same machine state. Then what fetching one actor's
rollout costs the trainer when it was stored on the other node (across the veth link) and when it
was stored on the trainer's node (``ray.get`` plus the copy into the batch). Run as root::

    unshare --net bash -c 'ip link set lo up && python plugins/pycollect-ray/benches/ray_two_nodes.py'
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import ray
import torch

from pycollect import Collector
from pycollect_ray import RayEngine
from pycollect_ray.actor import pack
from pycollect_ray.engine import _unpack
from pycollect_ray.testing import TwoNodeCluster

ON_HEAD = {"resources": {"node_head": 0.01}}  # the trainer's node
ON_WORKER = {"resources": {"node_worker": 0.01}}


def _rate(collector: Collector, batches: int) -> float:
    collector.next_batch()  # warm: workers started, first rollout in flight
    start = time.perf_counter()
    frames = sum(collector.next_batch().numel() for _ in range(batches))
    return frames / (time.perf_counter() - start)


class Holder:
    """An actor that stores a packed rollout in its node's object store (a task's return value, as collect() does)."""

    def __init__(self, packed: dict[str, Any]) -> None:
        self.packed = packed

    def rollout(self) -> dict[str, Any]:
        return self.packed


def _fetch_ms(holder: Any, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        ref = holder.rollout.remote()
        ray.wait([ref], fetch_local=False)  # stored on the holder's node, not fetched yet
        start = time.perf_counter()
        _unpack([(0, ray.get(ref))], 1)
        times.append(time.perf_counter() - start)
        del ref
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--frames-per-batch", type=int, default=4000)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    # Logical CPUs (Ray's bookkeeping, not cores): room for 4 actors of 1 CPU on the head (2 per
    # Ray collector below) and 2 on the worker node; the machine's cores are shared by all.
    with TwoNodeCluster(head_cpus=4, worker_cpus=2) as cluster:
        ray.init(address=cluster.address, log_to_driver=False)
        common: dict[str, Any] = {"frames_per_batch": args.frames_per_batch, "num_workers": 1, "seed": 0}
        runs = {
            "ray, 2 actors on 2 nodes": [ON_HEAD, ON_WORKER],
            "ray, 2 actors on 1 node": [ON_HEAD, ON_HEAD],
        }
        collectors = {
            name: Collector("CartPole-v1", engine=RayEngine(num_actors=2, actor_options=options), **common)
            for name, options in runs.items()
        }
        collectors["local, 2 workers"] = Collector("CartPole-v1", **{**common, "num_workers": 2})
        rates: dict[str, list[float]] = {name: [] for name in collectors}
        try:
            for _ in range(args.rounds):
                for name, collector in collectors.items():
                    rates[name].append(_rate(collector, args.batches))
            half = collectors["local, 2 workers"].next_batch().clone()[:1]  # one actor's share of a sync batch
        finally:
            for collector in collectors.values():
                collector.shutdown()
        for name, values in rates.items():
            rounds = ", ".join(f"{value:,.0f}" for value in values)
            print(f"{name:26s} {statistics.median(values):10,.0f} frames/s (rounds: {rounds})")
        remote = ray.remote(Holder)
        for scale in (1, 8):  # one actor's rollout of this batch, and one 8 times as long
            rollout = torch.cat([half] * scale, dim=1) if scale > 1 else half
            packed = pack(rollout)
            nbytes = sum(array.nbytes for _, array in packed["fields"])
            for where, options in (("the other node", ON_WORKER), ("the trainer's node", ON_HEAD)):
                holder = remote.options(num_cpus=0, **options).remote(packed)
                ms = _fetch_ms(holder, args.repeats)
                print(
                    f"a rollout of {rollout.numel()} frames ({nbytes / 1e3:.0f} kB) stored on {where}: "
                    f"ray.get + copy {ms:.2f} ms (median of {args.repeats})"
                )
                ray.kill(holder)
        ray.shutdown()


if __name__ == "__main__":
    main()
