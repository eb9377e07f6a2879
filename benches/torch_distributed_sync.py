"""Time weight updates through the ``torch_distributed`` scheme (and ``shared_memory`` for scale).

For a policy of 1M and 25M float32 parameters and 2 workers: how long ``update_policy_weights_()``
blocks the trainer, and how long until frames of both workers carry the new version (taking
batches meanwhile; rollouts are tiny, so this is the weights' trip, plus up to two rollouts a
worker had finished before the update). The first update of ``torch_distributed`` also pairs
each worker with the trainer (the gloo rendezvous) and is reported on its own.

    PYTHONPATH=. python benches/torch_distributed_sync.py [--updates 5] [--schemes torch_distributed shared_memory]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

from pycollect import Collector
from pycollect.testing.envs import CountingEnv


class BigPolicy(nn.Module):
    """``n`` parameters; the action is 0, the forward pass reads one of them."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.big = nn.Parameter(torch.zeros(n))

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return (observation[:, 0] * 0 + self.big[0] * 0).long()


def _both_at(c: Collector, version: int) -> float:
    start = time.perf_counter()
    while True:
        batch = c.next_batch()
        if bool((batch["policy_version"] == version).all()):
            return time.perf_counter() - start


def run(scheme: str, n: int, updates: int) -> dict[str, float]:
    policy = BigPolicy(n)
    with Collector(
        CountingEnv,
        policy,
        frames_per_batch=16,
        envs_per_worker=2,
        num_workers=2,
        seed=0,
        env_kwargs={"length": 10**9},
        weight_sync=scheme,
        weight_sync_timeout_s=30.0,
    ) as c:
        c.next_batch()
        calls, trips = [], []
        for version in range(1, updates + 2):
            with torch.no_grad():
                policy.big.add_(1.0)
            start = time.perf_counter()
            c.update_policy_weights_()
            call = time.perf_counter() - start
            trip = call + _both_at(c, version)
            calls.append(call)
            trips.append(trip)
    return {
        "first_call_ms": calls[0] * 1e3,
        "first_trip_ms": trips[0] * 1e3,
        "call_ms": statistics.median(calls[1:]) * 1e3,
        "trip_ms": statistics.median(trips[1:]) * 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=5)
    parser.add_argument("--schemes", nargs="+", default=["torch_distributed", "shared_memory"])
    args = parser.parse_args()
    print("| scheme | parameters | first update: call / both workers (ms) | later: call / both workers (ms) |")
    print("|---|---|---|---|")
    for scheme in args.schemes:
        for n in (1_000_000, 25_000_000):
            r = run(scheme, n, args.updates)
            print(
                f"| {scheme} | {n // 1_000_000}M | {r['first_call_ms']:.1f} / {r['first_trip_ms']:.0f} "
                f"| {r['call_ms']:.1f} / {r['trip_ms']:.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
