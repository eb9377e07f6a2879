"""What counting costs: collectors with ``metrics=True`` against ``metrics=False``, side by side.

One interleaved run: every round runs both contenders once, in an order that alternates from
round to round, and the ratio is taken within a round (machines are shared and noisy). The
workload of issue 43's target: CartPole-v1, 2 workers x 8 envs, rollouts of 64 steps, with
random actions (the counting's share is largest where a step costs least) and with a 64-wide
MLP in each worker. ``metrics=False`` leaves the native counting of the step loops on (it
cannot be turned off) and skips the rollout loop's: two native calls per step and one per
rollout, which is what the figure measures. Then ``make_vec`` (2 workers x 8 CartPole envs, a
plain loop of ``step()``): ``make_vec(metrics=False)`` turns off the workers' native counting
and the trainer's. Target: metrics on >= 0.99x metrics off.

Run: ``python benches/metrics.py [--rounds 5] [--seconds 4]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import throughput as tp  # the measurement helpers shared with the other benches

from pycollect import Collector
from pycollect.testing.policies import argmax_mlp


def run(metrics: bool, policy: bool, seconds: float) -> float:
    """Frames per second of one collector, timed over whole batches after a warm-up."""
    act, net = argmax_mlp(4, 64, 2) if policy else (None, None)
    with Collector(
        env="CartPole-v1",
        policy=act,
        weights_from=net,
        num_workers=2,
        envs_per_worker=8,
        frames_per_batch=2 * 8 * 64,
        metrics=metrics,
        seed=0,
    ) as collector:
        return tp.frames_per_second(collector, seconds, warm_up=5)


def run_vec(metrics: bool, seconds: float) -> float:
    """Frames per second of ``make_vec`` (2 workers x 8 CartPole envs) stepped in a plain loop."""
    import numpy as np

    from pycollect import make_vec

    env = make_vec("CartPole-v1", 16, num_workers=2, metrics=metrics)
    try:
        env.reset(seed=0)
        actions = np.zeros(16, dtype=np.int64)
        for _ in range(200):
            env.step(actions)
        steps, began = 0, time.perf_counter()
        while time.perf_counter() - began < seconds:
            for _ in range(100):
                env.step(actions)
            steps += 100
        return steps * 16 / (time.perf_counter() - began)
    finally:
        env.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=4.0)
    args = parser.parse_args()
    for policy in (False, True):
        ratios = []
        for r in range(args.rounds):
            order = (True, False) if r % 2 == 0 else (False, True)
            fps = {on: run(on, policy, args.seconds) for on in order}
            ratios.append(fps[True] / fps[False])
            print(
                f"{'MLP' if policy else 'random'} round {r}: on {fps[True]:,.0f} off {fps[False]:,.0f} frames/s "
                f"ratio {ratios[-1]:.3f}",
                flush=True,
            )
        print(
            f"{'MLP policy' if policy else 'random actions'}: metrics on / off, median of {args.rounds} rounds: "
            f"{statistics.median(ratios):.3f}x",
            flush=True,
        )


if __name__ == "__main__":
    main()
