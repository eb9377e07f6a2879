"""Central inference against the other ways to run a policy over envs in worker processes.

One interleaved run: every round runs each contender once, in an order that rotates from round
to round, and the ratios are taken within a round (machines are shared and noisy). Two
workloads (``--workload``), 2 workers x K envs each:

``pong`` (the default): Atari Pong as ``benches/atari_env.py`` builds it (ALE, 84x84 gray,
frame skip 4, stack 4: ``uint8 [4, 84, 84]`` observations), and the policy the Nature DQN CNN
(random init, argmax actions), the same weights for everyone. Contenders:

* ``pycollect central``: ``Collector(num_workers=2, engine="central")``: the workers step the
  envs; the trainer runs the CNN once per step over each group's envs. The engine chooses how
  many groups (``Central(groups=None)``, ``default_groups``): two where the policy can run
  while the workers step (a GPU, or a CPU the workers leave free) or where a call's work
  halves with its batch (the CNN's), one otherwise (the CartPole MLP's on 2 CPUs).
* ``pycollect central, other grouping``: the grouping the default did not choose,
  ``Central(groups=2)`` (two groups each of half of every worker's envs, double-buffered:
  every worker steps one group's envs while the CNN runs on the other's) or
  ``Central(groups=1)`` (one CNN call over all 2K envs per step, the envs idle meanwhile).
* ``pycollect workers``: ``Collector(num_workers=2, engine="workers")``: a copy of the CNN in
  each worker, over its K envs (``torch.set_num_threads(1)`` there).
* ``EnvPool sync``: EnvPool's Pong, 2K envs on 2 threads, the CNN in this process over all 2K
  observations each step, as CleanRL's EnvPool scripts do.
* ``EnvPool async``: the same with ``batch_size=K``: ``recv()`` the K envs ready, run the CNN
  on them, ``send()`` their actions, while the other K step (EnvPool's async mode).
* ``TorchRL Collector over ParallelEnv``: ``torchrl.collectors.Collector`` over
  ``ParallelEnv(2, SerialEnv(K, GymWrapper(make_env())))``, the CNN in the trainer.

``cartpole``: CartPole-v1 and a 64-wide MLP (4 -> 64 -> 64 -> 2, tanh, argmax), torch on one
thread: the workload where the trainer's work around each policy call shows most. Contenders:
the two ``pycollect central`` rows as above, ``pycollect workers (MLP in
each)``, and ``hand loop over make_vec (MLP here)``: the six lines a user writes over
``pycollect.make_vec(..., num_workers=2)`` (``net(obs).argmax(-1)``, ``envs.step``) with the same
MLP, its observations and actions only, nothing stored.

Frames are transitions, each with a policy call behind it: a collector's batch holds one per
env step, and the hand loop's ``next_step`` reset steps (no transition) are not counted (its
env steps per second are kept as ``steps_fps``). Besides frames/s and CPU, each run
reports the trainer's CPU per frame outside the policy call (the policy's forward is timed in
this process; for ``workers`` the policy runs in the workers, so all of the trainer's CPU is
outside it). Targets, as medians of the per-round ratios: on Pong (issue 19) central >= 1.0x
the best of the others, (issues 30, 40) central >= 0.9x ``workers``; on CartPole (issue 40)
central >= 0.9x the hand loop, and the central trainer's CPU outside the policy call <= 5 us per
frame. Results go to ``benches/results/central.json`` (``central-cartpole.json``) and a plot
next to it.

Usage::

    python benches/central.py                       # Pong: 3 rounds, K = 8, 1 torch thread here
    python benches/central.py --workload cartpole   # CartPole with the MLP
    python benches/central.py --quick               # fewer frames, 2 rounds
    python benches/central.py --envs 4 --trainer-threads 2 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import atari_env  # the same env for every contender; workers import it by name
import throughput as tp  # the measurement helpers shared with the other benches
from nature_cnn import NatureCNN

import pycollect
from pycollect._engines.central.engine import default_groups, env_groups
from pycollect.default_plugins import Central

WORKERS = 2
STEPS = 32  # steps of every env per batch, for the collectors
CENTRAL = "pycollect central"
CENTRAL_OTHER = "pycollect central, other grouping"
# How many groups engine="central" makes for the workload on this machine (Central(groups=None)),
# and the other grouping's: set by main().
GROUPS = {"default": 2, "other": 1}
WORKER_CNN = "pycollect workers (CNN in each)"
ENVPOOL_SYNC = "EnvPool sync (CNN here)"
ENVPOOL_ASYNC = "EnvPool async batch K (CNN here)"
TORCHRL = "TorchRL Collector over ParallelEnv"
WORKER_MLP = "pycollect workers (MLP in each)"
HAND_LOOP = "hand loop over make_vec (MLP here)"
CARTPOLE_STEPS = 64  # steps of every env per batch on CartPole (its episodes are short)


class Timed(torch.nn.Module):
    """A policy whose calls count their CPU time in the process they run in.

    The count (:attr:`cpu_ns`, of the calling thread's CPU clock) is a class attribute: it
    counts the calls of every copy in one process, and the trainer's is read.
    """

    cpu_ns = 0

    def __init__(self, policy: torch.nn.Module) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        start = time.thread_time_ns()
        action = self.policy(observation)
        Timed.cpu_ns += time.thread_time_ns() - start
        return action


class MLP(torch.nn.Module):
    """The CartPole policy: a 64-wide MLP's argmax (the same weights for every contender)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 2)
        )

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return self.net(observation).argmax(-1)


