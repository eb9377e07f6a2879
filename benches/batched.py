"""Batched envs in pycollect's workers against the same envs without pycollect.

One interleaved run: every round runs each contender once, in an order that rotates from round
to round, and the ratios are taken within a round (machines are shared and noisy). Random
actions everywhere: what is measured is the env and what carries its results, not a policy.
Two workloads (``--workload``):

``pong`` (the default): Atari Pong as EnvPool's ``Pong-v5`` (84x84 gray, frame skip 4, stack 4,
no episodic life or reward clipping: ``benches/atari_env.py``'s settings). Contenders:

* ``EnvPool alone``: ``envpool.make("Pong-v5", num_envs=8, num_threads=2)`` stepped in a plain
  loop in this process (its C++ threads step the envs).
* ``pycollect workers over EnvPool``: ``Collector("envpool:Pong-v5", envs_per_worker=4,
  num_workers=2, env_kwargs={"num_threads": 1, ...})``: each worker hosts one EnvPool of 4 envs
  on one thread; the trainer receives ``[8, T]`` TensorDict batches.
* ``pycollect workers over gymnasium Pong``: the same collector over ALE single envs
  (``benches/atari_env.py``'s ``make_env``), 4 per worker: pycollect's Pong before batched envs.

``cartpole``: gymnasium's own batched CartPole (``CartPoleVectorEnv``, the vector entry point),
2 x 256 envs. Contenders:

* ``two raw loops in parallel``: two processes, each stepping ``CartPoleVectorEnv(256)`` in a
  plain loop, started together: their summed frames/s.
* ``pycollect make_vec over gymnasium-vector``: ``make_vec("gymnasium-vector:CartPole-v1", 512,
  num_workers=2)`` stepped in a plain loop: each worker hosts one ``CartPoleVectorEnv(256)``.

``envpool-cartpole``: EnvPool's CartPole, 2 x 256 envs, episodes ending every few steps (no
target; it measures a collector's resets of many sub-envs at once). Contenders:

* ``EnvPool alone``: ``envpool.make("CartPole-v1", num_envs=512, num_threads=2)`` in a plain loop.
* ``pycollect workers over EnvPool``: ``Collector("envpool:CartPole-v1", envs_per_worker=256,
  num_workers=2, env_kwargs={"num_threads": 1})``, ``[512, 32]`` batches.
* ``pycollect make_vec over EnvPool``: ``make_vec("envpool:CartPole-v1", 512, num_workers=2,
  env_kwargs={"num_threads": 1})`` stepped in a plain loop, EnvPool's infos (``env_id``,
  ``elapsed_step``, ``players``) kept as by default, and the same with ``info_keys=()``.

``envpool-infos``: what keeping EnvPool's infos costs, EnvPool's CartPole with 256 envs (no target).
Contenders, in this process unless said:

* ``EnvPool alone``: ``envpool.make("CartPole-v1", num_envs=256, num_threads=1)`` in a plain loop.
* ``make_vec``: ``make_vec("envpool:CartPole-v1", 256, num_workers=0)`` in a plain loop, in
  ``next_step`` (the default) and ``same_step`` mode, each with EnvPool's infos kept (the
  default) and with ``info_keys=()``.
* ``Collector``: ``Collector("envpool:CartPole-v1", envs_per_worker=256, num_workers=0)``,
  ``[256, 32]`` batches, keeping ``info_keys=["elapsed_step"]`` and keeping none.
* ``SB3VecEnv``: ``SB3VecEnv("envpool:CartPole-v1", 512, num_workers=2)``, infos kept (2 x 256).

``jax``: gymnax's CartPole (the ``pycollect-jax`` plugin), 4,096 envs on the CPU, stepped in
this process. Contenders:

* ``raw jitted gymnax loop``: ``jax.jit`` of ``jax.vmap(env.step)`` (gymnax's step with its own
  autoreset) over 4,096 envs, with the random actions drawn in JAX inside the same call,
  ``block_until_ready`` at each step: the most a Python loop over this env gets.
* ``pycollect engine='device' over gymnax``: ``Collector("gymnax:CartPole-v1", None,
  engine="device", envs_per_worker=4096, num_workers=0, frames_per_batch=4096*32)``: the env
  steps with torch tensors that share JAX's memory (``GymnaxDeviceEnv``), random actions drawn
  by the engine with torch for a whole batch and stepped in one jitted ``lax.scan`` of its 32
  steps (``GymnaxDeviceEnv.rollout``), ``[4096, 32]`` batches; whole batches timed, as every
  collector here (the engine's trajectory ids and the collector's episode statistics included).
* ``pycollect engine='inprocess' over gymnax`` (reference): the same collector over the host
  env (``GymnaxBatchedEnv``, numpy), stepped by the in-process engine.

Targets (issue 41), medians of the per-round ratios: on Pong, pycollect over EnvPool >= 0.95x
EnvPool alone and >= 1.1x pycollect over gymnasium Pong; on CartPole, make_vec >= 0.9x the two
raw loops; on gymnax, the device engine >= 0.9x the raw jitted loop. Results go to
``benches/results/batched-<workload>.json`` and a plot next to it.

Usage::

    python benches/batched.py                      # Pong: 3 rounds
    python benches/batched.py --workload cartpole
    python benches/batched.py --workload envpool-cartpole
    python benches/batched.py --workload envpool-infos
    python benches/batched.py --workload jax       # needs pycollect-jax (plugins/pycollect-jax)
    python benches/batched.py --quick              # fewer frames, 2 rounds
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import atari_env  # noqa: F401 - the workers import it by name ("callable:atari_env:make_env")
import throughput as tp  # the measurement helpers shared with the other benches

import pycollect

WORKERS = 2
PONG_ENVS = 4  # envs per worker on Pong
CARTPOLE_ENVS = 256  # envs per worker on CartPole
STEPS = 32  # steps of every env per batch, for the collectors
ENVPOOL = "EnvPool alone (8 envs, 2 threads)"
OVER_ENVPOOL = "pycollect workers over EnvPool (2 x 4, 1 thread each)"
OVER_GYM = "pycollect workers over gymnasium Pong (2 x 4)"
RAW_VECTOR = "two raw loops of CartPoleVectorEnv(256) in parallel"
MAKE_VEC = "pycollect make_vec over gymnasium-vector (2 x 256)"
ENVPOOL_CARTPOLE = "EnvPool alone (CartPole, 512 envs, 2 threads)"
OVER_ENVPOOL_CARTPOLE = "pycollect workers over EnvPool (CartPole, 2 x 256)"
MAKE_VEC_ENVPOOL = "pycollect make_vec over EnvPool (CartPole, 2 x 256, infos kept)"
MAKE_VEC_ENVPOOL_BARE = "pycollect make_vec over EnvPool (CartPole, 2 x 256, info_keys=())"
INFO_ENVS = 256  # EnvPool CartPoles of the envpool-infos workload
ENVPOOL_ONE = "EnvPool alone (CartPole, 256 envs, 1 thread)"
INFO_CONTENDERS = {  # name: (how it is made, keyword arguments)
    "pycollect make_vec, next_step, infos kept": ("make_vec", {}),
    "pycollect make_vec, next_step, info_keys=()": ("make_vec", {"info_keys": ()}),
    "pycollect make_vec, same_step, infos kept": ("make_vec", {"autoreset_mode": "same_step"}),
    "pycollect make_vec, same_step, info_keys=()": ("make_vec", {"autoreset_mode": "same_step", "info_keys": ()}),
    "pycollect Collector, info_keys=['elapsed_step']": ("collector", {"info_keys": ["elapsed_step"]}),
    "pycollect Collector, no info kept": ("collector", {}),
    "pycollect SB3VecEnv, 2 workers x 256, infos kept": ("sb3", {}),
}
JAX_ENVS = 4096  # gymnax CartPoles, in one batched env
RAW_JAX = "raw jitted gymnax loop (4096 CartPoles)"
DEVICE_JAX = "pycollect engine='device' over gymnax (4096)"
HOST_JAX = "pycollect engine='inprocess' over gymnax (4096)"
# EnvPool's Pong-v5 with benches/atari_env.py's preprocessing (what make_env builds from ALE)
PONG_KWARGS = {
    "img_height": 84,
    "img_width": 84,
    "stack_num": 4,
    "gray_scale": True,
    "frame_skip": 4,
    "noop_max": 30,
    "episodic_life": False,
    "reward_clip": False,
    "repeat_action_probability": 0.0,
}


def envpool_alone(
    frames: int, task: str = "Pong-v5", per_worker: int = PONG_ENVS, actions: int = 6, threads: int = WORKERS
) -> tp.Result:
    """EnvPool's ``task`` (Pong: 8 envs) on 2 threads, stepped with random actions in this process."""
    import envpool

    n = WORKERS * per_worker
    kwargs = PONG_KWARGS if task == "Pong-v5" else {}
    t0 = time.perf_counter()
    envs = envpool.make(task, env_type="gymnasium", num_envs=n, num_threads=threads, seed=0, **kwargs)

    def prepare() -> Callable[[int], Any]:
        drawn = list(np.random.default_rng(0).integers(0, actions, size=(64, n), dtype=np.int32))
        envs.reset()
        return functools.partial(tp._step_loop, envs, drawn)

    return tp._timed_steps(t0, envs, n, frames, prepare)


