"""TorchRL envs on pycollect (plugins/pycollect-torchrl) against TorchRL's own process layer.

One interleaved run: every round runs each contender once, in an order that rotates from round
to round, and the ratios are taken within a round (the machine is shared and noisy). Two
workloads, each a TorchRL env built by a factory, random actions:

* ``cartpole``: ``GymEnv("CartPole-v1")``;
* ``cheetah-run``: ``DMControlEnv("cheetah", "run")``.

Contenders:

* ``TorchRL Collector / pycollect ParallelEnv(2)``: ``torchrl.collectors.Collector`` over
  ``pycollect.torchrl.ParallelEnv(2, make_env)``.
* ``TorchRL Collector / torchrl ParallelEnv(2)``: the same over ``torchrl.envs.ParallelEnv(2, make_env)``.
* ``TorchRL Collector / SerialEnv(2)``: the same over an in-process ``SerialEnv(2, make_env)``:
  the ceiling of TorchRL's per-step driver, whatever steps the envs.
* ``pycollect Collector (torchrl backend)``: ``pycollect.Collector(make_env, num_workers=2,
  envs_per_worker=K)``: the ``torchrl`` backend adopting what ``make_env`` returns.
* ``TorchRL MultiSyncCollector``: 2 workers, each a ``SerialEnv(K, make_env)``.

Targets (issue 20), as medians of per-round ratios: pycollect's ``ParallelEnv`` >= 3x TorchRL's
``ParallelEnv`` and >= 0.7x ``SerialEnv``; pycollect's Collector >= 5x ``MultiSyncCollector``.
Results go to ``benches/results/torchrl_envs.json``.

Usage::

    python benches/torchrl_envs.py                   # 3 rounds, both workloads
    python benches/torchrl_envs.py --quick           # fewer frames, 2 rounds
    python benches/torchrl_envs.py --workloads cartpole --rounds 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("MUJOCO_GL", "disable")

sys.path.insert(0, str(Path(__file__).resolve().parent))
import throughput as tp  # save_record, shared with the other benches

PENV = "TorchRL Collector / pycollect ParallelEnv(2)"
TENV = "TorchRL Collector / torchrl ParallelEnv(2)"
SERIAL = "TorchRL Collector / SerialEnv(2)"
PYCOLLECT = "pycollect Collector (torchrl backend, 2 workers)"
MULTISYNC = "TorchRL MultiSyncCollector (2 workers)"
CONTENDERS = (PENV, TENV, SERIAL, PYCOLLECT, MULTISYNC)
# (contender, reference, at least): issue 30 asks 2.5x TorchRL's ParallelEnv (its goal: 3x).
TARGETS = [(PENV, TENV, 2.5), (PENV, SERIAL, 0.7), (PYCOLLECT, MULTISYNC, 5.0)]
STEPS = 50  # steps per env per batch, every contender


def make_cartpole() -> Any:
    """CartPole as TorchRL builds it."""
    from torchrl.envs import GymEnv

    return GymEnv("CartPole-v1")


def make_cheetah() -> Any:
    """dm_control cheetah-run as TorchRL builds it."""
    from torchrl.envs import DMControlEnv

    return DMControlEnv("cheetah", "run")


WORKLOADS: dict[str, tuple[Callable[[], Any], int, int]] = {
    # name -> (factory, K envs per worker for the two Collectors, frames per contender)
    "cartpole": (make_cartpole, 8, 6000),
    "cheetah-run": (make_cheetah, 4, 4000),
}


def _time_batches(iterator: Any, frames_per_batch: int, frames: int) -> tuple[float, float]:
    """One warm-up batch (start-up), then ``frames`` worth of batches timed; (frames/s, start-up s)."""
    t0 = time.perf_counter()
    next(iterator)
    startup = time.perf_counter() - t0
    batches = max(1, round(frames / frames_per_batch))
    t1 = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    return batches * frames_per_batch / (time.perf_counter() - t1), startup


def torchrl_collector(batched: str, make: Callable[[], Any], frames: int) -> tuple[float, float]:
    """TorchRL's ``Collector`` over a batched env of 2 (``batched``: which one)."""
    from torchrl.collectors import Collector
    from torchrl.envs import ParallelEnv, SerialEnv

    import pycollect.torchrl

    cls = {"pycollect": pycollect.torchrl.ParallelEnv, "torchrl": ParallelEnv, "serial": SerialEnv}[batched]
    t0 = time.perf_counter()
    env = cls(2, make)
    env.set_seed(0)
    collector = Collector(env, None, frames_per_batch=2 * STEPS, total_frames=-1)
    t1 = time.perf_counter()
    try:
        fps, startup = _time_batches(iter(collector), 2 * STEPS, frames)
    finally:
        collector.shutdown()
        if not env.is_closed:
            env.close()
    return fps, startup + (t1 - t0)  # start-up: building the env, and the first batch


