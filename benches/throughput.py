"""Frames per second through pycollect next to its peers, measured side by side in one run.

Workloads (``--workloads``):

``cartpole-random``
    CartPole-v1, uniform random actions (pre-sampled for the raw loop and the vector envs).
``cartpole-mlp``
    CartPole-v1, a 2x64 tanh MLP picking the argmax action, called once per step on the
    batch of observations by every contender (the same weights everywhere).
``synthetic-84x84x4``
    ``benches/synthetic_env.py``: 4x84x84 uint8 observations (28 KiB), a step that costs
    about a microsecond, random actions. Measures how a collector moves bytes.
``dmcontrol-cheetah-run``
    DeepMind Control Suite cheetah-run (MuJoCo, about 30 us a step; Dict observations of
    float64 ``position`` [8] and ``velocity`` [9], a Box(-1, 1, (6,)) action), uniform random
    actions. Needs the ``pycollect-dmcontrol`` plugin (``pip install -e
    plugins/pycollect-dmcontrol``): pycollect collects through ``"dm_control:cheetah-run"``.
    Its own, smaller set of contenders (below).
``atari-pong``
    Atari Pong through ALE (``benches/atari_env.py``): ``ALE/Pong-v5`` with ``frameskip=1``
    under gymnasium's ``AtariPreprocessing(frame_skip=4, screen_size=84, grayscale_obs=True,
    noop_max=30)`` and ``FrameStackObservation(stack_size=4)``: 4x84x84 uint8 observations,
    Discrete(6), uniform random actions, about 500 us a step. pycollect builds it through
    ``"callable:atari_env:make_env"`` (workers inherit the trainer's ``sys.path``, which holds
    this directory). Needs ``ale-py`` and ``opencv-python-headless`` (the ``bench`` extra).
    Its own set of contenders (below), with EnvPool and Stable-Baselines3 among them.

Contenders, each with ``--envs`` (K, default 8) environments per worker where it has workers:

* raw gymnasium loop: one env stepped in a plain loop in this process (the baseline; for
  ``dmcontrol-cheetah-run`` the raw dm_control loop: one ``suite.load("cheetah", "run")`` env
  stepped with pre-sampled uniform random actions);
* 2 raw loops in parallel: two spawned processes, each stepping K envs round-robin in the raw
  loop, started together and run for a fixed time (``raw2_ms``); reported as the sum of the two
  loops' frames/s. This is the measured limit of 2 workers on this machine (the "x 2 raw loops"
  column): with the machine to itself it is about 2x the raw loop; where other work holds a
  CPU it is about 1x, and every 2-process contender is capped with it;
* pycollect in-process (``num_workers=0``, K envs);
* pycollect sync with 1 worker, sync with 2 workers (copied batches, and ``zero_copy=True``),
  async with 2 workers (K envs each);
* gymnasium ``SyncVectorEnv`` (K envs) and ``AsyncVectorEnv(shared_memory=True)`` with 2
  envs (one process per core, as many processes as pycollect has workers) and with 2K envs
  (as many envs as pycollect's 2 workers step, one process each);
* TorchRL ``MultiSyncCollector`` and ``MultiAsyncCollector`` with 2 workers, each stepping a
  ``SerialEnv`` of K ``GymEnv`` (``DMControlEnv("cheetah", "run")`` for dm_control).

``atari-pong`` runs the raw loop, 2 raw loops in parallel, pycollect in-process, sync with 1 and
2 workers, async with 2, the three gymnasium vector envs, EnvPool's own ``Pong-v5``
(``envpool.make_gymnasium``, 2K envs on 2 threads, synchronous, its C++ preprocessing set to
match; see ``benches/atari_env.py`` for where it differs) and Stable-Baselines3's
``SubprocVecEnv`` with 2K envs, one process each as SB3 builds it (its default start method,
forkserver). EnvPool and SB3 are skipped with a message where they cannot be imported.

``dmcontrol-cheetah-run`` runs the raw dm_control loop, 2 raw loops in parallel, pycollect in-process, sync with 1 and
with 2 workers, and TorchRL ``MultiSyncCollector`` twice: with a ``SerialEnv`` of K
``DMControlEnv`` per worker (the same envs as pycollect) and with one ``DMControlEnv`` per
worker (``MultiSyncCollector([make_env] * 2, ...)``, as TorchRL's examples build it); the
gymnasium vector envs, zero-copy and async contenders belong to the gymnasium workloads only.

Batches hold 64 steps of every env: K x 64 frames in-process and per async batch, 2K x 64
per sync batch (TorchRL's ``frames_per_batch`` is set the same way). Only steady state counts:
construction and the first batch (or the first 64 steps) of every contender are excluded and
reported separately as startup. Contenders run interleaved (A B C ... A B C ...) for
``--rounds`` rounds, because the speed of these shared virtual machines drifts by tens of
percent over minutes; every ratio compares two contenders of the same round. Each result
also records ``others_cpus`` (the "others" column): how many CPUs the rest of the machine kept
busy during the timed part, from ``/proc/stat``. Where it is near 1 on a 2-vCPU machine, a
contender with 2 workers had one CPU for both and the round measured the other work.

Run:
    python benches/throughput.py                 # all workloads, 3 rounds (~3 min on 2 vCPUs)
    python benches/throughput.py --quick         # a quarter of the frames, 2 rounds (~40 s)
    python benches/throughput.py --workloads cartpole-random --rounds 5
    python benches/throughput.py --workloads dmcontrol-cheetah-run --rounds 5   # ~2 min
    python benches/throughput.py --workloads atari-pong,cartpole-random --envs 4   # issue 12, ~5 min
    python benches/throughput.py --workloads atari-pong --envs 4 --profile-workers 8   # py-spy the workers

Writes ``benches/results/throughput.json`` and ``benches/results/throughput.png``.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("MUJOCO_GL", "disable")  # dm_control renders nothing here; workers inherit it

import gymnasium as gym
import numpy as np
import psutil
import torch
from torch import nn

import pycollect

sys.path.insert(0, str(Path(__file__).parent))
import atari_env  # needs the path above; pycollect's workers import it by name too
import synthetic_env  # needs the path above; registers Synthetic84x84x4-v0

torch.set_num_threads(1)
RESULTS = Path(__file__).parent / "results"
STEPS = 64  # steps per env per batch, for every contender
WORKERS = 2
STARTUP_GOAL = 1.3  # "about one worker's start"


# -- policies --------------------------------------------------------------------------------


class MLPPolicy(nn.Module):
    """A 2x64 tanh MLP returning argmax actions (integers), used by every contender."""

    def __init__(self, obs_dim: int = 4, num_actions: int = 2) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.net = nn.Sequential(
            nn.Linear(obs_dim, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, num_actions)
        )
        with torch.no_grad():
            for param in self.net.parameters():
                param.copy_(torch.randn(param.shape, generator=gen) * 0.3)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return self.net(observation).argmax(-1)


class OneHot(nn.Module):
    """A policy's integer actions one-hot, as TorchRL's ``GymEnv`` wants for Discrete spaces.

    Args:
        policy: Returns integer actions.
        num_actions: The Discrete space's size.
    """

    def __init__(self, policy: nn.Module, num_actions: int) -> None:
        super().__init__()
        self.policy, self.num_actions = policy, num_actions

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return nn.functional.one_hot(self.policy(observation), self.num_actions)


# -- workloads -------------------------------------------------------------------------------


def _cartpole() -> gym.Env:
    return gym.make("CartPole-v1")


def _torchrl_cartpole() -> Any:
    from torchrl.envs import GymEnv

    return GymEnv("CartPole-v1")


def _torchrl_cheetah_run() -> Any:
    from torchrl.envs import DMControlEnv

    return DMControlEnv("cheetah", "run")


RAW, TORCHRL_SYNC = "raw gymnasium loop", "TorchRL MultiSync (2 workers)"
TORCHRL_SYNC_1 = "TorchRL MultiSync (2 workers x 1 env)"  # as TorchRL's examples build it
RAW_DMC = "raw dm_control loop"
RAW2 = "2 raw loops in parallel"  # two processes, K envs each: the measured limit on 2 CPUs
ENVPOOL = "EnvPool (2K envs, 2 threads)"
SB3 = "SB3 SubprocVecEnv (2K procs)"
SYNC_1, SYNC_2 = "pycollect sync, 1 worker", "pycollect sync, 2 workers"
SYNC_VECTOR = "gymnasium SyncVectorEnv (K envs)"
GYM_CONTENDERS = (
    RAW,
    RAW2,
    "pycollect in-process",
    "pycollect sync, 1 worker",
    "pycollect sync, 2 workers",
    "pycollect sync, 2 workers, zero_copy",
    "pycollect async, 2 workers",
    "gymnasium SyncVectorEnv (K envs)",
    "gymnasium AsyncVectorEnv (2 procs)",
    "gymnasium AsyncVectorEnv (2K procs)",
    TORCHRL_SYNC,
    "TorchRL MultiAsync (2 workers)",
)
DMC_CONTENDERS = (
    RAW_DMC,
    RAW2,
    "pycollect in-process",
    "pycollect sync, 1 worker",
    "pycollect sync, 2 workers",
    TORCHRL_SYNC,
    TORCHRL_SYNC_1,
)
ATARI_CONTENDERS = (
    RAW,
    RAW2,
    "pycollect in-process",
    "pycollect sync, 1 worker",
    "pycollect sync, 2 workers",
    "pycollect async, 2 workers",
    "gymnasium SyncVectorEnv (K envs)",
    "gymnasium AsyncVectorEnv (2 procs)",
    "gymnasium AsyncVectorEnv (2K procs)",
    ENVPOOL,
    SB3,
)
# Contenders that need an optional package: skipped, with a message, where it is missing.
REQUIRES = {ENVPOOL: "envpool", SB3: "stable_baselines3"}
# Per-round ratios: "x_<key>" is this contender's frames/s over that contender's, same round.
REFERENCES = {
    "x_raw2": RAW2,
    "x_torchrl_sync": TORCHRL_SYNC,
    "x_torchrl_sync_1": TORCHRL_SYNC_1,
    "x_envpool": ENVPOOL,
    "x_sync_1": SYNC_1,
    "x_sync_vector": SYNC_VECTOR,
}


@dataclass(frozen=True)
class Workload:
    """One environment + policy combination, its contenders and their frame budgets."""

    name: str
    title: str
    make_gym: Callable[[], gym.Env] | None  # None: no gymnasium env (the raw loop is not gymnasium's)
    make_torchrl: Callable[[], Any] | None  # None: no TorchRL contenders
    pycollect_env: str | Callable[[], gym.Env]
    mlp: bool
    # "raw", "fast" (pycollect, SyncVectorEnv, EnvPool), "vector" (AsyncVectorEnv, SB3), "torchrl",
    # "raw2_ms" (how long the 2 raw loops in parallel run, in milliseconds)
    frames: dict[str, int]
    contenders: tuple[str, ...] = GYM_CONTENDERS  # names in CONTENDERS, in running order
    baseline: str = RAW  # the contender "x raw" divides by


WORKLOADS = {
    w.name: w
    for w in (
        Workload(
            "cartpole-random",
            "CartPole-v1, random policy",
            _cartpole,
            _torchrl_cartpole,
            "CartPole-v1",
            False,
            {"raw": 120_000, "fast": 150_000, "vector": 24_000, "torchrl": 12_288, "raw2_ms": 1_000},
        ),
        Workload(
            "cartpole-mlp",
            "CartPole-v1, 2x64 MLP policy",
            _cartpole,
            _torchrl_cartpole,
            "CartPole-v1",
            True,
            {"raw": 30_000, "fast": 100_000, "vector": 16_000, "torchrl": 8_192, "raw2_ms": 1_000},
        ),
        Workload(
            "synthetic-84x84x4",
            "synthetic env, 4x84x84 uint8 observations, random policy",
            synthetic_env.make_env,
            synthetic_env.make_torchrl_env,
            synthetic_env.make_env,
            False,
            {"raw": 300_000, "fast": 60_000, "vector": 12_000, "torchrl": 8_192, "raw2_ms": 1_000},
        ),
        Workload(
            "dmcontrol-cheetah-run",
            "dm_control cheetah-run, random policy",
            None,
            _torchrl_cheetah_run,
            "dm_control:cheetah-run",
            False,
            {"raw": 40_000, "fast": 40_000, "torchrl": 8_192, "raw2_ms": 1_500},
            DMC_CONTENDERS,
            RAW_DMC,
        ),
        Workload(
            "atari-pong",
            "Atari Pong (ALE, 84x84 gray, frame skip 4, stack 4), random policy",
            atari_env.make_env,
            None,
            "callable:atari_env:make_env",
            False,
            {"raw": 3_000, "fast": 8_192, "vector": 4_096, "raw2_ms": 2_000},
            ATARI_CONTENDERS,
        ),
    )
}


# -- measurement helpers ---------------------------------------------------------------------


@dataclass
class Result:
    """One contender's run: steady-state frames/s, plus what surrounds it."""

    fps: float
    frames: int
    seconds: float
    cpu_seconds: float  # CPU time of this process and all its children during the timed part
    trainer_user_s: float = 0.0  # this process only, timed part
    trainer_sys_s: float = 0.0
    trainer_faults: int = 0  # minor page faults of this process, timed part
    others_cpus: float = 0.0  # CPUs the rest of the machine kept busy during the timed part (other work)
    startup_s: float | None = None  # constructor + first batch
    startup_cpu_s: float | None = None  # CPU time of the whole process tree during startup
    close_s: float | None = None
    batch_ms: list[float] | None = None  # wall time of each timed next-batch call
    policy_cpu_s: float | None = None  # CPU time of this process's policy calls in the timed part (where counted)
    wait_cpu_s: float | None = None  # CPU time of this process's step waits in the timed part (where counted)