class Waits:
    """The CPU time this process spends in step waits (``central`` and ``make_vec``: spinning and yielding first).

    :func:`count_waits` wraps the step backend's ``step_wait`` to add each wait's thread CPU time
    to :attr:`cpu_ns`, so that the trainer's own work per frame can be told from its waiting.
    """

    cpu_ns = 0


def count_waits() -> None:
    """Count the CPU time of every step wait in this process (:class:`Waits`)."""
    from pycollect._step_backends.workers import WorkerStepBackend

    wait = WorkerStepBackend.step_wait

    def counted(self: Any) -> Any:
        start = time.thread_time_ns()
        try:
            return wait(self)
        finally:
            Waits.cpu_ns += time.thread_time_ns() - start

    WorkerStepBackend.step_wait = counted  # type: ignore[method-assign]


def _start_counting(_first: Any = None) -> None:
    Timed.cpu_ns = Waits.cpu_ns = 0


def _counted(result: tp.Result) -> tp.Result:
    """``result`` with the CPU time of this process's policy calls and step waits since :func:`_start_counting`."""
    result.policy_cpu_s = Timed.cpu_ns / 1e9
    result.wait_cpu_s = Waits.cpu_ns / 1e9
    return result


def _cartpole_collector(engine: Any, k: int, frames: int) -> tp.Result:
    return _collector("CartPole-v1", MLP(), CARTPOLE_STEPS, engine, k, frames)


def cartpole_central(k: int, frames: int) -> tp.Result:
    """``Collector(engine="central")`` on CartPole: the MLP over each group's envs, in the trainer."""
    return _cartpole_collector("central", k, frames)


def cartpole_central_other_grouping(k: int, frames: int) -> tp.Result:
    """``engine=Central(groups=...)`` on CartPole, the grouping the default did not choose."""
    return _cartpole_collector(Central(groups=GROUPS["other"]), k, frames)


def cartpole_workers(k: int, frames: int) -> tp.Result:
    """``Collector(engine="workers")`` on CartPole: each worker calls its MLP copy on its K envs."""
    return _cartpole_collector("workers", k, frames)


