"""Where a pycollect worker spends its CPU time per frame on dm_control cheetah-run.

Drives pycollect's stepping loop (``pycollect._rollout.runner.EnvRunner``, the loop both the
in-process engine and each worker run) in this process, with K cheetah-run envs from the
``dm_control`` backend and uniform random actions (``RandomActions``), writing into plain
numpy arrays laid out like a worker's shared-memory slot. Next to it, the same K envs stepped
raw (``env.step`` with pre-sampled actions). Then the loop's parts one by one:

* the runner around stub envs whose step costs nothing (the same DMControlEnv wrapper around
  a dm_env that returns a precomputed TimeStep): what pycollect adds per frame, all in;
* random actions: ``RandomActions.random_action()`` (one ``FieldSpec.sample`` every 256 steps);
* the wrapper: ``DMControlEnv.step`` against calling the stub directly;
* the runner's per-step statements, timed one at a time on the same arrays.

Everything is CPU time (``time.process_time``) per frame, median over rounds, so other load on
the machine disturbs it less than wall time. Uses pycollect's private modules, so it follows
their current names (``pycollect._rollout``).

Run: ``python plugins/pycollect-dmcontrol/benches/profile_runner.py [--envs 8] [--rounds 5] [--cprofile]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("MUJOCO_GL", "disable")

import dm_env
import numpy as np
from dm_control import suite

from pycollect._rollout.actions import RandomActions
from pycollect._rollout.fields import batch_fields
from pycollect._rollout.runner import EnvRunner
from pycollect._rollout.seeding import action_rng, env_seeds
from pycollect.envs.specs import read_leaf
from pycollect_dmcontrol import DMControlBackend, DMControlEnv

STEPS = 64  # steps per rollout, as in benches/throughput.py


def _cpu(fn: Callable[[], Any], frames: int) -> float:
    """CPU microseconds per frame of ``fn()``, which makes ``frames`` frames."""
    t0 = time.process_time()
    fn()
    return (time.process_time() - t0) / frames * 1e6


class _Stub:
    """cheetah-run's specs, and a step that returns one precomputed TimeStep (costs nothing)."""

    def __init__(self, real: Any) -> None:
        self._specs = real.observation_spec(), real.action_spec()
        obs = real.reset().observation
        self._first = dm_env.TimeStep(dm_env.StepType.FIRST, None, None, obs)
        self._mid = dm_env.TimeStep(dm_env.StepType.MID, 0.5, 1.0, obs)
        self.task = real.task

    def observation_spec(self) -> Any:
        return self._specs[0]

    def action_spec(self) -> Any:
        return self._specs[1]

    def reset(self) -> dm_env.TimeStep:
        return self._first

    def step(self, action: Any) -> dm_env.TimeStep:
        return self._mid

    def close(self) -> None:
        pass


def _runner(envs: list[Any], k: int) -> tuple[EnvRunner, dict[Any, np.ndarray]]:
    backend = DMControlBackend()
    specs = backend.specs(envs[0])
    actions = RandomActions(specs.action, k, action_rng(0))
    runner = EnvRunner(envs, specs, actions, env_seeds(0, k, 0))
    out = {f.key: np.zeros((k, STEPS, *f.shape), f.dtype) for f in batch_fields(specs)}
    return runner, out


