"""Where pycollect's own time goes: the in-process loop, the trainer's copies of large frames, the stepper.

Three measurements, each repeated ``--rounds`` times (the machine is shared: compare within a
round):

1. **The in-process loop** (``Collector("CartPole-v1", None, num_workers=0)``, 8 envs, random
   actions) against the plain loop it replaces (8 CartPole envs stepped round-robin in Python
   with pre-sampled actions). The collector's time per frame is split by timing its stepping
   loop's parts: the native stepper (``env.step`` included), the resets after episode ends
   (``env.reset`` included, shown apart), and the rest (the per-step loop and the per-batch
   work), next to the plain loop's. A second collector with 8x longer rollouts (512 steps)
   shows what the per-batch work costs: what its time per frame saves. The per-batch parts are
   timed too (microseconds a batch).
2. **The trainer's copies** of an owned batch of 84x84x4 frames (``benches/synthetic_env.py``,
   a step that costs nothing): the trainer's time per frame assembling a batch (copying it out
   of shared memory; the ``observation`` key is the second copy) for 1 and 2 workers at 512 and
   1,024 frames a batch, with each collector's frames/s and the workers' CPU per frame. From
   these follows the most 2 CPUs can give: ``1 / max(trainer, worker)`` frames per second with
   one worker (the two overlap), ``2 / (trainer + worker)`` with two.
3. **The native stepper** (``_core.GroupStepper`` bound to a rollout, as the collector's
   stepping loop binds it) on 8 envs whose step costs nothing, against a
   Python loop that stores nothing and one that stores what the stepper stores (observation,
   reward, flags): what storing a step costs, apart from any env.
4. **The trainer's part of a vector env's step** (``make_vec("CartPole-v1", 16, num_workers=2)``,
   random actions): the trainer thread's CPU per ``step()``, split as ``VectorEnv.step`` does
   it: checking and writing the actions, posting the step to every worker, waiting for every
   answer (spent yielding the core: a step's two sides take turns), and building what
   gymnasium returns (infos, copies of the result arrays). Everything but the wait is the
   trainer's serial share of a step, during which the workers have nothing to do.

    python benches/overhead.py
    python benches/overhead.py --rounds 3 --part copies   # or loop, stepper, vector

The timing wraps private methods (``EnvGroup.step_column``, ``EnvRunner._restart``, the env's ``reset``,
``WorkerPool._assemble`` and the per-batch parts) and drives the rollout's native step directly: a
diagnostic of this version, not an API (``tests/test_overhead_bench.py`` keeps it running).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import synthetic_env

from pycollect import Collector
from pycollect._batch.episodes import EpisodeRecord
from pycollect._engines import inprocess
from pycollect._engines import workers as pool
from pycollect._rollout import runner
from pycollect._steps.checks import OutputChecks
from pycollect._steps.group import EnvGroup

K = 8  # envs per worker / in-process collector, as in benches/throughput.py


class _Clock:
    """Accumulates the time spent in wrapped methods, by name."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}

    def wrap(self, owner: type, name: str, clock: Callable[[], float] = time.perf_counter) -> Callable[[], None]:
        """Time every call of ``owner.name``; returns the function that puts the original back."""
        original = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = clock()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[name] = self.seconds.get(name, 0.0) + clock() - start
                self.calls[name] = self.calls.get(name, 0) + 1

        setattr(owner, name, timed)
        return lambda: setattr(owner, name, original)

    def reset(self) -> None:
        self.seconds.clear()
        self.calls.clear()


