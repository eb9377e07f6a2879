"""Multi-agent collection, random actions, mpe2's simple_spread_v3 (3 agents, 25-step episodes).

One interleaved run: every round runs each contender once, in an order that rotates from round
to round, and the ratios are taken within a round (machines are shared and noisy). A frame is
one env step (all 3 agents). Contenders:

* ``2 raw loops in parallel``: two processes, each stepping K Parallel envs in a plain loop
  (``env.step({agent: action})``, reset when every agent is gone): the limit of 2 CPUs.
* ``pycollect Collector (2 workers x K)``: ``Collector(simple_spread_v3.parallel_env,
  num_workers=2, envs_per_worker=K)``, random policy, TorchRL's multi-agent layout.
* ``TorchRL MultiSyncCollector (2 x SerialEnv(K) of PettingZooEnv)``.
* ``pycollect make_agent_vec (2 workers, 2K envs)``: steps/s of the parameter-sharing face, a
  gymnasium loop calling ``step()``; frames are env steps (each 3 slots).
* ``SuperSuit concat_vec_envs_v1 (2K envs, num_cpus=2)``: SuperSuit with 2 CPUs (two processes
  of K envs each), the comparison issue 31 names; ``(num_cpus=0)`` (every env in this process)
  is shown for reference, without a target.

Targets (issue 31), medians of per-round ratios: Collector >= 5x MultiSyncCollector and >= 0.8x
the limit; make_agent_vec >= 1.5x SuperSuit with 2 CPUs. Each round also says where 5x
MultiSyncCollector sits against that round's limit (``5 x MultiSyncCollector / limit``: above
1.0, the first target asks for more than the 2 CPUs can step) and the most anything could get
over MultiSyncCollector and over SuperSuit there (``limit / MultiSyncCollector``, ``limit /
SuperSuit``).

Usage::

    python benches/marl.py                 # 3 rounds
    python benches/marl.py --rounds 2 --seconds 3
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

K = 8
RAW2 = "2 raw loops in parallel"
COLLECTOR = "pycollect Collector (2 workers x K)"
TORCHRL = "TorchRL MultiSyncCollector (2 x SerialEnv(K))"
AGENT_VEC = "pycollect make_agent_vec (2 workers, 2K envs)"
SUPERSUIT0 = "SuperSuit concat_vec_envs_v1 (2K envs, num_cpus=0)"
SUPERSUIT2 = "SuperSuit concat_vec_envs_v1 (2K envs, num_cpus=2)"
TARGETS = [
    (COLLECTOR, TORCHRL, 5.0),
    (COLLECTOR, RAW2, 0.8),
    (AGENT_VEC, SUPERSUIT2, 1.5),
]
REFERENCE = [(AGENT_VEC, SUPERSUIT0)]  # ratios shown without a target


def make_env() -> Any:
    from mpe2 import simple_spread_v3

    return simple_spread_v3.parallel_env(max_cycles=25)


def _raw_child(seconds: float, index: int, go: Any, results: Any) -> None:
    envs = [make_env() for _ in range(K)]
    space = envs[0].action_space("agent_0")
    space.seed(index)
    actions = [space.sample() for _ in range(1024)]
    for j, env in enumerate(envs):
        env.reset(seed=100 * index + j)
    go.wait()
    t, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for j, env in enumerate(envs):
            env.step({agent: actions[(t + j + a) & 1023] for a, agent in enumerate(env.agents)})
            if not env.agents:
                env.reset()
        t += 1
    results.put(t * K / (time.perf_counter() - start))


def raw2(seconds: float) -> float:
    ctx = multiprocessing.get_context("spawn")
    go, results = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_raw_child, args=(seconds, i, go, results), daemon=True) for i in range(2)]
    for proc in procs:
        proc.start()
    time.sleep(2.0)  # their imports and envs (a benchmark, not a test)
    go.set()
    fps = sum(results.get(timeout=seconds + 120) for _ in procs)
    for proc in procs:
        proc.join(timeout=30)
    return float(fps)


def collector(seconds: float) -> float:
    import pycollect

    with pycollect.Collector(
        make_env, None, frames_per_batch=2 * K * 100, num_workers=2, envs_per_worker=K, seed=0
    ) as c:
        c.next_batch()
        frames, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            frames += c.next_batch().numel()
        return frames / (time.perf_counter() - start)


def torchrl_multisync(seconds: float) -> float:
    from torchrl.collectors import MultiSyncCollector
    from torchrl.envs import SerialEnv
    from torchrl.envs.libs.pettingzoo import PettingZooWrapper
    from torchrl.envs.utils import MarlGroupMapType

    def make() -> Any:
        return SerialEnv(K, lambda: PettingZooWrapper(make_env(), group_map=MarlGroupMapType.ALL_IN_ONE_GROUP))

    c = MultiSyncCollector([make, make], None, frames_per_batch=2 * K * 100, total_frames=-1)
    try:
        it = iter(c)
        next(it)
        frames, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            frames += next(it).numel()
        return frames / (time.perf_counter() - start)
    finally:
        c.shutdown()


def _vector_loop(envs: Any, seconds: float, n_slots: int, per_frame: int) -> float:
    envs.reset(seed=0)
    rng = np.random.default_rng(0)
    actions = [rng.integers(0, 5, size=n_slots) for _ in range(64)]
    for i in range(20):
        envs.step(actions[i % 64])
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        envs.step(actions[steps % 64])
        steps += 1
    return steps * n_slots / per_frame / (time.perf_counter() - start)


def agent_vec(seconds: float) -> float:
    from pycollect_pettingzoo import make_agent_vec

    envs = make_agent_vec(make_env, 2 * K, num_workers=2)
    try:
        return _vector_loop(envs, seconds, envs.num_envs, 3)
    finally:
        envs.close()


def supersuit(num_cpus: int, seconds: float) -> float:
    import supersuit as ss

    envs = ss.concat_vec_envs_v1(ss.pettingzoo_env_to_vec_env_v1(make_env()), 2 * K, num_cpus=num_cpus)
    try:
        return _vector_loop(envs, seconds, envs.num_envs, 3)
    finally:
        envs.close()


CONTENDERS: dict[str, Callable[[float], float]] = {
    RAW2: raw2,
    COLLECTOR: collector,
    TORCHRL: torchrl_multisync,
    AGENT_VEC: agent_vec,
    SUPERSUIT0: lambda s: supersuit(0, s),
    SUPERSUIT2: lambda s: supersuit(2, s),
}


def main() -> None:
    """Run the rounds; print frames/s, the per-round ratios and their medians against the targets."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0, help="measured seconds per contender")
    parser.add_argument("--out", default=None, help="write the figures as JSON here")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    names = list(CONTENDERS)
    rounds: list[dict[str, float]] = []
    for r in range(args.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        fps = {}
        for name in order:
            fps[name] = CONTENDERS[name](args.seconds)
            print(f"round {r + 1}: {name:<55} {fps[name]:>10,.0f} frames/s", flush=True)
        rounds.append(fps)
    print()
    for name in names:
        print(f"{name:<55} median {statistics.median(f[name] for f in rounds):>10,.0f} frames/s")
    summary: dict[str, Any] = {}
    for mine, theirs, target in [*TARGETS, *((a, b, None) for a, b in REFERENCE)]:
        ratios = [f[mine] / f[theirs] for f in rounds]
        median = statistics.median(ratios)
        summary[f"{mine} / {theirs}"] = {"median": median, "rounds": ratios, "target": target}
        verdict = "no target" if target is None else f"target >= {target}x: {'met' if median >= target else 'NOT met'}"
        each = ", ".join(f"{x:.2f}" for x in ratios)
        print(f"{mine} / {theirs}: {median:.2f}x ({each}); {verdict}")
    # Is 5x MultiSyncCollector within reach of 2 CPUs? The limit of the same round says.
    ceiling = {
        f"5 x {TORCHRL} / {RAW2}": [5 * f[TORCHRL] / f[RAW2] for f in rounds],
        f"{RAW2} / {TORCHRL}": [f[RAW2] / f[TORCHRL] for f in rounds],
        f"{RAW2} / {SUPERSUIT2}": [f[RAW2] / f[SUPERSUIT2] for f in rounds],
    }
    for name, values in ceiling.items():
        each = ", ".join(f"{x:.2f}" for x in values)
        print(f"{name}: {statistics.median(values):.2f}x ({each})")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"rounds": rounds, "ratios": summary, "ceiling": ceiling}, fh, indent=1)


if __name__ == "__main__":
    main()
