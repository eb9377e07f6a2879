"""Start-up of a 2-worker collector with a torch MLP policy: constructor to first batch.

Each measurement runs in a fresh Python process that has already imported torch and gymnasium
(as a training script has) and times ``Collector(...)`` plus its first ``next_batch()``:

``fork server, warm``
    ``pycollect.prestart()`` was called and the fork server has finished its imports.
``fork server, cold``
    No server runs: the collector starts it and waits for its imports (they are in the time).
    Importing pycollect starts no process.
``fork server, script``
    As a training script that calls ``pycollect.prestart()`` first thing: then the script's
    own ``import torch``, then the timer; the server's imports overlap the script's.
``fork+exec``
    ``PYCOLLECT_FORK_SERVER=0``: every worker is ``python -P -m pycollect.worker``.
``TorchRL MultiSync``
    ``MultiSyncCollector`` with 2 workers (one ``GymEnv`` each), the reference (it forks the
    trainer).

Usage: ``python benches/startup.py [--rounds 5] [--modes warm cold script exec torchrl] [--json]``.
The figure to compare with issue 12's target (1.0 s) is the median.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

MODES = {
    "warm": "fork server, warm",
    "cold": "fork server, cold",
    "script": "fork server, script",
    "exec": "fork+exec",
    "torchrl": "TorchRL MultiSync",
}
WORKERS, ENVS, STEPS = 2, 4, 16


def _measure(mode: str) -> float:
    """One measurement in this process (a fresh one); seconds from constructor to first batch."""
    if mode == "exec":
        os.environ["PYCOLLECT_FORK_SERVER"] = "0"
    if mode == "script":
        import pycollect

        pycollect.prestart()  # before torch is imported: the server's imports overlap the script's
    import startup_policy  # the script's own imports: torch, gymnasium

    if mode == "torchrl":
        from tensordict.nn import TensorDictModule
        from torchrl.collectors import MultiSyncCollector

        policy = TensorDictModule(startup_policy.MLPPolicy(one_hot=True), in_keys=["observation"], out_keys=["action"])
        t0 = time.perf_counter()
        collector = MultiSyncCollector(
            [startup_policy.make_torchrl_env] * WORKERS, policy, frames_per_batch=WORKERS * STEPS, total_frames=-1
        )
        next(iter(collector))
        elapsed = time.perf_counter() - t0
        collector.shutdown()
        return elapsed

    import pycollect
    from pycollect import Collector  # starts no process
    from pycollect._workers import forkserver

    if mode == "warm":
        pycollect.prestart()
        assert forkserver.wait_ready(120.0), "the fork server did not start"
    if mode == "cold":
        assert forkserver.server_pid() is None, "a fork server runs before the collector starts one"
    t0 = time.perf_counter()
    collector = Collector(
        startup_policy.make_env,
        startup_policy.MLPPolicy(),
        frames_per_batch=WORKERS * ENVS * STEPS,
        envs_per_worker=ENVS,
        num_workers=WORKERS,
    )
    collector.next_batch()
    elapsed = time.perf_counter() - t0
    by = {e.launched_by for e in collector.stats().events if e.kind == "started"}
    collector.shutdown()
    expected = {"exec"} if mode == "exec" else {"fork_server"}
    assert by == expected, f"{mode}: workers were started by {by}"
    return elapsed


def main() -> None:
    """Run every mode ``--rounds`` times, each in a fresh process, and print the medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--one", choices=list(MODES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(_measure(args.one)))
        return
    results: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for mode in args.modes:  # interleaved, so that machine noise spreads over every mode
            out = subprocess.run(
                [sys.executable, __file__, "--one", mode], check=True, capture_output=True, text=True, timeout=300
            ).stdout
            results.setdefault(mode, []).append(json.loads(out.strip().splitlines()[-1]))
            print(f"{MODES[mode]}: {results[mode][-1]:.3f} s", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps({MODES[m]: v for m, v in results.items()}))
        return
    print(f"start-up, {WORKERS} workers, CartPole + 2x64 MLP, constructor to first batch ({args.rounds} rounds)")
    for mode, values in results.items():
        runs = " ".join(f"{v:.2f}" for v in values)
        print(f"  {MODES[mode]:<20} median {statistics.median(values):5.2f} s   min {min(values):5.2f} s   ({runs})")


if __name__ == "__main__":
    main()