def plain_loop(frames: int) -> float:
    """Microseconds per frame of 8 CartPole envs stepped round-robin, pre-sampled actions."""
    envs = [gym.make("CartPole-v1") for _ in range(K)]
    for i, env in enumerate(envs):
        env.reset(seed=i)
    envs[0].action_space.seed(0)
    actions = [envs[0].action_space.sample() for _ in range(1024)]
    steps = [env.step for env in envs]
    start = time.perf_counter()
    for n in range(frames // K):
        action = actions[n & 1023]
        for i in range(K):
            _, _, terminated, truncated, _ = steps[i](action)
            if terminated or truncated:
                envs[i].reset()
    return (time.perf_counter() - start) / frames * 1e6


def in_process(frames: int, steps_per_batch: int, clock: _Clock | None) -> tuple[float, int]:
    """Microseconds per frame of the in-process collector, and the frames timed (parts in ``clock``)."""
    collector = Collector(
        "CartPole-v1", None, num_workers=0, envs_per_worker=K, frames_per_batch=K * steps_per_batch, seed=0
    )
    try:
        batches = iter(collector)
        for _ in range(3):
            next(batches)
        if clock is not None:
            clock.reset()
        count = max(1, frames // (K * steps_per_batch))
        start = time.perf_counter()
        for _ in range(count):
            next(batches)
        timed = count * K * steps_per_batch
        return (time.perf_counter() - start) / timed * 1e6, timed
    finally:
        collector.shutdown()


# What the in-process loop does per batch rather than per step, timed where it happens.
_PER_BATCH = (
    (EpisodeRecord, "update", "episode record"),
    (inprocess, "to_tensordict", "TensorDict"),
    (inprocess, "allocate", "arrays"),
    (EnvGroup, "bind_rollout", "binding the stepper"),
    (runner._Rollout, "finish", "rewards and flags"),
    (inprocess, "fill_observations", "observations"),
)


def loop_round(frames: int) -> None:
    """One round of part 1, printed."""
    clock = _Clock()
    from gymnasium.wrappers import TimeLimit  # gymnasium.make's outermost wrapper: the env's reset

    parts = [(EnvGroup, "step_column"), (runner.EnvRunner, "_restart"), (TimeLimit, "reset")]
    undo = [clock.wrap(owner, name) for owner, name in parts + [(o, n) for o, n, _ in _PER_BATCH]]
    try:
        total, timed = in_process(frames, 64, clock)
    finally:
        for put_back in undo:
            put_back()
    per_frame = {name: seconds / timed * 1e6 for name, seconds in clock.seconds.items()}
    batches = timed / (K * 64)
    restarts = clock.calls.get("reset", 0) / batches
    per_batch = ", ".join(f"{label} {clock.seconds[name] / batches * 1e6:.0f}" for _, name, label in _PER_BATCH)
    untimed, _ = in_process(frames, 64, None)
    long_rollouts, _ = in_process(frames, 512, None)
    plain = plain_loop(frames)
    print(
        f"  plain loop {plain:.2f} us/frame | in-process {untimed:.2f} ({plain / untimed:.2f}x the plain loop); "
        f"timed {total:.2f}: native stepper {per_frame['step_column']:.2f}, "
        f"resets {per_frame['_restart']:.2f} (env.reset {per_frame['reset']:.2f}; {restarts:.0f} a batch), "
        f"the rest {total - per_frame['step_column'] - per_frame['_restart']:.2f} | "
        f"512-step rollouts {long_rollouts:.2f} (per-batch work at 64 steps: {untimed - long_rollouts:.2f})\n"
        f"    per batch, us: {per_batch}"
    )


class _NullEnv:
    """A step that costs nothing: a constant 4-float observation, episodes of 22 steps (CartPole's mean)."""

    def __init__(self) -> None:
        self.observation = np.zeros(4, np.float32)
        self.t = 0

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.t = (self.t + 1) % 22
        return self.observation, 1.0, self.t == 0, False, {}

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict[str, Any]]:
        self.t = 0
        return self.observation, {}


def stepper_round(steps: int = 1024) -> None:
    """One round of part 3, printed: the native stepper against Python loops, on envs that cost nothing."""
    envs = [_NullEnv() for _ in range(K)]
    env_steps = [env.step for env in envs]
    frames = np.zeros((K, steps, 4), np.float32)
    rewards, terminated, truncated = np.zeros((steps, K)), np.zeros((steps, K), bool), np.zeros((steps, K), bool)
    group = EnvGroup.for_rollout(
        envs, [((), 0, frames.dtype, (4,))], OutputChecks((), "null", None), max_frames_per_traj=None, keeps_info=False
    )
    group.bind_rollout([frames], rewards, terminated, truncated)  # what a rollout binds: the native stepper
    actions = np.random.default_rng(0).integers(0, 2, (steps, K))
    listed = [list(row) for row in actions]

    def native() -> None:
        for t in range(steps):
            group.step_column(t, actions[t])

    def plain() -> None:
        for t in range(steps):
            row = listed[t]
            for i in range(K):
                env_steps[i](row[i])

    def plain_storing() -> None:
        for t in range(steps):
            row = listed[t]
            for i in range(K):
                obs, reward, term, trunc, _ = env_steps[i](row[i])
                frames[i, t], rewards[t, i], terminated[t, i], truncated[t, i] = obs, reward, term, trunc

    def per_step(run: Callable[[], None]) -> float:
        start = time.perf_counter()
        run()
        return (time.perf_counter() - start) / (steps * K) * 1e6

    print(
        f"  native stepper {per_step(native):.3f} us per env step | Python loop storing nothing "
        f"{per_step(plain):.3f} | Python loop storing what the stepper stores {per_step(plain_storing):.3f}"
    )


def copies(num_workers: int, frames_per_batch: int, batches: int) -> str:
    """Part 2 for one collector: frames/s, the trainer's and the workers' CPU per frame, their ceiling."""
    clock = _Clock()
    put_back = clock.wrap(pool.WorkerPool, "_assemble", time.thread_time)
    collector = Collector(
        synthetic_env.make_env,
        None,
        num_workers=num_workers,
        envs_per_worker=K,
        frames_per_batch=frames_per_batch,
        total_frames=-1,
    )
    try:
        stream = iter(collector)
        for _ in range(5):
            next(stream)
        clock.reset()
        pids = [worker.pid for worker in collector.stats().workers if worker.pid is not None]
        worker_cpu = -sum(_cpu_seconds(pid) for pid in pids)
        start = time.perf_counter()
        for _ in range(batches):
            next(stream)
        elapsed = time.perf_counter() - start
        worker_cpu += sum(_cpu_seconds(pid) for pid in pids)
    finally:
        collector.shutdown()
        put_back()
    frames = batches * frames_per_batch
    assemble = clock.seconds.get("_assemble", 0.0) / frames * 1e6
    workers = worker_cpu / frames * 1e6
    # 2 CPUs. One worker: it and the trainer overlap, so the slower of the two sets the pace.
    # Two: each frame takes the trainer's CPU and a worker's, and no schedule does better.
    formula = f"1 / max({assemble:.2f}, {workers:.2f})" if num_workers == 1 else f"2 / ({assemble:.2f} + {workers:.2f})"
    ceiling = (1 / max(assemble, workers) if num_workers == 1 else 2 / (assemble + workers)) * 1e6
    mib = frames_per_batch * 2 * 28_224 / 2**20  # observation and ("next", "observation")
    return (
        f"{num_workers} worker(s), {frames_per_batch:>5} frames a batch ({mib:.0f} MiB of frames): "
        f"{frames / elapsed:>9,.0f} frames/s; trainer assembling {assemble:.2f} us/frame, workers' CPU "
        f"{workers:.2f} us/frame; ceiling {formula} = {ceiling:,.0f} frames/s"
    )


def vector_round(steps: int) -> None:
    """The trainer thread's CPU per ``step()`` of a 2-worker CartPole ``make_vec``, by part."""
    import pycollect

    envs = pycollect.make_vec("CartPole-v1", 2 * K, num_workers=2)
    try:
        envs.action_space.seed(0)
        actions = [envs.action_space.sample() for _ in range(64)]
        envs.reset(seed=0)
        for i in range(100):  # warm-up
            envs.step(actions[i & 63])
        backend = envs._backend  # type: ignore[attr-defined]
        parts = np.zeros(4)
        started, wall = time.process_time(), time.perf_counter()
        for i in range(steps):
            t0 = time.thread_time()
            envs._write_actions(actions[i & 63])  # type: ignore[attr-defined]
            t1 = time.thread_time()
            backend.step_async()
            t2 = time.thread_time()
            material = backend.step_wait()
            t3 = time.thread_time()
            ended = np.logical_or(backend.terminated, backend.truncated, out=envs._ended)  # type: ignore[attr-defined]
            envs._infos.merge(material, None, backend.info, None)  # type: ignore[attr-defined]
            envs._observations(), backend.rewards.copy(), backend.terminated.copy(), ended.copy()  # type: ignore[attr-defined]
            parts += (t1 - t0, t2 - t1, t3 - t2, time.thread_time() - t3)
        process = (time.process_time() - started) / steps * 1e6
        fps = 2 * K * steps / (time.perf_counter() - wall)
    finally:
        envs.close()
    write, post, wait, results = parts / steps * 1e6
    print(
        f"  {fps:,.0f} env steps/s; trainer CPU per step(): actions {write:.1f}, post {post:.1f}, "
        f"results {results:.1f} (the serial share: {write + post + results:.1f} us), waiting {wait:.1f}; "
        f"the whole trainer process {process:.1f} us"
    )


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime, stime in clock ticks (USER_HZ)


def main() -> None:
    """Run the parts and print their rounds."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--part", choices=("loop", "copies", "stepper", "vector", "all"), default="all")
    parser.add_argument("--frames", type=int, default=200_000, help="frames per in-process measurement")
    parser.add_argument(
        "--batches", type=int, default=None, help="batches per copies measurement (default: 40K frames)"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.part in ("loop", "all"):
        print("1. The in-process loop, CartPole, 8 envs, random actions, 64 steps a rollout:")
        for _ in range(args.rounds):
            loop_round(args.frames)
    if args.part in ("copies", "all"):
        print("2. The trainer's copies, 84x84x4 uint8 frames (28 KiB), owned batches:")
        for _ in range(args.rounds):
            for num_workers, frames_per_batch in ((1, 512), (2, 512), (1, 1024), (2, 1024)):
                print("  " + copies(num_workers, frames_per_batch, batches=args.batches or 40_960 // frames_per_batch))

    if args.part in ("stepper", "all"):
        print("3. The native stepper on 8 envs whose step costs nothing (1,024 steps):")
        for _ in range(args.rounds):
            stepper_round()
    if args.part in ("vector", "all"):
        steps = max(200, args.frames // (2 * K))
        print(f"4. The trainer's part of a vector env's step, CartPole, 2 workers x {K} envs ({steps:,} steps):")
        for _ in range(args.rounds):
            vector_round(steps)


if __name__ == "__main__":
    main()
