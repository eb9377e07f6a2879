"""Frames per second through pycollect next to its peers, measured side by side.

Every contender collects the same number of frames from the same environment with a uniform
random policy; contenders run interleaved (A B C A B C ...) for several rounds, because the
speed of these virtual machines drifts by tens of percent over minutes. The table reports the
median frames/s of each contender and its ratio to the raw single-process gymnasium loop of
the same rounds.

Run:
    python benches/throughput.py                      # CartPole-v1, 5 rounds
    python benches/throughput.py --env Pendulum-v1 --rounds 3 --frames 50000

Writes ``benches/results/throughput-<env>.json`` and a bar chart ``...png`` (needs matplotlib).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import gymnasium as gym
import numpy as np
import torch

import pycollect

torch.set_num_threads(1)
RESULTS = Path(__file__).parent / "results"

Contender = Callable[[str, int, int], float]


def raw_loop(env_id: str, frames: int, num_envs: int) -> float:
    """One env stepped in a plain Python loop, actions sampled up front (the baseline)."""
    env = gym.make(env_id)
    env.action_space.seed(0)
    actions = [env.action_space.sample() for _ in range(1024)]
    env.reset(seed=0)
    start = time.perf_counter()
    for i in range(frames):
        _, _, terminated, truncated, _ = env.step(actions[i & 1023])
        if terminated or truncated:
            env.reset()
    elapsed = time.perf_counter() - start
    env.close()
    return frames / elapsed


def pycollect_in_process(env_id: str, frames: int, num_envs: int) -> float:
    """pycollect's Collector stepping ``num_envs`` envs in this process."""
    with pycollect.Collector(
        env_id, frames_per_batch=num_envs * 128, total_frames=frames, envs_per_worker=num_envs, seed=0
    ) as collector:
        start = time.perf_counter()
        for _ in collector:
            pass
        return collector.frames / (time.perf_counter() - start)


def _vector_env(vector_cls: type, env_id: str, frames: int, num_envs: int, **kwargs: object) -> float:
    envs = vector_cls([lambda: gym.make(env_id)] * num_envs, **kwargs)
    envs.action_space.seed(0)
    actions = [envs.action_space.sample() for _ in range(64)]
    envs.reset(seed=0)
    steps = frames // num_envs
    start = time.perf_counter()
    for i in range(steps):
        envs.step(actions[i & 63])
    elapsed = time.perf_counter() - start
    envs.close()
    return steps * num_envs / elapsed


def gym_sync_vector(env_id: str, frames: int, num_envs: int) -> float:
    """gymnasium ``SyncVectorEnv`` with ``num_envs`` envs."""
    return _vector_env(gym.vector.SyncVectorEnv, env_id, frames, num_envs)


def gym_async_vector(env_id: str, frames: int, num_envs: int) -> float:
    """gymnasium ``AsyncVectorEnv(shared_memory=True)``, one process per env (2 envs)."""
    return _vector_env(gym.vector.AsyncVectorEnv, env_id, frames // 8, 2, shared_memory=True)


CONTENDERS: dict[str, Contender] = {
    "raw gymnasium loop": raw_loop,
    "pycollect in-process": pycollect_in_process,
    "gymnasium SyncVectorEnv": gym_sync_vector,
    "gymnasium AsyncVectorEnv (2 procs)": gym_async_vector,
}


def main() -> None:
    """Run the benchmark and print, save and plot the results."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--frames", type=int, default=100_000)
    parser.add_argument("--envs", type=int, default=8, help="envs per collector / vector env")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args()

    runs: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    ratios: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    for round_index in range(args.rounds):
        this_round = {name: fn(args.env, args.frames, args.envs) for name, fn in CONTENDERS.items()}
        baseline = this_round["raw gymnasium loop"]
        for name, fps in this_round.items():
            runs[name].append(fps)
            ratios[name].append(fps / baseline)
        print(f"round {round_index + 1}/{args.rounds}: " + ", ".join(f"{n} {v:,.0f}" for n, v in this_round.items()))

    print(f"\n{args.env}, {args.frames:,} frames, {args.envs} envs, median of {args.rounds} rounds")
    print(f"{'contender':40s} {'frames/s':>12s} {'x raw (min-max)':>22s}")
    for name in CONTENDERS:
        r = ratios[name]
        print(
            f"{name:40s} {statistics.median(runs[name]):12,.0f} {statistics.median(r):8.2f} ({min(r):.2f}-{max(r):.2f})"
        )

    RESULTS.mkdir(exist_ok=True)
    stem = RESULTS / f"throughput-{args.env}"
    record = {
        "env": args.env,
        "frames": args.frames,
        "envs": args.envs,
        "rounds": args.rounds,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__},
        "pycollect": pycollect.__version__,
        "frames_per_s": runs,
        "ratio_to_raw": ratios,
    }
    stem.with_suffix(".json").write_text(json.dumps(record, indent=2))
    if not args.no_plot:
        _plot(stem.with_suffix(".png"), args.env, runs)
    print(f"\nwrote {stem}.json" + ("" if args.no_plot else f" and {stem}.png"))


def _plot(path: Path, env_id: str, runs: dict[str, list[float]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(runs)
    medians = [statistics.median(runs[n]) for n in names]
    errors = np.array([[m - min(runs[n]), max(runs[n]) - m] for n, m in zip(names, medians, strict=True)]).T
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(names) + 1.5))
    ax.barh(names, medians, xerr=errors, color="#4C72B0")
    ax.invert_yaxis()
    ax.set_xlabel("frames per second (median, min-max whiskers)")
    ax.set_title(f"{env_id}, random policy")
    for y, value in enumerate(medians):
        ax.text(value, y, f" {value:,.0f}", va="center")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