class CpuClock:
    """CPU time of this process and every live descendant (workers included)."""

    def __init__(self) -> None:
        self.me = psutil.Process()

    def read(self) -> float:
        total = 0.0
        for proc in [self.me, *self.me.children(recursive=True)]:
            try:
                times = proc.cpu_times()
            except psutil.Error:
                continue
            total += times.user + times.system
        return total


CPU = CpuClock()


def _machine_busy_s() -> float:
    """CPU seconds the whole machine has spent busy (user, nice, system, irq, softirq) since boot."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:8]]
    user, nice, system, _idle, _iowait, irq, softirq = fields
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


class Timer:
    """Wall and whole-tree CPU time of the timed (steady-state) part of a run."""

    def __enter__(self) -> Timer:
        self.busy0 = _machine_busy_s()
        self.cpu0 = CPU.read()
        self.usage0 = resource.getrusage(resource.RUSAGE_SELF)
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.t0
        usage = resource.getrusage(resource.RUSAGE_SELF)
        self.cpu_seconds = CPU.read() - self.cpu0
        self.others_cpus = max(0.0, (_machine_busy_s() - self.busy0 - self.cpu_seconds) / self.seconds)
        self.user = usage.ru_utime - self.usage0.ru_utime
        self.sys = usage.ru_stime - self.usage0.ru_stime
        self.faults = usage.ru_minflt - self.usage0.ru_minflt

    def result(self, frames: int, **extra: Any) -> Result:
        """The :class:`Result` of ``frames`` frames collected in the timed part."""
        return Result(
            frames / self.seconds,
            frames,
            self.seconds,
            self.cpu_seconds,
            self.user,
            self.sys,
            self.faults,
            self.others_cpus,
            **extra,
        )


def _policy_for(workload: Workload) -> MLPPolicy | None:
    return MLPPolicy() if workload.mlp else None


# -- contenders ------------------------------------------------------------------------------


def raw_loop(workload: Workload, k: int, frames: dict[str, int]) -> Result:
    """One env in a plain loop; random actions pre-sampled, or the MLP called every step."""
    assert workload.make_gym is not None, workload.name
    env = workload.make_gym()
    env.action_space.seed(0)
    actions = [env.action_space.sample() for _ in range(1024)]
    policy = _policy_for(workload)
    obs, _ = env.reset(seed=0)
    n = frames["raw"]

    def run(count: int, obs: Any) -> Any:
        for i in range(count):
            if policy is None:
                action = actions[i & 1023]
            else:
                with torch.no_grad():
                    action = int(policy(torch.from_numpy(obs)[None])[0])
            obs, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                obs, _ = env.reset()
        return obs

    obs = run(STEPS, obs)  # warm-up, like everyone's first batch
    with Timer() as timer:
        run(n, obs)
    env.close()
    return timer.result(n)


def raw_dmcontrol_loop(workload: Workload, k: int, frames: dict[str, int]) -> Result:
    """One ``suite.load("cheetah", "run")`` env stepped in a plain loop, actions pre-sampled."""
    from dm_control import suite

    env = suite.load("cheetah", "run", task_kwargs={"random": 0})
    spec = env.action_spec()
    rng = np.random.default_rng(0)
    actions = list(rng.uniform(spec.minimum, spec.maximum, size=(1024, *spec.shape)))
    env.reset()
    n = frames["raw"]

    def run(count: int) -> None:
        step = env.step
        for i in range(count):
            if step(actions[i & 1023]).last():
                env.reset()

    run(STEPS)  # warm-up, like everyone's first batch
    with Timer() as timer:
        run(n)
    env.close()
    return timer.result(n)


def _collector(
    workload: Workload, k: int, num_workers: int, *, sync: bool = True, zero_copy: bool = False
) -> pycollect.Collector:
    """The workload's pycollect collector: K envs per worker, STEPS steps of every env per batch."""
    rows = k * (num_workers if num_workers and sync else 1)
    return pycollect.Collector(
        workload.pycollect_env,
        _policy_for(workload),
        frames_per_batch=rows * STEPS,
        envs_per_worker=k,
        num_workers=num_workers,
        sync=sync,
        zero_copy=zero_copy,
        seed=0,
    )