def envpool_one_thread(frames: int) -> tp.Result:
    """EnvPool's CartPole, 256 envs on 1 thread, in this process."""
    return envpool_alone(frames, "CartPole-v1", INFO_ENVS // WORKERS, 2, threads=1)


def _info_contender(how: str, kwargs: dict[str, Any], frames: int) -> tp.Result:
    """One contender of the envpool-infos workload (see :data:`INFO_CONTENDERS`)."""
    env = "envpool:CartPole-v1"
    if how == "make_vec":
        return _make_vec_loop(env, frames, num_envs=INFO_ENVS, num_workers=0, env_kwargs={"num_threads": 1}, **kwargs)
    if how == "collector":
        return _collector(env, frames, INFO_ENVS, workers=0, num_threads=1, **kwargs)
    from pycollect.vector import SB3VecEnv

    n = WORKERS * INFO_ENVS
    t0 = time.perf_counter()
    vec = SB3VecEnv(env, n, num_workers=WORKERS, env_kwargs={"num_threads": 1})

    def prepare() -> Callable[[int], Any]:
        actions = list(np.random.default_rng(0).integers(0, 2, size=(64, n)))
        vec.seed(0)
        vec.reset()
        return functools.partial(tp._step_loop, vec, actions)

    return tp._timed_steps(t0, vec, n, frames, prepare)


def envpool_cartpole_alone(frames: int) -> tp.Result:
    """EnvPool's CartPole, 512 envs on 2 threads, in this process."""
    return envpool_alone(frames, "CartPole-v1", CARTPOLE_ENVS, 2)


def over_envpool_cartpole(frames: int) -> tp.Result:
    """``Collector("envpool:CartPole-v1")``: one EnvPool of 256 envs on one thread in each of 2 workers."""
    return _collector("envpool:CartPole-v1", frames, CARTPOLE_ENVS, num_threads=1)


def _collector(
    env: str,
    frames: int,
    per_worker: int = PONG_ENVS,
    workers: int = WORKERS,
    info_keys: tuple[str, ...] | list[str] = (),
    **env_kwargs: Any,
) -> tp.Result:
    cpu0, t0 = tp.CPU.read(), time.perf_counter()
    collector = pycollect.Collector(
        env,
        None,
        frames_per_batch=max(1, workers) * per_worker * STEPS,
        envs_per_worker=per_worker,
        num_workers=workers,
        seed=0,
        info_keys=info_keys,
        env_kwargs=env_kwargs or None,
    )
    batches = max(1, round(frames / collector.frames_per_batch))
    return tp._measure(collector, collector.next_batch, lambda _first: None, batches, t0, cpu0)


def over_envpool(frames: int) -> tp.Result:
    """``Collector("envpool:Pong-v5")``: one EnvPool of 4 envs on one thread in each of 2 workers."""
    return _collector("envpool:Pong-v5", frames, num_threads=1, **PONG_KWARGS)


def over_gym(frames: int) -> tp.Result:
    """``Collector("callable:atari_env:make_env")``: 4 ALE envs in each of 2 workers."""
    return _collector("callable:atari_env:make_env", frames)


def _raw_vector_child(seconds: float, ready: Any, go: Any, results: Any, index: int) -> None:
    """One of the two raw loops: ``CartPoleVectorEnv(256)`` stepped with random actions."""
    import gymnasium as gym

    envs = gym.make_vec("CartPole-v1", CARTPOLE_ENVS, vectorization_mode="vector_entry_point")
    actions = list(np.random.default_rng(index).integers(0, 2, size=(64, CARTPOLE_ENVS)))
    envs.reset(seed=index)
    for t in range(64):  # warm-up
        envs.step(actions[t & 63])
    ready.put(index)
    go.wait()
    t, start = 0, time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        envs.step(actions[t & 63])
        t += 1
    results.put((t * CARTPOLE_ENVS, time.perf_counter() - start))
    envs.close()


def raw_vector_loops(frames: int) -> tp.Result:
    """Two processes, each a raw loop over ``CartPoleVectorEnv(256)``, started together: summed frames/s."""
    ctx = multiprocessing.get_context("spawn")
    ready, results, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    seconds = max(1.0, frames / 2_000_000)
    t0 = time.perf_counter()
    procs = [
        ctx.Process(target=_raw_vector_child, args=(seconds, ready, go, results, i), daemon=True)
        for i in range(WORKERS)
    ]
    for proc in procs:
        proc.start()
    try:
        for _ in procs:
            ready.get(timeout=300)
        startup = time.perf_counter() - t0
        with tp.Timer() as timer:
            go.set()
            outs = [results.get(timeout=seconds + 300) for _ in procs]
    finally:
        for proc in procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
    result = timer.result(sum(n for n, _ in outs), startup_s=startup)
    result.fps = sum(n / s for n, s in outs)  # each loop's own rate, summed
    return result


def make_vec_over_vector(frames: int) -> tp.Result:
    """``make_vec("gymnasium-vector:CartPole-v1", 512, num_workers=2)`` with random actions."""
    return _make_vec_loop("gymnasium-vector:CartPole-v1", frames, info_keys=())


def make_vec_over_envpool(frames: int) -> tp.Result:
    """``make_vec("envpool:CartPole-v1", 512, num_workers=2)``: EnvPool's infos kept, as by default."""
    return _make_vec_loop("envpool:CartPole-v1", frames, env_kwargs={"num_threads": 1})


def make_vec_over_envpool_bare(frames: int) -> tp.Result:
    """The same with ``info_keys=()``: no infos."""
    return _make_vec_loop("envpool:CartPole-v1", frames, env_kwargs={"num_threads": 1}, info_keys=())


def _make_vec_loop(
    env: str, frames: int, num_envs: int = WORKERS * CARTPOLE_ENVS, num_workers: int = WORKERS, **kwargs: Any
) -> tp.Result:
    """``make_vec(env, num_envs, num_workers=num_workers, **kwargs)`` stepped in a plain loop with random actions."""
    n = num_envs
    t0 = time.perf_counter()
    envs = pycollect.make_vec(env, n, num_workers=num_workers, **kwargs)

    def prepare() -> Callable[[int], Any]:
        actions = list(np.random.default_rng(0).integers(0, 2, size=(64, n)))
        envs.reset(seed=0)
        return functools.partial(tp._step_loop, envs, actions)

    return tp._timed_steps(t0, envs, n, frames, prepare)


class _Closing:
    """What :func:`tp._timed_steps` closes after a raw loop: nothing to release."""

    def close(self) -> None:
        """Nothing: JAX frees the arrays with their last reference."""


def raw_jax_loop(frames: int) -> tp.Result:
    """gymnax's CartPole, 4,096 envs: one jitted call per step (vmapped step and autoreset, random actions)."""
    import gymnax
    import jax

    n = JAX_ENVS
    t0 = time.perf_counter()
    env, params = gymnax.make("CartPole-v1")
    step_all = jax.vmap(env.step, in_axes=(0, 0, 0, None))  # gymnax's step: resets where the episode ended

    @jax.jit
    def step(key: Any, state: Any) -> tuple[Any, ...]:
        key, action_key, step_key = jax.random.split(key, 3)
        actions = jax.random.randint(action_key, (n,), 0, 2)
        obs, state, reward, terminated, truncated, info = step_all(
            jax.random.split(step_key, n), state, actions, params
        )
        return key, state, obs, info["final_observation"], reward, terminated, truncated

    def prepare() -> Callable[[int], Any]:
        key, reset_key = jax.random.split(jax.random.PRNGKey(0))
        _, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(reset_key, n), params)
        carry = [key, state]

        def run(count: int) -> None:
            key, state = carry
            for _ in range(count):
                key, state, *out = step(key, state)
                jax.block_until_ready(out)
            carry[:] = [key, state]

        return run

    return tp._timed_steps(t0, _Closing(), n, frames, prepare)