def main() -> None:
    """Print the per-frame CPU costs and, with --cprofile, the runner's profile."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", type=int, default=8, help="K envs stepped together (a worker's envs_per_worker)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rollouts", type=int, default=10, help="rollouts of 64 steps per measurement")
    parser.add_argument("--cprofile", action="store_true", help="also cProfile the runner on real envs")
    args = parser.parse_args()
    k, rollouts = args.envs, args.rollouts
    frames = k * STEPS * rollouts
    backend = DMControlBackend()

    raw_envs = [suite.load("cheetah", "run", task_kwargs={"random": i}) for i in range(k)]
    for env in raw_envs:
        env.reset()
    rng = np.random.default_rng(0)
    pre = list(rng.uniform(-1.0, 1.0, size=(1024, 6)))

    def raw() -> None:
        steps = [env.step for env in raw_envs]
        j = 0
        for _ in range(STEPS * rollouts):
            for i, step in enumerate(steps):
                if step(pre[j & 1023]).last():
                    raw_envs[i].reset()
                j += 1

    real_runner, real_out = _runner([backend.make("cheetah-run", {}) for _ in range(k)], k)
    real_runner.rollout(real_out, random_actions=True)  # first reset, warm-up
    beat = [0]

    def on_step() -> None:  # stands in for a worker's heartbeat call
        beat[0] += 1

    stub_envs = [DMControlEnv(_Stub(raw_envs[0])) for _ in range(k)]
    stub_runner, stub_out = _runner(stub_envs, k)
    stub_runner.rollout(stub_out, random_actions=True)

    spec_action = backend.specs(stub_envs[0]).action
    sampler = RandomActions(spec_action, k, np.random.default_rng(1))
    inner = _Stub(raw_envs[0])
    wrapped = DMControlEnv(inner)
    action = np.zeros(6)

    # The runner's per-step statements on the same arrays (see EnvRunner.rollout).
    obs_raw = inner.reset().observation
    next_pos, next_vel = stub_out[("next", "observation", "position")], stub_out[("next", "observation", "velocity")]
    pos, vel = stub_out[("observation", "position")], stub_out[("observation", "velocity")]
    acts, traj = stub_out[("action",)], stub_out[("collector", "traj_ids")]
    traj_ids = np.zeros(k, np.int64)
    paths = [(next_pos, pos, ("position",)), (next_vel, vel, ("velocity",))]
    n_steps = STEPS * rollouts

    def obs_writes() -> None:  # per step: for each leaf, K scalar-indexed writes + one block copy
        for t in range(n_steps):
            tt = t % (STEPS - 1)
            for next_array, obs_array, path in paths:
                for i in range(k):
                    next_array[i, tt] = read_leaf(obs_raw, path)
                obs_array[:, tt + 1] = next_array[:, tt]

    def action_and_traj_writes() -> None:  # per step: actions_out[:, t] = ..., traj_out[:, t] = ..., list(actions)
        a = sampler.random_action()
        for t in range(n_steps):
            tt = t % STEPS
            acts[:, tt] = a
            traj[:, tt] = traj_ids
            list(a)

    def sampling() -> None:
        for _ in range(n_steps):
            sampler.random_action()

    def sample_call() -> None:  # one FieldSpec.sample of 256 steps x K envs, n_steps / 256 times
        for _ in range(max(1, n_steps // 256)):
            spec_action.sample(sampler.rng, 256 * k)

    def direct_stub() -> None:
        step = inner.step
        for _ in range(n_steps * k):
            step(action)

    def through_wrapper() -> None:
        step = wrapped.step
        for _ in range(n_steps * k):
            step(action)

    cases: dict[str, tuple[Callable[[], Any], int]] = {
        "raw dm_control step (K envs, pre-sampled actions)": (raw, frames),
        "EnvRunner.rollout, real envs, random actions": (
            lambda: [real_runner.rollout(real_out, random_actions=True, on_step=on_step) for _ in range(rollouts)],
            frames,
        ),
        "EnvRunner.rollout, stub envs (all pycollect + wrapper)": (
            lambda: [stub_runner.rollout(stub_out, random_actions=True, on_step=on_step) for _ in range(rollouts)],
            frames,
        ),
        "  RandomActions.random_action() per step / K": (sampling, frames),
        "  FieldSpec.sample(rng, 256*K) / (256*K)": (sample_call, max(1, n_steps // 256) * 256 * k),
        "  observation writes (2 leaves) per frame": (obs_writes, frames),
        "  action + traj_id writes, list(actions) per frame": (action_and_traj_writes, frames),
        "  stub dm_env step, called directly": (direct_stub, frames),
        "  stub dm_env step through DMControlEnv": (through_wrapper, frames),
    }
    results: dict[str, list[float]] = {name: [] for name in cases}
    for r in range(args.rounds):
        for name, (fn, n) in cases.items():
            results[name].append(_cpu(fn, n))
        print(f"round {r + 1}/{args.rounds} done", flush=True)
    print(f"\nCPU us per frame, K={k}, {args.rounds} rounds of {frames} frames: median (min-max)")
    for name, values in results.items():
        print(f"{name:58s} {statistics.median(values):8.3f} ({min(values):.3f}-{max(values):.3f})")
    med = {name: statistics.median(values) for name, values in results.items()}
    raw_us = med["raw dm_control step (K envs, pre-sampled actions)"]
    runner_us = med["EnvRunner.rollout, real envs, random actions"]
    overhead = runner_us - raw_us
    print(
        f"\nrunner on real envs minus raw: {overhead:.2f} us/frame ({overhead / raw_us * 100:.1f} % of a raw "
        f"step); 2 workers on 2 free CPUs could reach at most {2 * raw_us / runner_us:.2f}x the raw loop"
    )
    if args.cprofile:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(rollouts):
            real_runner.rollout(real_out, random_actions=True, on_step=on_step)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