def _pycollect(
    workload: Workload, k: int, frames: int, num_workers: int, sync: bool, zero_copy: bool = False
) -> Result:
    cpu0, t0 = CPU.read(), time.perf_counter()
    collector = _collector(workload, k, num_workers, sync=sync, zero_copy=zero_copy)

    def every_worker_delivered(batch: Any) -> None:
        if num_workers and not sync:
            # Steady state starts once every worker has delivered: a worker's trajectory ids
            # are congruent to its index modulo the number of workers.
            seen = {int(batch["collector", "traj_ids"][0, 0]) % num_workers}
            while len(seen) < num_workers:
                seen.add(int(collector.next_batch()["collector", "traj_ids"][0, 0]) % num_workers)

    batches = max(1, round(frames / collector.frames_per_batch))
    return _measure(collector, collector.next_batch, every_worker_delivered, batches, t0, cpu0)


def _measure(collector: Any, next_batch: Any, warm_up: Any, batches: int, t0: float, cpu0: float) -> Result:
    """Startup (to the first batch), ``batches`` timed batches after ``warm_up``, and close."""
    try:
        first = next_batch()
        startup, startup_cpu = time.perf_counter() - t0, CPU.read() - cpu0
        warm_up(first)
        got, times = 0, []
        with Timer() as timer:
            for _ in range(batches):
                b0 = time.perf_counter()
                got += next_batch().numel()
                times.append((time.perf_counter() - b0) * 1e3)
    finally:
        c0 = time.perf_counter()
        collector.shutdown()
        close = time.perf_counter() - c0
    return timer.result(got, startup_s=startup, startup_cpu_s=startup_cpu, close_s=close, batch_ms=times)


def pycollect_in_process(workload: Workload, k: int, frames: dict[str, int]) -> Result:
    """``Collector(num_workers=0)``: K envs stepped in this process."""
    return _pycollect(workload, k, frames["fast"], 0, True)


def pycollect_sync_1(workload: Workload, k: int, frames: dict[str, int]) -> Result:
    """``Collector(num_workers=1)``: one worker process with K envs."""
    return _pycollect(workload, k, frames["fast"], 1, True)


def pycollect_sync_2(workload: Workload, k: int, frames: dict[str, int]) -> Result:
    """``Collector(num_workers=2, sync=True)``: batches [2K, 64]."""
    return _pycollect(workload, k, frames["fast"], WORKERS, True)


def pycollect_sync_2_zero_copy(workload: Workload, k: int, frames: dict[str, int]) -> Result:
    """``Collector(num_workers=2, zero_copy=True)``: batches are views of the shared slots."""
    return _pycollect(workload, k, frames["fast"], WORKERS, True, zero_copy=True)