def pycollect_collector(make: Callable[[], Any], k: int, frames: int) -> tuple[float, float]:
    """pycollect's ``Collector``, 2 workers of K envs, the torchrl backend."""
    import pycollect

    collector = pycollect.Collector(
        make, None, frames_per_batch=2 * k * STEPS, num_workers=2, envs_per_worker=k, seed=0
    )
    try:
        return _time_batches(iter(collector), 2 * k * STEPS, frames * 4)  # 4x: it is that much faster
    finally:
        collector.shutdown()


def multi_sync(make: Callable[[], Any], k: int, frames: int) -> tuple[float, float]:
    """TorchRL's ``MultiSyncCollector``, 2 workers, each a ``SerialEnv`` of K envs."""
    import functools

    from torchrl.collectors import MultiSyncCollector
    from torchrl.envs import SerialEnv

    per_batch = 2 * k * STEPS
    collector = MultiSyncCollector(
        [functools.partial(SerialEnv, k, make)] * 2, None, frames_per_batch=per_batch, total_frames=-1
    )
    try:
        return _time_batches(iter(collector), per_batch, frames)
    finally:
        collector.shutdown()


def run(name: str, workload: str, scale: float) -> tuple[float, float]:
    """One contender on one workload: (frames/s, start-up s)."""
    make, k, frames = WORKLOADS[workload]
    frames = int(frames * scale)
    if name == PENV:
        return torchrl_collector("pycollect", make, frames)
    if name == TENV:
        return torchrl_collector("torchrl", make, frames // 2)
    if name == SERIAL:
        return torchrl_collector("serial", make, frames)
    if name == PYCOLLECT:
        return pycollect_collector(make, k, frames)
    return multi_sync(make, k, frames)


def main() -> None:
    """Run the rounds; print and save medians, per-round ratios and the targets."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    parser.add_argument("--contenders", nargs="+", default=list(CONTENDERS), choices=list(CONTENDERS))
    parser.add_argument("--rounds", type=int, default=None, help="default 3 (2 with --quick)")
    parser.add_argument("--quick", action="store_true", help="a third of the frames, 2 rounds")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "torchrl_envs.json")
    args = parser.parse_args()
    rounds = args.rounds or (2 if args.quick else 3)
    scale = 1 / 3 if args.quick else 1.0
    runs: dict[str, dict[str, list[dict[str, float]]]] = {w: {c: [] for c in args.contenders} for w in args.workloads}
    load = os.getloadavg()[0]
    for round_index in range(rounds):
        for workload in args.workloads:
            shift = round_index % len(args.contenders)
            order = args.contenders[shift:] + args.contenders[:shift]  # rotated: no contender always first
            for name in order:
                fps, startup = run(name, workload, scale)
                runs[workload][name].append({"fps": fps, "startup_s": startup})
                print(f"round {round_index + 1}/{rounds} {workload:12s} {name:50s} {fps:10,.0f} frames/s", flush=True)
    summary: dict[str, Any] = {}
    checks = []
    for workload, by_name in runs.items():
        summary[workload] = {name: statistics.median(r["fps"] for r in rs) for name, rs in by_name.items()}
        print(f"\n{workload} (medians of {rounds} rounds)")
        for name, fps in summary[workload].items():
            print(f"  {name:50s} {fps:10,.0f} frames/s")
        for contender, reference, at_least in TARGETS:
            if contender not in by_name or reference not in by_name:
                continue
            ratios = [a["fps"] / b["fps"] for a, b in zip(by_name[contender], by_name[reference], strict=True)]
            ratio = statistics.median(ratios)
            met = ratio >= at_least
            checks.append(
                {
                    "workload": workload,
                    "contender": contender,
                    "reference": reference,
                    "ratio": ratio,
                    "per_round": ratios,
                    "target": at_least,
                    "met": met,
                }
            )
            print(f"  {contender} / {reference}: {ratio:.2f}x (target >= {at_least}x: {'met' if met else 'NOT met'})")
    tp.save_record(
        args.out,
        rounds=rounds,
        steps_per_batch=STEPS,
        load_average_at_start=load,
        envs_per_worker={w: WORKLOADS[w][1] for w in args.workloads},
        summary=summary,
        targets=checks,
        runs=runs,
    )
    print(f"\nsaved {args.out}")


if __name__ == "__main__":
    main()