def hand_loop(k: int, frames: int) -> tp.Result:
    """Six lines over ``pycollect.make_vec(2K, num_workers=2)``, the MLP called here each step.

    Its frames are transitions, as a collector's are: in ``make_vec``'s default autoreset
    mode (``next_step``) the step after an episode's end only resets that env (its action
    ignored, no transition), and such steps are not counted (about 1 in 10 on CartPole with
    this MLP). Counting them costs the loop two ``np.count_nonzero`` a step (about 1 us of its
    95); :attr:`steps_fps` keeps its env steps per second as well.
    """
    n = WORKERS * k
    t0 = time.perf_counter()
    envs = pycollect.make_vec("CartPole-v1", n, num_workers=WORKERS)
    policy = Timed(MLP())
    resets = 0

    def prepare() -> Callable[[int], Any]:
        obs, _ = envs.reset(seed=0)

        def run(count: int) -> None:
            nonlocal obs, resets
            _start_counting()  # the last call is the timed one
            resets = 0
            with torch.no_grad():
                for _ in range(count):
                    actions = policy(torch.from_numpy(obs)).numpy()
                    obs, _, terminated, truncated, _ = envs.step(actions)
                    resets += int(np.count_nonzero(terminated)) + int(np.count_nonzero(truncated))

        return run

    result = _counted(tp._timed_steps(t0, envs, n, frames, prepare))
    steps = result.frames
    result.frames = steps - resets  # an episode that ended at the last timed step was reset after it: off by <= n
    result.fps = result.frames / result.seconds
    result.steps_fps = steps / result.seconds  # type: ignore[attr-defined]
    return result


def _collector(env: str, policy: torch.nn.Module, steps: int, engine: Any, k: int, frames: int) -> tp.Result:
    """A collector of ``env`` over 2 workers x ``k`` envs with ``policy`` (timed), ``steps`` steps a batch."""
    cpu0, t0 = tp.CPU.read(), time.perf_counter()
    collector = pycollect.Collector(
        env,
        Timed(policy),
        frames_per_batch=WORKERS * k * steps,
        envs_per_worker=k,
        num_workers=WORKERS,
        engine=engine,
        seed=0,
    )
    batches = max(1, round(frames / collector.frames_per_batch))
    result = _counted(tp._measure(collector, collector.next_batch, _start_counting, batches, t0, cpu0))
    if engine == "workers":
        result.policy_cpu_s = 0.0  # the policy runs in the workers: none of the trainer's CPU is its
    return result


def _pong_collector(engine: Any, k: int, frames: int) -> tp.Result:
    return _collector("callable:atari_env:make_env", NatureCNN(), STEPS, engine, k, frames)


def pycollect_central(k: int, frames: int) -> tp.Result:
    """``Collector(engine="central")``: one CNN call per step over the 2K envs, in the trainer."""
    return _pong_collector("central", k, frames)


def pycollect_central_other_grouping(k: int, frames: int) -> tp.Result:
    """``engine=Central(groups=...)``, the grouping the default did not choose."""
    return _pong_collector(Central(groups=GROUPS["other"]), k, frames)


def pycollect_workers(k: int, frames: int) -> tp.Result:
    """``Collector(engine="workers")``: each worker calls its CNN copy on its K envs (none of the trainer's CPU)."""
    return _pong_collector("workers", k, frames)


def envpool_sync(k: int, frames: int) -> tp.Result:
    """EnvPool, 2K envs on 2 threads, the CNN over all of them each step (CleanRL's EnvPool loop)."""
    n = WORKERS * k
    t0 = time.perf_counter()
    envs = atari_env.make_envpool(n, num_threads=WORKERS, seed=0)
    policy = NatureCNN()

    def prepare() -> Callable[[int], Any]:
        obs, _ = envs.reset()

        def run(count: int) -> None:
            nonlocal obs
            with torch.inference_mode():
                for _ in range(count):
                    actions = policy(torch.from_numpy(obs)).numpy()
                    obs = envs.step(actions)[0]

        return run

    return tp._timed_steps(t0, envs, n, frames, prepare)


def envpool_async(k: int, frames: int) -> tp.Result:
    """EnvPool with ``batch_size=K``: the CNN on the K envs ready while the other K step."""
    n = WORKERS * k
    t0 = time.perf_counter()
    envs = atari_env.make_envpool(n, num_threads=WORKERS, seed=0, batch_size=k)
    policy = NatureCNN()

    def prepare() -> Callable[[int], Any]:
        envs.async_reset()

        def run(count: int) -> None:
            with torch.inference_mode():
                for _ in range(count * WORKERS):  # count steps of every env: 2 batches of K each
                    obs, _, _, _, info = envs.recv()
                    envs.send(policy(torch.from_numpy(obs)).numpy(), info["env_id"])

        return run

    return tp._timed_steps(t0, envs, n, frames, prepare)