def pycollect_async_2(workload: Workload, k: int, frames: dict[str, int]) -> Result:
    """``Collector(num_workers=2, sync=False)``: batches [K, 64] from whichever worker is done."""
    return _pycollect(workload, k, frames["fast"], WORKERS, False)


def _timed_steps(
    t0: float, envs: Any, num_envs: int, frames: int, prepare: Callable[[], Callable[[int], Any]]
) -> Result:
    """Time a vector env (``envs``, built since ``t0``) the same way for every contender.

    ``prepare()`` seeds and resets ``envs`` and returns ``run(count)``, which steps them
    ``count`` times. The warm-up (:data:`STEPS` steps, like everyone's first batch) counts as
    start-up; then ``frames // num_envs`` steps are timed; closing is timed apart. ``envs`` is
    closed whatever happens.
    """
    try:
        run = prepare()
        run(STEPS)
        startup = time.perf_counter() - t0
        steps = max(1, frames // num_envs)
        with Timer() as timer:
            run(steps)
    finally:
        c0 = time.perf_counter()
        envs.close()
        close = time.perf_counter() - c0
    return timer.result(steps * num_envs, startup_s=startup, close_s=close)


def _vector_env(workload: Workload, num_envs: int, frames: int, vector_cls: type, **kwargs: Any) -> Result:
    t0 = time.perf_counter()
    envs = vector_cls([workload.make_gym] * num_envs, **kwargs)

    def prepare() -> Callable[[int], Any]:
        envs.action_space.seed(0)
        actions = [envs.action_space.sample() for _ in range(64)]
        policy = _policy_for(workload)
        obs = envs.reset(seed=0)[0]

        def run(count: int) -> None:
            nonlocal obs
            for i in range(count):
                if policy is None:
                    action = actions[i & 63]
                else:
                    with torch.no_grad():
                        action = policy(torch.from_numpy(obs)).numpy()
                obs, *_ = envs.step(action)  # vector envs reset finished envs themselves

        return run

    return _timed_steps(t0, envs, num_envs, frames, prepare)


def gym_sync_vector(workload: Workload, k: int, frames: dict[str, int]) -> Result:
    """gymnasium ``SyncVectorEnv`` with K envs, in this process."""
    return _vector_env(workload, k, frames["fast"], gym.vector.SyncVectorEnv)


def gym_async_vector_2(workload: Workload, k: int, frames: dict[str, int]) -> Result:
    """gymnasium ``AsyncVectorEnv(shared_memory=True)``, 2 envs = 2 processes."""
    return _vector_env(workload, WORKERS, frames["vector"], gym.vector.AsyncVectorEnv, shared_memory=True)


def gym_async_vector_2k(workload: Workload, k: int, frames: dict[str, int]) -> Result:
    """gymnasium ``AsyncVectorEnv(shared_memory=True)``, 2K envs = 2K processes."""
    return _vector_env(workload, WORKERS * k, frames["vector"], gym.vector.AsyncVectorEnv, shared_memory=True)


def _raw_child(name: str, k: int, seconds: float, ready: Any, go: Any, results: Any, index: int) -> None:
    """One of the "2 raw loops in parallel": K envs stepped round-robin in a plain loop."""
    workload = WORKLOADS[name]
    if workload.baseline == RAW_DMC:
        from dm_control import suite

        envs = [suite.load("cheetah", "run", task_kwargs={"random": 100 * index + j}) for j in range(k)]
        spec = envs[0].action_spec()
        rng = np.random.default_rng(index)
        actions = list(rng.uniform(spec.minimum, spec.maximum, size=(1024, *spec.shape)))
        for env in envs:
            env.reset()

        def step_all(t: int) -> None:
            for j, env in enumerate(envs):
                if env.step(actions[(t + j) & 1023]).last():
                    env.reset()

    else:
        assert workload.make_gym is not None, name
        envs = [workload.make_gym() for _ in range(k)]
        envs[0].action_space.seed(index)
        actions = [envs[0].action_space.sample() for _ in range(1024)]
        policy = _policy_for(workload)
        obs = [env.reset(seed=100 * index + j)[0] for j, env in enumerate(envs)]

        def step_all(t: int) -> None:
            for j, env in enumerate(envs):
                if policy is None:
                    action = actions[(t + j) & 1023]
                else:
                    with torch.no_grad():
                        action = int(policy(torch.from_numpy(obs[j])[None])[0])
                obs[j], _, terminated, truncated, _ = env.step(action)
                if terminated or truncated:
                    obs[j], _ = env.reset()

    for t in range(STEPS):  # warm-up, like everyone's first batch
        step_all(t)
    ready.put(index)
    go.wait()
    t, start = 0, time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        step_all(t)
        t += 1
    results.put((t * k, time.perf_counter() - start))


def raw_loops_in_parallel(workload: Workload, k: int, frames: dict[str, int]) -> Result:
    """2 processes, each the raw loop over K envs, started together: their summed frames/s."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")  # fresh interpreters, like pycollect's workers
    ready, results, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    seconds = frames["raw2_ms"] / 1000
    t0 = time.perf_counter()
    procs = [
        ctx.Process(target=_raw_child, args=(workload.name, k, seconds, ready, go, results, i), daemon=True)
        for i in range(WORKERS)
    ]
    for proc in procs:
        proc.start()
    try:
        for _ in procs:
            ready.get(timeout=300)
        startup = time.perf_counter() - t0
        with Timer() as timer:
            go.set()
            outs = [results.get(timeout=seconds + 300) for _ in procs]
    finally:
        c0 = time.perf_counter()
        for proc in procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
        close = time.perf_counter() - c0
    result = timer.result(sum(n for n, _ in outs), startup_s=startup, close_s=close)
    result.fps = sum(n / s for n, s in outs)  # each loop's own rate, summed
    return result


def _step_loop(envs: Any, actions: list[Any], count: int) -> None:
    step = envs.step
    for i in range(count):
        step(actions[i % len(actions)])  # vector envs reset finished envs themselves


def envpool_pong(workload: Workload, k: int, frames: dict[str, int]) -> Result:
    """EnvPool's ``Pong-v5`` (``make_gymnasium``), 2K envs on 2 threads, synchronous steps."""
    n = WORKERS * k
    t0 = time.perf_counter()
    envs = atari_env.make_envpool(n, num_threads=WORKERS, seed=0)

    def prepare() -> Callable[[int], Any]:
        rng = np.random.default_rng(0)
        actions = list(rng.integers(0, envs.action_space.n, size=(64, n), dtype=np.int32))
        envs.reset()
        return functools.partial(_step_loop, envs, actions)

    return _timed_steps(t0, envs, n, frames["fast"], prepare)


def sb3_subproc(workload: Workload, k: int, frames: dict[str, int]) -> Result:
    """Stable-Baselines3 ``SubprocVecEnv``: 2K envs, one process each (SB3's layout), forkserver."""
    from stable_baselines3.common.vec_env import SubprocVecEnv

    assert workload.make_gym is not None, workload.name
    n = WORKERS * k
    t0 = time.perf_counter()
    envs = SubprocVecEnv([workload.make_gym] * n)  # start_method: SB3's default, forkserver on Linux

    def prepare() -> Callable[[int], Any]:
        envs.seed(0)
        envs.action_space.seed(0)
        actions = [np.array([envs.action_space.sample() for _ in range(n)]) for _ in range(64)]
        envs.reset()
        return functools.partial(_step_loop, envs, actions)

    return _timed_steps(t0, envs, n, frames["vector"], prepare)


def _torchrl(workload: Workload, k: int, frames: int, sync: bool, serial: bool = True) -> Result:

    from tensordict.nn import TensorDictModule
    from torchrl.collectors import MultiAsyncCollector, MultiSyncCollector
    from torchrl.envs import SerialEnv

    if serial:
        make = functools.partial(SerialEnv, k, workload.make_torchrl)
    else:  # one env per worker, the collector's create_env_fn list as TorchRL's examples write it
        make, k = workload.make_torchrl, 1
    policy = None
    if workload.mlp:
        policy = TensorDictModule(OneHot(MLPPolicy(), 2), in_keys=["observation"], out_keys=["action"])
    cls = MultiSyncCollector if sync else MultiAsyncCollector
    # MultiSync splits frames_per_batch across its workers; MultiAsync gives each worker all of it.
    per_batch = k * STEPS * (WORKERS if sync else 1)
    cpu0, t0 = CPU.read(), time.perf_counter()
    collector = cls([make] * WORKERS, policy, frames_per_batch=per_batch, total_frames=-1)
    iterator = iter(collector)

    def every_worker_delivered(_first: Any) -> None:
        if not sync:
            for _ in range(WORKERS - 1):  # let every worker deliver once, as for pycollect async
                next(iterator)

    batches = max(1, round(frames / per_batch))
    return _measure(collector, lambda: next(iterator), every_worker_delivered, batches, t0, cpu0)


def torchrl_multi_sync(workload: Workload, k: int, frames: dict[str, int]) -> Result:
    """TorchRL ``MultiSyncCollector``, 2 workers, each a ``SerialEnv`` of K envs."""
    return _torchrl(workload, k, frames["torchrl"], True)


def torchrl_multi_sync_one_env(workload: Workload, k: int, frames: dict[str, int]) -> Result:
    """TorchRL ``MultiSyncCollector``, 2 workers, one env each (no ``SerialEnv``)."""
    return _torchrl(workload, k, frames["torchrl"] // 2, True, serial=False)


def torchrl_multi_async(workload: Workload, k: int, frames: dict[str, int]) -> Result:
    """TorchRL ``MultiAsyncCollector``, 2 workers, each a ``SerialEnv`` of K envs."""
    return _torchrl(workload, k, frames["torchrl"], False)


Contender = Callable[[Workload, int, dict[str, int]], Result]
CONTENDERS: dict[str, Contender] = {
    RAW: raw_loop,
    RAW_DMC: raw_dmcontrol_loop,
    RAW2: raw_loops_in_parallel,
    "pycollect in-process": pycollect_in_process,
    "pycollect sync, 1 worker": pycollect_sync_1,
    "pycollect sync, 2 workers": pycollect_sync_2,
    "pycollect sync, 2 workers, zero_copy": pycollect_sync_2_zero_copy,
    "pycollect async, 2 workers": pycollect_async_2,
    "gymnasium SyncVectorEnv (K envs)": gym_sync_vector,
    "gymnasium AsyncVectorEnv (2 procs)": gym_async_vector_2,
    "gymnasium AsyncVectorEnv (2K procs)": gym_async_vector_2k,
    TORCHRL_SYNC: torchrl_multi_sync,
    TORCHRL_SYNC_1: torchrl_multi_sync_one_env,
    "TorchRL MultiAsync (2 workers)": torchrl_multi_async,
    ENVPOOL: envpool_pong,
    SB3: sb3_subproc,
}


# -- reporting -------------------------------------------------------------------------------


def frames_per_second(collector: Any, seconds: float, warm_up: int = 3) -> float:
    """Frames per second over whole batches for about ``seconds``, after ``warm_up`` batches."""
    for _ in range(warm_up):
        collector.next_batch()
    frames, began = 0, time.perf_counter()
    while time.perf_counter() - began < seconds:
        frames += collector.next_batch().numel()
    return frames / (time.perf_counter() - began)


def save_record(path: Path, **fields: Any) -> None:
    """Write a bench's results as JSON: the command, the time, the machine and the git state, then ``fields``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "when": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": _machine(),
        "git": _git(),
        **fields,
    }
    path.write_text(json.dumps(record, indent=1))


def save_figure(fig: Any, path: Path) -> None:
    """Lay out a bench's matplotlib figure, write it to ``path`` as a PNG and close it."""
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)


def _machine() -> dict[str, Any]:
    import tensordict
    import torchrl

    cpu_model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "cpu_model": cpu_model,
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": torch.__version__,
        "gymnasium": gym.__version__,
        "torchrl": torchrl.__version__,
        "tensordict": tensordict.__version__,
        "pycollect": pycollect.__version__,
        **{name: _version(name) for name in ("ale-py", "envpool", "stable-baselines3", "opencv-python-headless")},
    }


