"""Step-level vector envs, random actions: pycollect's ``make_vec`` against the vector envs people use.

One interleaved run: every round runs each contender once, in an order that rotates from round
to round, and the ratios are taken within a round (machines are shared and noisy; ratios of
one round are what is compared). Contenders, on CartPole-v1 (2 workers x 8 envs) and Atari Pong
(2 x 4, ``benches/atari_env.py``: ALE, 84x84 gray, frame skip 4, stack 4):

* ``2 raw loops in parallel``: two processes, each stepping its K envs in a plain loop: the
  limit of 2 CPUs (from ``benches/throughput.py``).
* ``pycollect make_vec (2 workers)``: ``pycollect.make_vec(env, 2K, num_workers=2)``, the
  trainer calling ``step()`` as a gymnasium loop does.
* ``pycollect make_vec (2 workers, info_keys=())``: Pong only (CartPole's infos are empty):
  the same, keeping none of the env's info entries, so no step's info is pickled and every
  step stays on the native path.
* ``pycollect make_vec pool``: the same 2K envs and 2 workers, ``batch_size=K``: ``recv()``
  returns the worker first ready, whose actions ``send()`` sends while the other one steps.
* ``gymnasium AsyncVectorEnv (2K procs)``: ``shared_memory=True``, one process per env.
* ``SB3 SubprocVecEnv (2K procs)``: one process per env (SB3's layout).
* ``EnvPool (2K envs, 2 threads)``: Pong only (EnvPool's envs are its own C++ ones).

Targets (issue 30), as medians of per-round ratios: Pong >= 0.9x the limit and >= 1.0x EnvPool;
CartPole >= 0.6x the limit (goal 0.8) and >= 10x AsyncVectorEnv; the pool >= the synchronous
vector env on both; and the trainer's CPU per ``step()`` of 16 CartPole envs <= 30 µs (the
trainer process's user + system time over the timed steps, divided by the steps: what the
trainer spends per step, waiting included, since a waiting trainer yields its core rather than
sleep). The results go to ``benches/results/vector.json`` and a plot next to it.

Usage::

    python benches/vector.py                       # 3 rounds, both workloads
    python benches/vector.py --quick               # a quarter of the steps, 2 rounds
    python benches/vector.py --workloads cartpole-random --rounds 5
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

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import throughput as tp  # the contenders and helpers shared with the rollout benchmark

import pycollect

LIMIT = tp.RAW2
PYCOLLECT = "pycollect make_vec (2 workers)"
NO_INFO = "pycollect make_vec (2 workers, info_keys=())"
POOL = "pycollect make_vec pool (2 workers, 1 per recv)"
ASYNC = "gymnasium AsyncVectorEnv (2K procs)"
WORKLOADS = {"cartpole-random": 8, "atari-pong": 4}  # workload -> K, envs per worker
TARGETS = [  # (workload, contender, reference, at least)
    ("atari-pong", PYCOLLECT, LIMIT, 0.9),
    ("atari-pong", PYCOLLECT, tp.ENVPOOL, 1.0),
    ("atari-pong", NO_INFO, LIMIT, 0.9),
    ("atari-pong", NO_INFO, tp.ENVPOOL, 1.0),
    ("cartpole-random", PYCOLLECT, LIMIT, 0.6),
    ("cartpole-random", PYCOLLECT, ASYNC, 10.0),
    ("cartpole-random", POOL, PYCOLLECT, 1.0),
    ("atari-pong", POOL, PYCOLLECT, 1.0),
]


def pycollect_make_vec(
    workload: tp.Workload, k: int, frames: dict[str, int], info_keys: tuple[str, ...] | None = None
) -> tp.Result:
    """``pycollect.make_vec`` with 2 workers of K envs, stepped from this process."""
    n = tp.WORKERS * k
    t0 = time.perf_counter()
    envs = pycollect.make_vec(workload.pycollect_env, n, num_workers=tp.WORKERS, info_keys=info_keys)

    def prepare() -> Callable[[int], Any]:
        envs.action_space.seed(0)
        actions = [envs.action_space.sample() for _ in range(64)]
        envs.reset(seed=0)
        step = envs.step

        def run(count: int) -> None:
            for i in range(count):
                step(actions[i & 63])  # the vector env resets finished envs itself

        return run

    return tp._timed_steps(t0, envs, n, frames["fast"], prepare)


def pycollect_no_info(workload: tp.Workload, k: int, frames: dict[str, int]) -> tp.Result:
    """:func:`pycollect_make_vec` with ``info_keys=()``: no info entry kept."""
    return pycollect_make_vec(workload, k, frames, info_keys=())


def pycollect_pool(workload: tp.Workload, k: int, frames: dict[str, int]) -> tp.Result:
    """``make_vec(2K envs, num_workers=2, batch_size=K)``: the worker first ready is served.

    The synchronous contender's envs and workers, one worker per ``recv()``: while the trainer
    handles one worker's envs, the other's step.
    """
    n, workers = tp.WORKERS * k, tp.WORKERS
    t0 = time.perf_counter()
    envs = pycollect.make_vec(workload.pycollect_env, n, num_workers=workers, batch_size=n // 2)

    def prepare() -> Callable[[int], Any]:
        single = envs.single_action_space
        single.seed(0)
        actions = [np.array([single.sample() for _ in range(n // 2)]) for _ in range(64)]
        envs.async_reset(seed=0)
        recv, send = envs.recv, envs.send

        def run(count: int) -> None:
            for i in range(2 * count):  # count steps of every env: 2 recvs of half the envs each
                recv()
                send(actions[i & 63])

        return run

    return tp._timed_steps(t0, envs, n, frames["fast"], prepare)


CONTENDERS: dict[str, Callable[[tp.Workload, int, dict[str, int]], tp.Result]] = {
    LIMIT: tp.raw_loops_in_parallel,
    PYCOLLECT: pycollect_make_vec,
    NO_INFO: pycollect_no_info,
    POOL: pycollect_pool,
    ASYNC: tp.gym_async_vector_2k,
    tp.SB3: tp.sb3_subproc,
    tp.ENVPOOL: tp.envpool_pong,
}
ONLY = {tp.ENVPOOL: {"atari-pong"}, NO_INFO: {"atari-pong"}}  # contenders that run on some workloads only


def main() -> None:
    """Run the rounds; print, save and plot medians, ratios and the targets."""
    pycollect.prestart()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help=f"comma-separated: {', '.join(WORKLOADS)}")
    parser.add_argument("--rounds", type=int, default=None, help="default 3 (2 with --quick)")
    parser.add_argument("--quick", action="store_true", help="a quarter of the steps, 2 rounds")
    parser.add_argument("--out", default=str(tp.RESULTS / "vector"), help="path stem for .json and .png")
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args()
    rounds = args.rounds or (2 if args.quick else 3)
    names = [name.strip() for name in args.workloads.split(",") if name.strip()]
    unknown = [name for name in names if name not in WORKLOADS]
    if unknown:
        parser.error(f"unknown workloads {unknown}: choose from {', '.join(WORKLOADS)}")
    if "atari-pong" in names and (problem := tp._missing("ale_py") or tp._missing("cv2")):
        print(f"skipping atari-pong: {problem} (pip install -e '.[bench]')", file=sys.stderr)
        names.remove("atari-pong")
    contenders = dict(CONTENDERS)
    for name, module in tp.REQUIRES.items():
        if name in contenders and (problem := tp._missing(module)):
            print(f"skipping {name}: {problem}", file=sys.stderr)
            del contenders[name]

    runs: dict[str, dict[str, list[dict[str, Any]]]] = {name: {} for name in names}
    started = time.perf_counter()
    for round_index in range(rounds):
        for name in names:
            workload, k = tp.WORKLOADS[name], WORKLOADS[name]
            frames = {key: value // 4 if args.quick else value for key, value in workload.frames.items()}
            chosen = [c for c in contenders if name in ONLY.get(c, {name})]
            shift = round_index % len(chosen)
            order = chosen[shift:] + chosen[:shift]  # rotated: no contender always runs first
            this_round = {}
            for contender in order:
                result = contenders[contender](workload, k, frames)
                this_round[contender] = {**result.__dict__, "round": round_index, "num_envs": tp.WORKERS * k}
            for contender, entry in this_round.items():
                for reference in (LIMIT, ASYNC, tp.ENVPOOL, PYCOLLECT):
                    against = this_round.get(reference, {}).get("fps")
                    entry[f"x {reference}"] = entry["fps"] / against if against else None
                runs[name].setdefault(contender, []).append(entry)
            print(
                f"round {round_index + 1}/{rounds} {name}: "
                + ", ".join(f"{c} {e['fps']:,.0f}" for c, e in this_round.items()),
                flush=True,
            )
    summary = {name: _summary(runs[name]) for name in names}
    for name in names:
        _print(name, summary[name], rounds)
    checks = []
    for name, contender, reference, least in TARGETS:
        ratio = summary.get(name, {}).get(contender, {}).get(f"x {reference}")
        if ratio is not None:
            checks.append(
                {"target": f"{name}: {contender} >= {least}x {reference}", "median": ratio, "met": ratio >= least}
            )
    cpu = summary.get("cartpole-random", {}).get(PYCOLLECT, {}).get("trainer_us_per_vector_step")
    if cpu is not None:
        checks.append(
            {"target": "cartpole-random: trainer CPU per step() of 16 envs <= 30 us", "median": cpu, "met": cpu <= 30}
        )
    if checks:
        print("\ntargets (median of per-round ratios; the trainer's CPU in us):")
        for check in checks:
            print(f"  {'MET   ' if check['met'] else 'MISSED'} {check['target']}: {check['median']:.2f}")
    print(f"\nwall time {time.perf_counter() - started:.0f} s, load average now {os.getloadavg()[0]:.1f}")
    stem = Path(args.out)
    tp.save_record(
        stem.with_suffix(".json"), rounds=rounds, envs_per_worker=WORKLOADS, summary=summary, targets=checks, runs=runs
    )
    if not args.no_plot:
        _plot(stem.with_suffix(".png"), summary)
    print(f"wrote {stem.with_suffix('.json')}" + ("" if args.no_plot else f" and {stem.with_suffix('.png')}"))


def _summary(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per contender: median env steps/s, CPU µs per env step (whole process tree), and each ratio's median."""
    out: dict[str, dict[str, Any]] = {}
    for contender, entries in runs.items():
        row: dict[str, Any] = {
            "fps": statistics.median(e["fps"] for e in entries),
            "cpu_us_per_step": statistics.median(e["cpu_seconds"] / e["frames"] * 1e6 for e in entries),
            # The trainer process alone, per step() of every env (frames / num_envs steps).
            "trainer_us_per_vector_step": statistics.median(
                (e["trainer_user_s"] + e["trainer_sys_s"]) / (e["frames"] / e["num_envs"]) * 1e6 for e in entries
            ),
            "others_cpus": statistics.median(e.get("others_cpus", 0.0) for e in entries),
        }
        for key in entries[0]:
            if key.startswith("x "):
                values = [e[key] for e in entries if e[key] is not None]
                row[key] = statistics.median(values) if values else None
        out[contender] = row
    return out