def torchrl_parallel(k: int, frames: int) -> tp.Result:
    """TorchRL's ``Collector`` over ``ParallelEnv(2, SerialEnv(K, GymWrapper(make_env())))``."""
    from tensordict.nn import TensorDictModule
    from torchrl.collectors import Collector
    from torchrl.envs import GymWrapper, ParallelEnv, SerialEnv

    def make_worker_env() -> Any:
        return SerialEnv(k, lambda: GymWrapper(atari_env.make_env()))

    policy = TensorDictModule(tp.OneHot(NatureCNN(), 6), in_keys=["observation"], out_keys=["action"])
    per_batch = WORKERS * k * STEPS
    cpu0, t0 = tp.CPU.read(), time.perf_counter()
    env = ParallelEnv(WORKERS, make_worker_env)
    try:
        collector = Collector(env, policy, frames_per_batch=per_batch, total_frames=-1)
        iterator = iter(collector)
        batches = max(1, round(frames / per_batch))
        return tp._measure(collector, lambda: next(iterator), lambda _first: None, batches, t0, cpu0)
    finally:
        if not getattr(env, "is_closed", False):  # the collector's shutdown closes it; a failed run may not have
            env.close()  # ParallelEnv's workers are not daemons: they must not be left behind


CONTENDERS: dict[str, Callable[[int, int], tp.Result]] = {
    CENTRAL: pycollect_central,
    CENTRAL_OTHER: pycollect_central_other_grouping,
    WORKER_CNN: pycollect_workers,
    ENVPOOL_SYNC: envpool_sync,
    ENVPOOL_ASYNC: envpool_async,
    TORCHRL: torchrl_parallel,
}
REQUIRES = {ENVPOOL_SYNC: "envpool", ENVPOOL_ASYNC: "envpool", TORCHRL: "torchrl"}
CARTPOLE: dict[str, Callable[[int, int], tp.Result]] = {
    CENTRAL: cartpole_central,
    CENTRAL_OTHER: cartpole_central_other_grouping,
    WORKER_MLP: cartpole_workers,
    HAND_LOOP: hand_loop,
}