def _gymnax_collector(frames: int, engine: str) -> tp.Result:
    cpu0, t0 = tp.CPU.read(), time.perf_counter()
    collector = pycollect.Collector(
        "gymnax:CartPole-v1",
        None,
        engine=engine,
        envs_per_worker=JAX_ENVS,
        num_workers=0,
        frames_per_batch=JAX_ENVS * STEPS,
        seed=0,
    )
    batches = max(1, round(frames / collector.frames_per_batch))
    return tp._measure(collector, collector.next_batch, lambda _first: None, batches, t0, cpu0)


def device_over_gymnax(frames: int) -> tp.Result:
    """``Collector("gymnax:CartPole-v1", engine="device")``: 4,096 envs stepped with torch tensors over JAX's memory."""
    return _gymnax_collector(frames, "device")


def inprocess_over_gymnax(frames: int) -> tp.Result:
    """``Collector("gymnax:CartPole-v1", engine="inprocess")``: the host env (numpy), for reference."""
    return _gymnax_collector(frames, "inprocess")


WORKLOADS: dict[str, dict[str, Callable[[int], tp.Result]]] = {
    "pong": {ENVPOOL: envpool_alone, OVER_ENVPOOL: over_envpool, OVER_GYM: over_gym},
    "cartpole": {RAW_VECTOR: raw_vector_loops, MAKE_VEC: make_vec_over_vector},
    "envpool-cartpole": {
        ENVPOOL_CARTPOLE: envpool_cartpole_alone,
        OVER_ENVPOOL_CARTPOLE: over_envpool_cartpole,
        MAKE_VEC_ENVPOOL: make_vec_over_envpool,
        MAKE_VEC_ENVPOOL_BARE: make_vec_over_envpool_bare,
    },
    "envpool-infos": {
        ENVPOOL_ONE: envpool_one_thread,
        **{name: functools.partial(_info_contender, how, kwargs) for name, (how, kwargs) in INFO_CONTENDERS.items()},
    },
    "jax": {RAW_JAX: raw_jax_loop, DEVICE_JAX: device_over_gymnax, HOST_JAX: inprocess_over_gymnax},
}
FRAMES = {
    "pong": 16_000,
    "cartpole": 4_000_000,
    "envpool-cartpole": 4_000_000,
    "envpool-infos": 1_500_000,
    "jax": 8_388_608,
}
BASELINES = {
    "pong": ENVPOOL,
    "cartpole": RAW_VECTOR,
    "envpool-cartpole": ENVPOOL_CARTPOLE,
    "envpool-infos": ENVPOOL_ONE,
    "jax": RAW_JAX,
}


