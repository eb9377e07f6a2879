"""Before/after throughput: ``benches/throughput.py`` under two interpreters, round by round.

Each interpreter has its own build of pycollect installed (two virtual environments, say one
with the base commit and one with the change). Every round runs ``throughput.py --rounds 1``
once under each, and the order flips from one round to the next (A B, B A, A B, ...), so that
a machine whose speed drifts during the run favours neither. Both run the same
``throughput.py`` (this directory's, or ``--script``) and the results are read from its JSON
output. For each workload and contender it prints the median frames/s of each side and the
median over rounds of the per-round ratio after/before (with its range), the same for the CPU
time per frame (less moved by other work on a shared machine than frames/s), and writes them
all to ``--out``. ``--summarize`` reprints a saved ``--out`` file.

Set up the "before" side once, next to a checkout of the change::

    git worktree add --detach ../before BASE_COMMIT
    python -m venv --system-site-packages ../venv-before
    (cd ../before && ../venv-before/bin/pip install -e . --no-deps --no-build-isolation)

Run (about 1.5 min a round for the defaults on 2 vCPUs). To see what is noise on the machine,
run it once with the same interpreter on both sides (an A/A run): on a shared 2-vCPU machine
its medians of 6 rounds strayed up to 10% from 1.0::

    python benches/ab.py --before ../venv-before/bin/python --after .venv/bin/python --rounds 5
    python benches/ab.py --before A/bin/python --after B/bin/python --workloads cartpole-random \\
        --contenders "pycollect in-process" --quick --rounds 9

``--contenders`` selects as ``throughput.py`` does (comma-separated substrings of the names):
the default, ``pycollect in-process,pycollect sync``, runs in-process and sync with 1 and 2
workers (and 2 workers zero-copy).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_WORKLOADS = "cartpole-random,cartpole-mlp,synthetic-84x84x4"
DEFAULT_CONTENDERS = "pycollect in-process,pycollect sync"


def run_once(python: str, script: Path, args: argparse.Namespace, out: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """One ``throughput.py --rounds 1`` run under ``python``: {workload: {contender: result}}."""
    command = [
        python,
        str(script),
        "--workloads",
        args.workloads,
        "--contenders",
        args.contenders,
        "--rounds",
        "1",
        "--envs",
        str(args.envs),
        "--out",
        str(out),
        "--no-plot",
        *(["--quick"] if args.quick else []),
    ]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL if not args.verbose else None)
    record = json.loads(out.with_suffix(".json").read_text())
    return {w: {name: entries[0] for name, entries in runs.items()} for w, runs in record["runs"].items()}


def summarize(rounds: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """Per workload and contender: median frames/s of each side, and the per-round ratio after/before."""
    summary: dict[str, dict[str, dict[str, float]]] = {}
    for workload, contenders in rounds[0]["before"].items():
        for name in contenders:
            before = [r["before"][workload][name]["fps"] for r in rounds]
            after = [r["after"][workload][name]["fps"] for r in rounds]
            ratios = [a / b for a, b in zip(after, before, strict=True)]
            # CPU time of the whole process tree per frame: less moved by other work on the machine
            # than frames/s are (a contender that waits for a CPU does not spend CPU time waiting).
            cpu = {
                side: [1e6 * r[side][workload][name]["cpu_seconds"] / r[side][workload][name]["frames"] for r in rounds]
                for side in ("before", "after")
            }
            cpu_ratios = [a / b for a, b in zip(cpu["after"], cpu["before"], strict=True)]
            others = [r[side][workload][name]["others_cpus"] for r in rounds for side in ("before", "after")]
            summary.setdefault(workload, {})[name] = {
                "before_fps": statistics.median(before),
                "after_fps": statistics.median(after),
                "ratio_median": statistics.median(ratios),
                "ratio_min": min(ratios),
                "ratio_max": max(ratios),
                "before_cpu_us_per_frame": statistics.median(cpu["before"]),
                "after_cpu_us_per_frame": statistics.median(cpu["after"]),
                "cpu_ratio_median": statistics.median(cpu_ratios),
                "others_cpus_median": statistics.median(others),
            }
    return summary


def print_table(summary: dict[str, dict[str, dict[str, float]]], rounds: int) -> None:
    """The summary as a table, one row per contender."""
    print(
        f"\nframes/s and CPU us/frame (the process tree's), medians of {rounds} rounds; after/before: median of "
        "the per-round ratios (frames/s: with their range); others: CPUs the rest of the machine kept busy"
    )
    for workload, rows in summary.items():
        print(f"\n{workload}")
        print(
            f"  {'contender':38s} {'before':>9s} {'after':>9s} {'after/before':>12s} {'range':>10s}"
            f" {'cpu before':>10s} {'cpu after':>10s} {'after/before':>12s} {'others':>6s}"
        )
        for name, row in rows.items():
            span = f"{row['ratio_min']:.2f}-{row['ratio_max']:.2f}"
            print(
                f"  {name:38s} {row['before_fps']:9,.0f} {row['after_fps']:9,.0f} {row['ratio_median']:12.3f} "
                f"{span:>10s} {row['before_cpu_us_per_frame']:10.2f} {row['after_cpu_us_per_frame']:10.2f} "
                f"{row['cpu_ratio_median']:12.3f} {row['others_cpus_median']:6.2f}"
            )


def main() -> None:
    """Parse the arguments, run the rounds, print and save the summary."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", help="the interpreter with the base build (A)")
    parser.add_argument("--after", help="the interpreter with the changed build (B)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds, each running A and B once (default 5)")
    parser.add_argument("--workloads", default=DEFAULT_WORKLOADS, help=f"for throughput.py ({DEFAULT_WORKLOADS})")
    parser.add_argument(
        "--contenders", default=DEFAULT_CONTENDERS, help=f"for throughput.py (default {DEFAULT_CONTENDERS!r})"
    )
    parser.add_argument("--envs", type=int, default=8, help="K, for throughput.py (default 8)")
    parser.add_argument("--quick", action="store_true", help="throughput.py --quick: a quarter of the frames")
    parser.add_argument("--script", default=str(HERE / "throughput.py"), help="the throughput.py both sides run")
    parser.add_argument("--out", default=str(HERE / "results" / "ab.json"), help="where the summary and rounds go")
    parser.add_argument("--verbose", action="store_true", help="show throughput.py's own output")
    parser.add_argument("--summarize", metavar="JSON", help="instead: reprint the summary of a saved --out file")
    args = parser.parse_args()
    if args.summarize:
        saved = json.loads(Path(args.summarize).read_text())
        print_table(summarize(saved["rounds"]), len(saved["rounds"]))
        return
    if not args.before or not args.after:
        parser.error("--before and --after are required")

    script = Path(args.script).resolve()
    sides = {"before": args.before, "after": args.after}
    rounds: list[dict[str, Any]] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="pycollect-ab-") as scratch:
        for index in range(args.rounds):
            order = ["before", "after"] if index % 2 == 0 else ["after", "before"]
            results = {side: run_once(sides[side], script, args, Path(scratch) / side) for side in order}
            rounds.append({"order": order, **results})
            line = ", ".join(
                f"{name} {results['after'][w][name]['fps'] / results['before'][w][name]['fps']:.3f}"
                for w in results["before"]
                for name in results["before"][w]
            )
            print(f"round {index + 1}/{args.rounds} ({' '.join(order)}): after/before {line}", flush=True)
    summary = summarize(rounds)
    print_table(summary, args.rounds)
    elapsed = time.perf_counter() - started
    print(f"\nwall time {elapsed:.0f} s")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "when": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "sides": sides,
        "args": vars(args),
        "summary": summary,
        "rounds": rounds,
        "wall_s": elapsed,
    }
    out.write_text(json.dumps(record, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