def _print(name: str, summary: dict[str, dict[str, Any]], rounds: int) -> None:
    print(f"\n{name} (K = {WORKLOADS[name]} envs per worker, medians of {rounds} rounds)")
    print(
        f"  {'contender':50} {'env steps/s':>12} {'x limit':>8} {'x Async':>8} {'x EnvPool':>9} {'CPU us/step':>11}"
        f" {'trainer us/step()':>17}"
    )
    for contender, row in summary.items():

        def ratio(reference: str, row: dict[str, Any] = row) -> str:
            value = row.get(f"x {reference}")
            return f"{value:.2f}" if value is not None else "-"

        print(
            f"  {contender:50} {row['fps']:>12,.0f} {ratio(LIMIT):>8} {ratio(ASYNC):>8} {ratio(tp.ENVPOOL):>9}"
            f" {row['cpu_us_per_step']:>11.1f} {row['trainer_us_per_vector_step']:>17.1f}"
        )


def _plot(path: Path, summary: dict[str, dict[str, dict[str, Any]]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(summary), figsize=(7.5 * len(summary), 4), squeeze=False)
    for ax, (name, rows) in zip(axes[0], summary.items(), strict=True):
        labels = list(rows)
        values = [rows[c].get(f"x {LIMIT}") or 0.0 for c in labels]
        colors = ["#C44E52" if c.startswith("pycollect") else "#8C8C8C" for c in labels]
        ax.barh(labels, values, color=colors)
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.set_title(name)
        ax.invert_yaxis()
    fig.supxlabel("env steps/s, x the 2 raw loops in parallel (median of the per-round ratios)")
    tp.save_figure(fig, path)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