def main() -> None:
    """Run the rounds; print, save and plot the medians and the targets."""
    pycollect.prestart()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=tuple(WORKLOADS), default="pong", help="default pong")
    parser.add_argument("--frames", type=int, default=None, help="timed frames per contender and round")
    parser.add_argument("--rounds", type=int, default=None, help="default 3 (2 with --quick)")
    parser.add_argument("--quick", action="store_true", help="a quarter of the frames, 2 rounds")
    parser.add_argument("--out", default=None, help="path stem for .json and .png (default results/batched-<workload>)")
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args()
    if problem := tp._missing("envpool") if args.workload.startswith("envpool") or args.workload == "pong" else None:
        parser.error(f"{args.workload} needs EnvPool (pip install envpool): {problem}")
    if args.workload == "pong" and (problem := tp._missing("ale_py") or tp._missing("cv2")):
        parser.error(f"Pong needs ale-py and opencv-python-headless (pip install -e '.[bench]'): {problem}")
    if args.workload == "jax" and (problem := tp._missing("pycollect_jax") or tp._missing("gymnax")):
        parser.error(f"the jax workload needs pycollect-jax (pip install -e plugins/pycollect-jax): {problem}")
    rounds = args.rounds or (2 if args.quick else 3)
    frames = args.frames or FRAMES[args.workload]
    frames = frames // 4 if args.quick else frames
    out = Path(args.out or str(tp.RESULTS / f"batched-{args.workload}"))
    contenders = WORKLOADS[args.workload]
    runs: dict[str, list[dict[str, Any]]] = {}
    started = time.perf_counter()
    for round_index in range(rounds):
        names = list(contenders)
        shift = round_index % len(names)
        this_round = {name: contenders[name](frames).__dict__ for name in names[shift:] + names[:shift]}
        base = this_round[BASELINES[args.workload]]["fps"]
        gym_pong = this_round.get(OVER_GYM, {}).get("fps")
        for entry in this_round.values():
            entry["round"] = round_index
            entry["x baseline"] = entry["fps"] / base
            entry["x gymnasium pong"] = entry["fps"] / gym_pong if gym_pong else None
        for name, entry in this_round.items():
            runs.setdefault(name, []).append(entry)
        print(f"round {round_index + 1}/{rounds}: " + ", ".join(f"{n} {e['fps']:,.0f}" for n, e in this_round.items()))
    summary = {
        name: {
            "fps": statistics.median(e["fps"] for e in entries),
            "cpu_us_per_frame": statistics.median(e["cpu_seconds"] / e["frames"] * 1e6 for e in entries),
            "cpus": statistics.median(e["cpu_seconds"] / e["seconds"] for e in entries),
            "x baseline": statistics.median(e["x baseline"] for e in entries),
            "x gymnasium pong": _median(e["x gymnasium pong"] for e in entries),
        }
        for name, entries in runs.items()
    }
    print(f"\n{args.workload}, medians of {rounds} rounds")
    print(f"  {'contender':56} {'frames/s':>10} {'x baseline':>10} {'CPU us/frame':>12} {'CPUs':>5}")
    for name, row in summary.items():
        print(
            f"  {name:56} {row['fps']:>10,.0f} {row['x baseline']:>10.2f} {row['cpu_us_per_frame']:>12,.2f}"
            f" {row['cpus']:>5.2f}"
        )
    targets = _targets(args.workload, summary)
    for text, value, goal in targets:
        print(f"target: {text} >= {goal}x: {value:.2f} {'MET' if value >= goal else 'MISSED'}")
    print(f"wall time {time.perf_counter() - started:.0f} s")
    tp.save_record(
        out.with_suffix(".json"),
        workload=args.workload,
        rounds=rounds,
        summary=summary,
        targets=[{"target": text, "value": value, "goal": goal, "met": value >= goal} for text, value, goal in targets],
        runs=runs,
    )
    if not args.no_plot:
        _plot(out.with_suffix(".png"), summary, args.workload)
    print(f"wrote {out.with_suffix('.json')}" + ("" if args.no_plot else f" and {out.with_suffix('.png')}"))


