"""Per-step cost of the DMControlEnv wrapper against a raw dm_control ``env.step`` loop.

Two measurements, interleaved over rounds because this machine's speed drifts:

* cheetah-run stepped raw (``env.step(action)``) and through the wrapper, alternating in
  blocks of 500 steps, with the same pre-sampled uniform random actions and the same seed;
* the wrapper around a stub env whose ``step`` returns one precomputed ``TimeStep``, next to
  calling that stub directly: the wrapper's own cost per step, free of the simulator's noise.

Run: ``python plugins/pycollect-dmcontrol/benches/wrapper_overhead.py [--rounds 5] [--steps 20000]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

os.environ.setdefault("MUJOCO_GL", "disable")

import dm_env
import numpy as np
from dm_control import suite

from pycollect_dmcontrol import DMControlEnv


def _actions(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return list(rng.uniform(-1.0, 1.0, size=(n, 6)))


def env_pair(steps: int, actions: list[np.ndarray], block: int = 500) -> tuple[float, float]:
    """Seconds per step of cheetah-run raw and wrapped, alternating in blocks of ``block`` steps.

    Both envs start from the same seed and get the same actions; alternating in small blocks
    makes the machine's drift hit both alike.
    """
    raw_env = suite.load("cheetah", "run", task_kwargs={"random": 0})
    raw_env.reset()
    env = DMControlEnv(suite.load("cheetah", "run"))
    env.reset(seed=0)
    raw_step, wrapped_step = raw_env.step, env.step
    t_raw = t_wrapped = 0.0
    for start in range(0, steps, block):
        t0 = time.perf_counter()
        for i in range(start, start + block):
            if raw_step(actions[i & 1023]).last():
                raw_env.reset()
        t1 = time.perf_counter()
        for i in range(start, start + block):
            _, _, terminated, truncated, _ = wrapped_step(actions[i & 1023])
            if terminated or truncated:
                env.reset()
        t2 = time.perf_counter()
        t_raw += t1 - t0
        t_wrapped += t2 - t1
    n = len(range(0, steps, block)) * block
    return t_raw / n, t_wrapped / n


class _Stub:
    """The spec methods of cheetah-run, and a step that returns one precomputed TimeStep."""

    def __init__(self) -> None:
        real = suite.load("cheetah", "run")
        self._obs = real.reset().observation
        self._specs = real.observation_spec(), real.action_spec()
        self._ts = dm_env.TimeStep(dm_env.StepType.MID, 0.5, 1.0, self._obs)

    def observation_spec(self) -> Any:
        return self._specs[0]

    def action_spec(self) -> Any:
        return self._specs[1]

    def step(self, action: Any) -> dm_env.TimeStep:
        return self._ts


def stub_overhead(steps: int, actions: list[np.ndarray]) -> tuple[float, float]:
    """Seconds per step of a stub env called directly, and through the wrapper."""
    stub = _Stub()
    env = DMControlEnv(stub)
    direct, through = stub.step, env.step
    t0 = time.perf_counter()
    for i in range(steps):
        ts = direct(actions[i & 1023])
        if ts.last():
            pass
    t1 = time.perf_counter()
    for i in range(steps):
        _, _, terminated, truncated, _ = through(actions[i & 1023])
        if terminated or truncated:
            pass
    t2 = time.perf_counter()
    return (t1 - t0) / steps, (t2 - t1) / steps


def main() -> None:
    """Print per-round and median per-step times and the wrapper's overhead."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20_000)
    args = parser.parse_args()
    actions = _actions(1024)
    ratios, extras = [], []
    for r in range(args.rounds):
        t_raw, t_wrap = env_pair(args.steps, actions)
        t_direct, t_through = stub_overhead(args.steps * 10, actions)
        ratios.append(t_wrap / t_raw)
        extras.append(t_through - t_direct)
        print(
            f"round {r + 1}: raw {t_raw * 1e6:.1f} us/step, wrapper {t_wrap * 1e6:.1f} us/step "
            f"({(t_wrap / t_raw - 1) * 100:+.1f} %); stub: direct {t_direct * 1e9:.0f} ns, "
            f"through the wrapper {t_through * 1e9:.0f} ns ({(t_through - t_direct) * 1e9:+.0f} ns)",
            flush=True,
        )
    print(
        f"median: wrapper/raw {statistics.median(ratios):.3f}, wrapper's own cost "
        f"{statistics.median(extras) * 1e9:.0f} ns/step"
    )


if __name__ == "__main__":
    main()
