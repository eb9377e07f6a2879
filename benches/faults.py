"""What faults cost to guard against: snapshots after every rollout, and a checkpoint.

Snapshots (issue 42's target: <= 5 % of throughput): the workers engine with ``snapshots=True``
against ``snapshots=False``, side by side, interleaved rounds whose order alternates, the ratio
taken within a round (machines are shared and noisy). Random actions, 2 workers, rollouts of 64
steps:

* ``cartpole``: CartPole-v1, 8 envs per worker (the cheapest step: the snapshot's largest share);
* ``cheetah``: dm_control's cheetah-run (``pycollect-dmcontrol``), 4 envs per worker;
* ``pong``: Atari Pong (``benches/atari_env.py``'s ``make_saveable_env``: ALE with AtariPreprocessing,
  a 4-frame stack and gymnasium's sticky actions, ALE's own cannot be saved), 4 envs per worker.

Checkpoint (target: a 16-env Pong collector in under a second): ``save_checkpoint()`` of a
Pong collector of 2 workers x 8 envs with snapshots and a Nature CNN policy, timed over a few
calls after warm-up batches: the state dict (the workers' snapshots, the policy's weights) and
the atomic write (temporary file, fsync, rename, directory fsync); on the ``workers`` engine,
whose snapshots came with the rollouts, and on the ``central`` engine, which asks its workers
for their envs' states when the checkpoint is made.

Kept state (``--kept-state``): with a ``checkpoint_dir`` a collector keeps the state after every
batch, for a SIGTERM in the middle of the next; the central engine asks its workers for their
envs' states then, the in-process engine pickles its envs. Timed against the same collector
without one (:data:`KEPT_STATE`).

Run: ``python benches/faults.py [--workloads cartpole,cheetah,pong] [--rounds 5] [--seconds 4] [--kept-state]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # atari_env, nature_cnn; workers inherit it

import throughput as tp  # the measurement helpers shared with the other benches

from pycollect import Collector

WORKLOADS: dict[str, dict[str, Any]] = {
    "cartpole": {"env": "CartPole-v1", "envs_per_worker": 8},
    "cheetah": {"env": "dm_control:cheetah-run", "envs_per_worker": 4},
    "pong": {"env": "callable:atari_env:make_saveable_env", "envs_per_worker": 4},
}


def throughput(workload: str, snapshots: bool, seconds: float) -> float:
    """Frames per second of a 2-worker collector with random actions, over whole batches."""
    spec = WORKLOADS[workload]
    frames_per_batch = 2 * spec["envs_per_worker"] * 64
    with Collector(
        spec["env"],
        num_workers=2,
        envs_per_worker=spec["envs_per_worker"],
        frames_per_batch=frames_per_batch,
        snapshots=snapshots,
        seed=0,
    ) as collector:
        return tp.frames_per_second(collector, seconds)


KEPT_STATE: dict[str, tuple[str, str, int, int]] = {
    # name: (engine, env, workers, envs per worker)
    "central CartPole 2 x 8": ("central", "CartPole-v1", 2, 8),
    "central Pong 2 x 4": ("central", "callable:atari_env:make_saveable_env", 2, 4),
    "in-process CartPole 16": ("inprocess", "CartPole-v1", 0, 16),
}
"""Collectors whose state kept after every batch (with a ``checkpoint_dir``) costs work: see :func:`kept_state_fps`."""


def kept_state_fps(name: str, checkpoint_dir: bool, seconds: float) -> float:
    """Frames per second of a :data:`KEPT_STATE` collector with random actions, with or without a ``checkpoint_dir``.

    With one, the collector keeps the state after every batch (a SIGTERM mid-batch writes it):
    the central engine asks its workers for their envs' states, the in-process one pickles its envs.
    """
    engine, env, workers, envs = KEPT_STATE[name]
    with tempfile.TemporaryDirectory() as directory:
        settings: dict[str, Any] = {"checkpoint_dir": directory} if checkpoint_dir else {}
        with Collector(
            env,
            num_workers=workers,
            envs_per_worker=envs,
            frames_per_batch=max(workers, 1) * envs * 64,
            engine=engine,
            seed=0,
            **settings,
        ) as collector:
            return tp.frames_per_second(collector, seconds)


def checkpoint_seconds(engine: str = "workers", calls: int = 3) -> tuple[float, int]:
    """Median seconds of ``save_checkpoint()`` of a 16-env Pong collector, and the file's bytes.

    ``engine="workers"``: the states came with the last rollouts (the pickles are made as the
    workers go); ``"central"``: the trainer asks each worker for its envs' states right then.
    """
    from nature_cnn import NatureCNN  # type: ignore[import-not-found]

    net = NatureCNN(6)

    def act(td: Any) -> Any:
        return net(td["observation"])  # NatureCNN returns its argmax actions

    with (
        tempfile.TemporaryDirectory() as directory,
        Collector(
            "callable:atari_env:make_saveable_env",
            act,
            weights_from=net,
            num_workers=2,
            envs_per_worker=8,
            frames_per_batch=2 * 8 * 16,
            checkpoint_dir=directory,
            seed=0,
            engine=engine,
        ) as collector,
    ):
        for _ in range(2):
            collector.next_batch()
        times = []
        for _ in range(calls):
            began = time.perf_counter()
            path = collector.save_checkpoint()
            times.append(time.perf_counter() - began)
        return statistics.median(times), path.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="cartpole,cheetah,pong")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--no-checkpoint", action="store_true", help="skip the Pong checkpoint timing")
    parser.add_argument(
        "--kept-state",
        action="store_true",
        help="also time central and in-process collectors with a checkpoint_dir against none (their kept state)",
    )
    args = parser.parse_args()
    for workload in args.workloads.split(","):
        ratios = []
        for r in range(args.rounds):
            order = (True, False) if r % 2 == 0 else (False, True)
            fps = {on: throughput(workload, on, args.seconds) for on in order}
            ratios.append(fps[True] / fps[False])
            print(
                f"{workload} round {r}: snapshots {fps[True]:,.0f} frames/s, none {fps[False]:,.0f}, "
                f"ratio {ratios[-1]:.3f}",
                flush=True,
            )
        print(f"{workload}: snapshots on / off, median of {args.rounds} rounds: {statistics.median(ratios):.3f}x")
    if args.kept_state:
        for name in KEPT_STATE:
            ratios = []
            for r in range(args.rounds):
                order = (True, False) if r % 2 == 0 else (False, True)
                fps = {on: kept_state_fps(name, on, args.seconds) for on in order}
                ratios.append(fps[True] / fps[False])
                print(f"{name} round {r}: checkpoint_dir {fps[True]:,.0f} frames/s, none {fps[False]:,.0f}", flush=True)
            print(f"{name}: checkpoint_dir / none, median of {args.rounds} rounds: {statistics.median(ratios):.3f}x")
    if not args.no_checkpoint:
        for engine in ("workers", "central"):
            seconds, size = checkpoint_seconds(engine)
            print(
                f"checkpoint of a 16-env Pong collector, engine={engine!r}: {seconds:.3f} s (median of 3), "
                f"{size / 1e6:.1f} MB"
            )


if __name__ == "__main__":
    main()