def _version(distribution: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def _steal() -> int:
    fields = Path("/proc/stat").read_text().splitlines()[0].split()
    return int(fields[8]) if len(fields) > 8 else 0


def _stats(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _summary(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per contender: frames/s and ratios (median, min, max over rounds) and where time went."""
    out: dict[str, dict[str, Any]] = {}
    for name, entries in runs.items():
        if not entries:
            continue
        fps = [e["fps"] for e in entries]

        def per_frame_us(field: str, entries: list[dict[str, Any]] = entries) -> float:
            return statistics.median(e[field] / e["frames"] * 1e6 for e in entries)

        row: dict[str, Any] = {
            "fps_median": statistics.median(fps),
            "fps_min": min(fps),
            "fps_max": max(fps),
            "frames_per_cpu_s_median": statistics.median(e["frames"] / max(e["cpu_seconds"], 1e-9) for e in entries),
            "cpus_busy_median": statistics.median(e["cpu_seconds"] / e["seconds"] for e in entries),
            "others_cpus_median": statistics.median(e.get("others_cpus", 0.0) for e in entries),
            "trainer_user_us_per_frame": per_frame_us("trainer_user_s"),
            "trainer_sys_us_per_frame": per_frame_us("trainer_sys_s"),
            "children_cpu_us_per_frame": statistics.median(
                (e["cpu_seconds"] - e["trainer_user_s"] - e["trainer_sys_s"]) / e["frames"] * 1e6 for e in entries
            ),
            "trainer_faults_per_frame": statistics.median(e["trainer_faults"] / e["frames"] for e in entries),
        }
        for key in ("x_raw", *REFERENCES, "startup_s", "startup_cpu_s", "close_s"):
            values = [e[key] for e in entries if e.get(key) is not None]
            if values:
                row[key] = _stats(values)
        batch = [ms for e in entries for ms in (e.get("batch_ms") or [])]
        if batch:
            row["batch_ms_p50"] = float(np.percentile(batch, 50))
            row["batch_ms_p99"] = float(np.percentile(batch, 99))
        out[name] = row
    return out


def _print_table(workload: Workload, summary: dict[str, dict[str, Any]], rounds: int, k: int) -> None:
    print(f"\n{workload.title} ({workload.name}); K={k} envs per worker, {rounds} rounds, median (min-max)")
    header = f"{'contender':38s} {'frames/s':>25s} {'x raw':>17s} {'x 2 raw loops':>17s} {'x TorchRL sync':>20s}"
    header += f" {'CPUs':>5s} {'others':>6s} {'trainer us/fr usr+sys':>21s} {'children us/fr':>14s} {'start s':>7s}"
    print(header)
    print("-" * len(header))
    for name, row in summary.items():
        fps = f"{row['fps_median']:,.0f} ({row['fps_min']:,.0f}-{row['fps_max']:,.0f})"
        cells = []
        for key in ("x_raw", "x_raw2", "x_torchrl_sync"):
            r = row.get(key)
            cells.append(f"{r['median']:.2f} ({r['min']:.2f}-{r['max']:.2f})" if r else "")
        start = row.get("startup_s")
        trainer = f"{row['trainer_user_us_per_frame']:.1f}+{row['trainer_sys_us_per_frame']:.1f}"
        print(
            f"{name:38s} {fps:>25s} {cells[0]:>17s} {cells[1]:>17s} {cells[2]:>20s} {row['cpus_busy_median']:5.2f} "
            f"{row.get('others_cpus_median', 0.0):6.2f} {trainer:>21s} "
            f"{row['children_cpu_us_per_frame']:14.1f} {'' if start is None else format(start['median'], '.2f'):>7s}"
        )


def _targets(summaries: dict[str, dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    checks: list[dict[str, Any]] = []

    def ratio(workload: str, name: str, key: str, goal: float) -> None:
        row = summaries.get(workload, {}).get(name, {}).get(key)
        if row:
            against = {"x_raw": "raw", **REFERENCES}[key]
            what = f"{workload}: {name} x {against} >= {goal}"
            checks.append({"target": what, "goal": goal, **row, "met": row["median"] >= goal})

    # issue 12: 2 workers x 4 envs on 2 CPUs, same run
    ratio("atari-pong", SYNC_2, "x_raw", 1.85)
    ratio("atari-pong", SYNC_2, "x_envpool", 1.0)
    ratio("cartpole-random", SYNC_2, "x_raw", 1.7)
    ratio("dmcontrol-cheetah-run", SYNC_2, "x_raw", 1.8)
    ratio("dmcontrol-cheetah-run", "pycollect in-process", "x_raw", 0.9)
    ratio("synthetic-84x84x4", SYNC_2, "x_sync_1", 1.5)
    ratio("synthetic-84x84x4", SYNC_2, "x_sync_vector", 1.0)
    # earlier issues
    ratio("cartpole-random", SYNC_2, "x_torchrl_sync", 20)
    ratio("synthetic-84x84x4", SYNC_2, "x_torchrl_sync", 10)
    ratio("synthetic-84x84x4", "pycollect sync, 2 workers, zero_copy", "x_torchrl_sync", 10)
    ratio("dmcontrol-cheetah-run", SYNC_2, "x_torchrl_sync", 20)
    ratio("dmcontrol-cheetah-run", SYNC_2, "x_torchrl_sync_1", 20)
    for name, summary in summaries.items():
        one = summary.get("pycollect sync, 1 worker", {}).get("startup_s")
        two = summary.get("pycollect sync, 2 workers", {}).get("startup_s")
        if one and two:
            value = two["median"] / one["median"]
            checks.append(
                {
                    "target": f"{name}: startup(2 workers) / startup(1 worker) <= {STARTUP_GOAL}",
                    "goal": STARTUP_GOAL,
                    "median": value,
                    "met": value <= STARTUP_GOAL,
                }
            )
    return checks


def _missing(module: str) -> str | None:
    """Why ``module`` cannot be imported here (no wheel, broken install), or None."""
    try:
        importlib.import_module(module)
    except Exception as exc:  # an ImportError, or whatever a broken wheel raises
        return f"{module} cannot be imported ({type(exc).__name__}: {exc})"
    return None


def _git() -> dict[str, Any]:
    root = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return ""

    return {
        "commit": git("rev-parse", "--short", "HEAD"),
        "dirty": git("status", "--porcelain", "--", "pycollect", "rust").splitlines(),
        "pycollect_imported_from": str(Path(pycollect.__file__).parent),
    }


def _profile(workloads: list[Workload], k: int, frames: int) -> None:
    """cProfile the trainer of pycollect in-process and sync with 2 workers; print the top."""
    import cProfile
    import pstats

    for workload in workloads:
        for name, num_workers in (("in-process", 0), ("sync, 2 workers", WORKERS)):
            with _collector(workload, k, num_workers) as collector:
                collector.next_batch()
                profiler = cProfile.Profile()
                batches = max(1, frames // collector.frames_per_batch)
                with Timer() as timer:
                    profiler.enable()
                    got = sum(collector.next_batch().numel() for _ in range(batches))
                    profiler.disable()
            children = (timer.cpu_seconds - timer.user - timer.sys) / got * 1e6
            print(
                f"\n== {workload.name}, pycollect {name}: {got / timer.seconds:,.0f} frames/s under cProfile; "
                f"trainer {timer.user / got * 1e6:.1f} us/frame user + {timer.sys / got * 1e6:.1f} sys, "
                f"{timer.faults / got:.1f} page faults/frame; children {children:.1f} us/frame"
            )
            pstats.Stats(profiler).sort_stats("tottime").print_stats(12)


# Where a worker's main thread is, by the source line of pycollect's runner (or worker loop) it
# is on: the first keyword found in that line names the category.
_LINE_CATEGORIES = (
    ("env_steps[i](", "env.step"),
    (".reset()", "env.reset"),
    ("random_action()", "action (random)"),
    ("policy.act(", "action (policy)"),
    ("on_step()", "heartbeat / weights between steps"),
    ("producer.claim(", "waiting for a free slot (sync hand-off)"),
    ("producer.commit(", "publishing the batch"),
    ("receiver.receive(", "weights between rollouts"),
    ("checks.", "checks (obs/reward/flags)"),
    ("next_array", "observation copies"),
    ("obs_array", "observation copies"),
    ("_out[", "runner bookkeeping (batch writes)"),
    ("np.", "runner bookkeeping (batch writes)"),
)


def _worker_profile(path: Path) -> tuple[dict[str, float], dict[str, float], int]:
    """Categories and source lines of a worker's main thread from a py-spy raw file, in us/step."""
    import linecache

    package = Path(pycollect.__file__).parent.parent
    by_category: dict[str, int] = {}
    by_line: dict[str, int] = {}
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        frames = stack.split(";")
        if not any(f.startswith("_run_module_as_main") for f in frames):
            continue  # the lifeline watcher thread
        count = int(count_text)
        total += count
        ours = [f for f in frames if f.startswith(("EnvRunner.rollout ", "_collect "))]
        if not ours:
            category, where = "worker start / other", frames[-1]
        else:
            where = ours[-1]
            file, _, lineno = where[where.index("(") + 1 : -1].rpartition(":")
            source = linecache.getline(str(package / file), int(lineno)).strip()
            category = next((c for key, c in _LINE_CATEGORIES if key in source), "runner loop (Python)")
            if where.startswith("EnvRunner.rollout") and ours[-1] is frames[-1]:
                category = "runner loop (Python)" if category.startswith(("env.", "action")) else category
            where = f"{where} {source}"
        by_category[category] = by_category.get(category, 0) + count
        by_line[where] = by_line.get(where, 0) + count
    scale = 1.0 / max(total, 1)
    return {c: n * scale for c, n in by_category.items()}, {w: n * scale for w, n in by_line.items()}, total


def _profile_workers(workload: Workload, k: int, seconds: float, rate: int, native: bool = False) -> None:
    """py-spy both workers of pycollect sync with 2 workers; print each one's split in us per env step."""
    import shutil

    if shutil.which("py-spy") is None:
        raise SystemExit("--profile-workers needs py-spy: pip install py-spy")
    RESULTS.mkdir(parents=True, exist_ok=True)
    if workload.baseline == RAW:
        raw = raw_loop(workload, k, workload.frames)
    else:
        raw = raw_dmcontrol_loop(workload, k, workload.frames)
    raw2 = raw_loops_in_parallel(workload, k, workload.frames)
    with _collector(workload, k, WORKERS) as collector:
        for _ in range(3):
            collector.next_batch()
        t0, got = time.perf_counter(), 0
        while time.perf_counter() - t0 < seconds / 2:
            got += collector.next_batch().numel()
        unprofiled = got / (time.perf_counter() - t0)
        pids = [p.pid for p in psutil.Process().children(recursive=True) if "pycollect.worker" in " ".join(p.cmdline())]
        outs = [RESULTS / f"pyspy-{workload.name}-worker{i}.txt" for i in range(len(pids))]
        spies = [
            subprocess.Popen(
                [
                    *("py-spy", "record", "--pid", str(pid), "--duration", str(int(seconds)), "--rate", str(rate)),
                    *("--format", "raw", "--idle", "--native" if native else "--nonblocking", "-o", str(out)),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for pid, out in zip(pids, outs, strict=True)
        ]
        t0, got = time.perf_counter(), 0
        while any(spy.poll() is None for spy in spies):
            got += collector.next_batch().numel()
        wall = time.perf_counter() - t0
    per_worker = got / WORKERS  # frames = env steps, per worker
    print(
        f"\n== {workload.name}: pycollect sync, {WORKERS} workers x {k} envs; {unprofiled:,.0f} frames/s unprofiled, "
        f"{got / wall:,.0f} under py-spy ({rate} Hz, {'native' if native else 'non-blocking'}, {wall:.1f} s); "
        f"{wall / per_worker * 1e6:.1f} us of wall time per env step per worker; the raw loop here: "
        f"{1e6 / raw.fps:.1f} us/step, {1e6 / raw2.fps * WORKERS:.1f} us/step in each of 2 raw loops in parallel"
    )
    for i, out in enumerate(outs):
        categories, lines, samples = _worker_profile(out)
        print(f"worker {i} ({samples} samples of its main thread; {out}):")
        for name, share in sorted(categories.items(), key=lambda kv: -kv[1]):
            print(f"  {share * 100:5.1f} %  {share * wall / per_worker * 1e6:7.1f} us/step  {name}")
        print("  top source lines:")
        for where, share in sorted(lines.items(), key=lambda kv: -kv[1])[:8]:
            print(f"  {share * 100:5.1f} %  {share * wall / per_worker * 1e6:7.1f} us/step  {where[:150]}")


def main() -> None:
    """Run the benchmark and print, save and plot the results."""
    # As the CLI does: the fork server imports while this process parses arguments and builds
    # its first contenders, so pycollect's startup_s is a collector's, not the server's cold start
    # (benches/startup.py measures that one).
    pycollect.prestart()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help=f"comma-separated: {', '.join(WORKLOADS)}")
    parser.add_argument("--contenders", default="", help="comma-separated substrings selecting contenders")
    parser.add_argument("--rounds", type=int, default=None, help="default 3 (2 with --quick)")
    parser.add_argument("--envs", type=int, default=8, help="K: envs per worker / in-process collector")
    parser.add_argument("--quick", action="store_true", help="a quarter of the frames, 2 rounds")
    parser.add_argument("--out", default=str(RESULTS / "throughput"), help="path stem for .json and .png")
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument(
        "--profile", action="store_true", help="instead: cProfile pycollect's trainer (in-process, sync 2 workers)"
    )
    parser.add_argument(
        "--profile-workers",
        type=float,
        metavar="SECONDS",
        help="instead: py-spy pycollect's 2 sync workers for SECONDS; split of a worker's time per env step",
    )
    parser.add_argument("--profile-rate", type=int, default=100, help="py-spy samples per second (--profile-workers)")
    parser.add_argument(
        "--profile-native", action="store_true", help="--profile-workers with native stacks (pauses the workers)"
    )
    parser.add_argument("--replot", metavar="JSON", help="instead: redraw the PNG of a saved JSON result")
    args = parser.parse_args()
    if args.replot:
        saved = json.loads(Path(args.replot).read_text())
        names = [w for w in saved["summary"] if w in WORKLOADS]
        path = Path(args.replot).with_suffix(".png")
        _plot(path, [WORKLOADS[w] for w in names], saved["summary"], saved["envs_per_worker"], saved["rounds"])
        print(f"wrote {path}")
        return
    rounds = args.rounds or (2 if args.quick else 3)
    workloads = [WORKLOADS[name.strip()] for name in args.workloads.split(",") if name.strip()]
    if importlib.util.find_spec("pycollect_dmcontrol") is None:
        dmc = [w for w in workloads if w.name.startswith("dmcontrol")]
        if dmc and args.workloads != parser.get_default("workloads"):
            parser.error(f"{dmc[0].name} needs the plugin: pip install -e plugins/pycollect-dmcontrol")
        for workload in dmc:
            print(f"skipping {workload.name}: pycollect-dmcontrol is not installed", file=sys.stderr)
            workloads.remove(workload)
    if _missing("ale_py") or _missing("cv2"):
        atari = [w for w in workloads if w.name == "atari-pong"]
        problem = _missing("ale_py") or _missing("cv2")
        if atari and args.workloads != parser.get_default("workloads"):
            parser.error(f"atari-pong needs ale-py and opencv-python-headless (pip install -e '.[bench]'): {problem}")
        for workload in atari:
            print(f"skipping {workload.name}: {problem}", file=sys.stderr)
            workloads.remove(workload)
    wanted = [s.strip().lower() for s in args.contenders.split(",") if s.strip()]
    contenders = {n: fn for n, fn in CONTENDERS.items() if not wanted or any(s in n.lower() for s in wanted)}
    for name, module in REQUIRES.items():
        problem = _missing(module) if name in contenders else None
        if problem:
            print(f"skipping {name}: {problem}", file=sys.stderr)
            del contenders[name]
    k = args.envs
    if args.profile_workers:
        for workload in workloads:
            _profile_workers(workload, k, args.profile_workers, args.profile_rate, args.profile_native)
        return
    if args.profile:
        for workload in workloads:
            _profile([workload], k, workload.frames["fast"] // (4 if args.quick else 1))
        return

    selected = {w.name: {n: contenders[n] for n in w.contenders if n in contenders} for w in workloads}
    runs = {w.name: {name: [] for name in selected[w.name]} for w in workloads}
    loads: list[dict[str, Any]] = []
    started = time.perf_counter()
    steal0 = _steal()
    for round_index in range(rounds):
        for workload in workloads:
            frames = {key: value // 4 if args.quick else value for key, value in workload.frames.items()}
            load_before = os.getloadavg()[0]
            this_round: dict[str, dict[str, Any]] = {}
            for name, fn in selected[workload.name].items():
                result = fn(workload, k, frames)
                this_round[name] = {**result.__dict__, "round": round_index}
            references = {"x_raw": workload.baseline, **REFERENCES}
            for name, entry in this_round.items():
                for key, reference in references.items():
                    against = this_round.get(reference, {}).get("fps")
                    entry[key] = entry["fps"] / against if against else None
                runs[workload.name][name].append(entry)
            loads.append({"round": round_index, "workload": workload.name, "load1_before": load_before})
            print(
                f"round {round_index + 1}/{rounds} {workload.name} (load {load_before:.1f}): "
                + ", ".join(f"{n} {e['fps']:,.0f} (others {e['others_cpus']:.1f} CPU)" for n, e in this_round.items()),
                flush=True,
            )
    elapsed = time.perf_counter() - started
    steal_s = (_steal() - steal0) / os.sysconf("SC_CLK_TCK")

    summaries = {w.name: _summary(runs[w.name]) for w in workloads}
    for workload in workloads:
        _print_table(workload, summaries[workload.name], rounds, k)
    checks = _targets(summaries)
    if checks:
        print("\ntargets (median of per-round ratios):")
        for check in checks:
            print(f"  {'MET   ' if check['met'] else 'MISSED'} {check['target']}: {check['median']:.2f}")
    print(f"\nwall time {elapsed:.0f} s, steal {steal_s:.1f} s, load average now {os.getloadavg()[0]:.1f}")

    stem = Path(args.out)
    save_record(
        stem.with_suffix(".json"),
        rounds=rounds,
        envs_per_worker=k,
        steps_per_batch=STEPS,
        workers=WORKERS,
        quick=args.quick,
        frame_budgets={w.name: {key: v // 4 if args.quick else v for key, v in w.frames.items()} for w in workloads},
        load=loads,
        steal_s=steal_s,
        wall_s=elapsed,
        summary=summaries,
        targets=checks,
        runs=runs,
    )
    if not args.no_plot:
        _plot(stem.with_suffix(".png"), workloads, summaries, k, rounds)
    print(f"wrote {stem.with_suffix('.json')}" + ("" if args.no_plot else f" and {stem.with_suffix('.png')}"))
    leftovers = [
        p.pid
        for p in psutil.Process().children(recursive=True)
        # multiprocessing's helpers (TorchRL's resource tracker, SB3's forkserver) and pycollect's
        # fork server (process name pycollect-fsrv) leave with this process
        if p.is_running()
        and p.name() != "pycollect-fsrv"
        and not any(h in " ".join(p.cmdline()) for h in ("resource_tracker", "forkserver"))
    ]
    if leftovers:
        print(f"warning: child processes still running: {leftovers}", file=sys.stderr)


def _plot(
    path: Path, workloads: list[Workload], summaries: dict[str, dict[str, dict[str, Any]]], k: int, rounds: int
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def color(name: str) -> str:
        if name.startswith("pycollect"):
            return "#C44E52"
        if name.startswith("TorchRL"):
            return "#8172B2"
        if name.startswith("gymnasium"):
            return "#55A868"
        if name.startswith(("EnvPool", "SB3")):
            return "#DD8452"
        if name == RAW2:
            return "#64B5CD"
        return "#4C72B0"

    longest = max(len(summaries[w.name]) for w in workloads)
    shared = len({tuple(summaries[w.name]) for w in workloads}) == 1  # the same contenders everywhere
    fig, axes = plt.subplots(
        1,
        len(workloads),
        figsize=(5.2 * len(workloads) + 2.6 * (1 if shared else len(workloads)), 0.42 * longest + 1.8),
        sharey=shared,
        squeeze=False,
    )
    for ax, workload in zip(axes[0], workloads, strict=True):
        summary = summaries[workload.name]
        names = list(summary)
        medians = [summary[n]["fps_median"] for n in names]
        spans = [[m - summary[n]["fps_min"], summary[n]["fps_max"] - m] for n, m in zip(names, medians, strict=True)]
        errors = np.array(spans).T
        ax.barh(names, medians, xerr=errors, color=[color(n) for n in names], capsize=2)
        ax.set_xscale("log")
        ax.set_xlim(min(medians) / 2, max(medians) * 6)
        ax.set_title(workload.title, fontsize=9)
        ax.set_xlabel("frames/s (log; median, min-max whiskers)", fontsize=8)
        ax.grid(axis="x", which="both", alpha=0.25)
        for y, value in enumerate(medians):
            raw, trl = summary[names[y]].get("x_raw"), summary[names[y]].get("x_torchrl_sync")
            label = f" {value / 1000:,.1f}k"
            if raw and names[y] != workload.baseline:
                label += f"  {raw['median']:.2g}x raw" if raw["median"] < 0.1 else f"  {raw['median']:.2f}x raw"
            if trl and names[y] != TORCHRL_SYNC:
                label += f", {trl['median']:.1f}x TorchRL"
            ax.text(summary[names[y]]["fps_max"] * 1.08, y, label, va="center", fontsize=7)
        if not shared or ax is axes[0][0]:
            ax.invert_yaxis()
            ax.tick_params(axis="y", labelsize=8)
    fig.suptitle(f"Collector throughput, 2 workers where applicable, K={k} envs per worker, {rounds} rounds")
    save_figure(fig, path)


if __name__ == "__main__":
    main()