def _targets(workload: str, summary: dict[str, dict[str, Any]]) -> list[tuple[str, float, float]]:
    if workload == "pong":
        row = summary[OVER_ENVPOOL]
        return [
            ("pycollect over EnvPool vs EnvPool alone", row["x baseline"], 0.95),
            ("pycollect over EnvPool vs pycollect over gymnasium Pong", row["x gymnasium pong"], 1.1),
        ]
    if workload == "jax":
        return [("engine='device' over gymnax vs the raw jitted loop", summary[DEVICE_JAX]["x baseline"], 0.9)]
    if workload in ("envpool-cartpole", "envpool-infos"):
        return []  # no target: the figures say what resets of many sub-envs, or infos, cost
    return [("make_vec over gymnasium-vector vs two raw loops", summary[MAKE_VEC]["x baseline"], 0.9)]


def _median(values: Any) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _plot(path: Path, summary: dict[str, dict[str, Any]], workload: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(summary)
    fig, ax = plt.subplots(figsize=(8, 0.6 + 0.5 * len(labels)))
    ax.barh(
        labels,
        [summary[name]["fps"] for name in labels],
        color=["#C44E52" if name.startswith("pycollect") else "#8C8C8C" for name in labels],
    )
    ax.invert_yaxis()
    env = {
        "pong": "Pong",
        "cartpole": "CartPole",
        "envpool-cartpole": "EnvPool CartPole, 512 envs",
        "envpool-infos": "EnvPool CartPole, 256 envs",
        "jax": "gymnax CartPole, 4,096 envs",
    }[workload]
    ax.set_xlabel(f"frames/s, {env} (random actions)")
    tp.save_figure(fig, path)


if __name__ == "__main__":
    main()