def main() -> None:
    """Run the rounds; print, save and plot the medians and the target."""
    pycollect.prestart()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=("pong", "cartpole"), default="pong", help="default pong")
    parser.add_argument("--envs", type=int, default=8, help="envs per worker (K); default 8")
    parser.add_argument(
        "--frames", type=int, default=None, help="timed frames per contender and round (6,000; CartPole 200,000)"
    )
    parser.add_argument("--rounds", type=int, default=None, help="default 3 (2 with --quick)")
    parser.add_argument("--quick", action="store_true", help="a quarter of the frames, 2 rounds")
    parser.add_argument("--only", default="", help="comma-separated contenders to run (default: all)")
    parser.add_argument("--out", default=None, help="path stem for .json and .png (default results/central[-cartpole])")
    parser.add_argument(
        "--trainer-threads",
        type=int,
        default=1,
        help="torch's intra-op threads in this process, where EnvPool and TorchRL run the CNN (default 1: the "
        "workers' processes need the CPUs while it runs); the central engine sets its own (Central(policy_threads))",
    )
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args()
    rounds = args.rounds or (2 if args.quick else 3)
    pong = args.workload == "pong"
    frames = args.frames or (6000 if pong else 200_000)
    frames = frames // 4 if args.quick else frames
    out = args.out or str(tp.RESULTS / ("central" if pong else "central-cartpole"))
    if pong and (problem := tp._missing("ale_py") or tp._missing("cv2")):
        parser.error(f"Pong needs ale-py and opencv-python-headless (pip install -e '.[bench]'): {problem}")
    contenders = dict(CONTENDERS if pong else CARTPOLE)
    if args.only:
        wanted = [name.strip() for name in args.only.split(",")]
        unknown = [name for name in wanted if name not in contenders]
        if unknown:
            parser.error(f"unknown contenders {unknown}: choose from {list(contenders)}")
        contenders = {name: contenders[name] for name in wanted}
    for name, module in REQUIRES.items():
        if name in contenders and (problem := tp._missing(module)):
            print(f"skipping {name}: {problem}", file=sys.stderr)
            del contenders[name]

    torch.set_num_threads(args.trainer_threads)
    GROUPS["default"] = default_groups_for(pong, args.envs)
    GROUPS["other"] = 3 - GROUPS["default"]
    count_waits()
    runs: dict[str, list[dict[str, Any]]] = {}
    started = time.perf_counter()
    for round_index in range(rounds):
        names = list(contenders)
        shift = round_index % len(names)
        this_round = {}
        for name in names[shift:] + names[:shift]:  # rotated: no contender always runs first
            this_round[name] = {**contenders[name](args.envs, frames).__dict__, "round": round_index}
        best_other = max((e["fps"] for n, e in this_round.items() if not n.startswith(CENTRAL)), default=None)
        workers = this_round.get(WORKER_CNN if pong else WORKER_MLP, {}).get("fps")
        hand = this_round.get(HAND_LOOP, {}).get("fps")
        for entry in this_round.values():
            entry["x best other"] = entry["fps"] / best_other if best_other else None
            central = this_round.get(CENTRAL, {}).get("fps")
            entry["x central"] = entry["fps"] / central if central else None
            entry["x workers"] = entry["fps"] / workers if workers else None
            entry["x hand loop"] = entry["fps"] / hand if hand else None
        for name, entry in this_round.items():
            runs.setdefault(name, []).append(entry)
        print(
            f"round {round_index + 1}/{rounds}: " + ", ".join(f"{n} {e['fps']:,.0f}" for n, e in this_round.items()),
            flush=True,
        )
    summary = {
        name: {
            "fps": statistics.median(e["fps"] for e in entries),
            "cpu_us_per_frame": statistics.median(e["cpu_seconds"] / e["frames"] * 1e6 for e in entries),
            # of the machine's 2 CPUs: how many this run kept busy, and this process (the trainer) alone
            "cpus": statistics.median(e["cpu_seconds"] / e["seconds"] for e in entries),
            "trainer_cpus": statistics.median(
                (e["trainer_user_s"] + e["trainer_sys_s"]) / e["seconds"] for e in entries
            ),
            "others_cpus": statistics.median(e["others_cpus"] for e in entries),
            # the trainer's CPU outside the policy's calls, per frame (where the calls were timed),
            # and outside its step waits as well (its own work: what it does around each call)
            "trainer_outside_policy_us": _median(
                (e["trainer_user_s"] + e["trainer_sys_s"] - e["policy_cpu_s"]) / e["frames"] * 1e6
                if e["policy_cpu_s"] is not None
                else None
                for e in entries
            ),
            "trainer_own_work_us": _median(
                (e["trainer_user_s"] + e["trainer_sys_s"] - e["policy_cpu_s"] - e["wait_cpu_s"]) / e["frames"] * 1e6
                if e["policy_cpu_s"] is not None and e["wait_cpu_s"] is not None
                else None
                for e in entries
            ),
            "x best other": _median(e["x best other"] for e in entries),
            "x central": _median(e["x central"] for e in entries),
            "x workers": _median(e["x workers"] for e in entries),
            "x hand loop": _median(e["x hand loop"] for e in entries),
        }
        for name, entries in runs.items()
    }
    workload = "Pong, Nature CNN" if pong else "CartPole-v1, 64-wide MLP"
    print(f"\n{workload}, {WORKERS} workers x {args.envs} envs, medians of {rounds} rounds")
    print(f"  ({CENTRAL!r}: engine='central' as it is, {GROUPS['default']} group(s) here; other: {GROUPS['other']})")
    print(
        f"  {'contender':40} {'frames/s':>9} {'x central':>9} {'CPU us/frame':>12} {'CPUs':>5} {'trainer':>7}"
        f" {'others':>6} {'trainer us/frame: outside policy':>32} {'and waits':>9}"
    )
    for name, row in summary.items():
        x_central = f"{row['x central']:.2f}" if row["x central"] is not None else "-"
        outside, own = (
            "-" if row[key] is None else f"{row[key]:.2f}"
            for key in ("trainer_outside_policy_us", "trainer_own_work_us")
        )
        print(
            f"  {name:40} {row['fps']:>9,.0f} {x_central:>9} {row['cpu_us_per_frame']:>12,.1f} {row['cpus']:>5.2f}"
            f" {row['trainer_cpus']:>7.2f} {row['others_cpus']:>6.2f} {outside:>32} {own:>9}"
        )
    _trainer_targets(summary, pong)
    target = summary.get(CENTRAL, {}).get("x best other") if pong else None
    if target is not None:
        verdict = "MET" if target >= 1.0 else "MISSED"
        print(f"\ntarget: central >= 1.0x the best of the others (median of per-round ratios): {target:.2f} {verdict}")
    against_workers = summary.get(CENTRAL, {}).get("x workers") if pong else None
    if against_workers is not None:
        verdict = "MET" if against_workers >= 0.9 else "MISSED"
        print(f"target: central >= 0.9x workers (median of per-round ratios): {against_workers:.2f} {verdict}")
    print(f"wall time {time.perf_counter() - started:.0f} s")
    stem = Path(out)
    tp.save_record(
        stem.with_suffix(".json"),
        workload=args.workload,
        rounds=rounds,
        envs_per_worker=args.envs,
        groups=GROUPS,
        trainer_threads=args.trainer_threads,
        summary=summary,
        target={"central x best other": target, "met": target is not None and target >= 1.0},
        target_workers={
            "central x workers": against_workers,
            "met": against_workers is not None and against_workers >= 0.9,
        },
        runs=runs,
    )
    if not args.no_plot:
        _plot(stem.with_suffix(".png"), summary, args.envs, workload)
    print(f"wrote {stem.with_suffix('.json')}" + ("" if args.no_plot else f" and {stem.with_suffix('.png')}"))


def default_groups_for(pong: bool, k: int) -> int:
    """How many groups ``engine="central"`` makes here for the workload's policy (its rule, its FLOP count)."""
    from torch.utils.flop_counter import FlopCounterMode

    policy: torch.nn.Module = NatureCNN() if pong else MLP()
    n = WORKERS * len(env_groups(k, 2)[0])  # the envs of a group of two
    example = torch.zeros((n, 4, 84, 84), dtype=torch.uint8) if pong else torch.zeros((n, 4))

    def call_flops() -> int:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            policy(example)
        return int(counter.get_total_flops())

    return default_groups(True, torch.device("cpu"), WORKERS, call_flops)[0]


def _trainer_targets(summary: dict[str, dict[str, Any]], pong: bool) -> None:
    """Print issue 40's targets: the trainer's CPU outside the policy call, and (CartPole) the hand loop's speed."""
    for name in (CENTRAL, CENTRAL_OTHER):
        row = summary.get(name)
        if row is None:
            continue
        if not pong and (ratio := row["x hand loop"]) is not None:
            verdict = "MET" if ratio >= 0.9 else "MISSED"
            print(f"target: {name} >= 0.9x the hand loop (median of per-round ratios): {ratio:.2f} {verdict}")
        if (outside := row["trainer_outside_policy_us"]) is not None:
            verdict = "MET" if outside <= 5.0 else "MISSED"
            own = row["trainer_own_work_us"]
            print(
                f"target: {name}'s trainer CPU outside the policy call <= 5 us/frame: {outside:.2f} {verdict}"
                + ("" if own is None else f" ({own:.2f} outside its step waits too)")
            )


def _median(values: Any) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _plot(path: Path, summary: dict[str, dict[str, Any]], k: int, workload: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(summary)
    values = [summary[name]["fps"] for name in labels]
    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.barh(labels, values, color=["#C44E52" if name.startswith("pycollect") else "#8C8C8C" for name in labels])
    ax.invert_yaxis()
    ax.set_xlabel(f"frames/s, {workload}, {WORKERS} workers x {k} envs (median)")
    tp.save_figure(fig, path)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
