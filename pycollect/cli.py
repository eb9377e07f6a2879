"""The ``pycollect`` command line.

``pycollect run`` collects experience from an environment with a random policy and reports
how fast it went; it is the quickest way to see pycollect work on a machine.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["build_parser", "main"]

DEFAULT_ENV = "CartPole-v1"
DISABLE_VARIABLE, LOAD_VARIABLE = "PYCOLLECT_DISABLE_PLUGINS", "PYCOLLECT_LOAD_PLUGINS"  # see pycollect.plugins

_DESCRIPTION = """\
pycollect collects reinforcement-learning experience from environments and delivers it as
TorchRL-compatible TensorDict batches.

Start with:
  pycollect run                          collect 100,000 frames of CartPole-v1, show the speed
  pycollect run Pendulum-v1 --frames 50000
  pycollect run --workers 2              step the environments in 2 worker processes
  pycollect run --help                   every option of 'run'
  pycollect plugins                      the env backends, weight-sync schemes and device
                                         policies installed, and which plugin provides each
"""


def _env_kwarg(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE with KEY a Python identifier, got {text!r}")
    try:
        value: Any = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        value = raw  # a bare word is a string: render_mode=rgb_array
    return key, value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``pycollect`` command."""
    parser = argparse.ArgumentParser(
        prog="pycollect",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"pycollect {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = commands.add_parser(
        "run",
        help="collect frames from an environment and report frames/s",
        description=(
            "Collect frames from ENV with a uniform random policy, with a progress bar, then "
            "print frames, frames/s, finished episodes and their mean return."
        ),
    )
    run.add_argument(
        "env",
        nargs="?",
        default=DEFAULT_ENV,
        metavar="ENV",
        help=(
            f"environment: a gymnasium id such as {DEFAULT_ENV} (the default), or "
            "'BACKEND:TARGET' such as 'gymnasium:Pendulum-v1' or 'callable:pkg.module:make_env'"
        ),
    )
    run.add_argument(
        "--workers",
        type=int,
        default=0,
        metavar="N",
        help="worker processes stepping environments (default 0: step in this process)",
    )
    run.add_argument(
        "--async",
        dest="async_",
        action="store_true",
        help="with --workers: each batch is the next rollout of any worker (default: one of every worker)",
    )
    run.add_argument(
        "--envs-per-worker", type=int, default=8, metavar="K", help="environments stepped together (default 8)"
    )
    run.add_argument(
        "--frames", type=int, default=100_000, metavar="N", help="total frames to collect (default 100000)"
    )
    run.add_argument(
        "--frames-per-batch", type=int, default=1024, metavar="N", help="frames in each batch (default 1024)"
    )
    run.add_argument(
        "--max-frames-per-traj", type=int, default=None, metavar="N", help="truncate episodes after N steps"
    )
    run.add_argument("--seed", type=int, default=None, metavar="S", help="seed for a reproducible run")
    run.add_argument(
        "--env-kwarg",
        type=_env_kwarg,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="keyword argument for the environment constructor (repeatable); VALUE is a Python literal",
    )
    run.add_argument("--no-progress", action="store_true", help="do not draw a progress bar")
    run.add_argument("--json", action="store_true", help="print the summary as one JSON object")

    plugins = commands.add_parser(
        "plugins",
        help="list the env backends, weight-sync schemes and device policies, and their plugins",
        description=(
            "List every registered env backend, weight-sync scheme and device placement policy "
            "with the plugin, distribution and version that provides it, built-ins included, "
            f"and installed plugins that were not loaded ({DISABLE_VARIABLE}, {LOAD_VARIABLE})."
        ),
    )
    plugins.add_argument("--json", action="store_true", help="print the list as one JSON object")
    return parser


def _version() -> str:
    from pycollect import __version__

    return __version__


def _run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from pycollect import Collector, PyCollectError

    started = time.perf_counter()
    try:
        collector = Collector(
            args.env,
            frames_per_batch=args.frames_per_batch,
            total_frames=args.frames,
            envs_per_worker=args.envs_per_worker,
            num_workers=args.workers,
            sync=not args.async_,
            max_frames_per_traj=args.max_frames_per_traj,
            seed=args.seed,
            env_kwargs=dict(args.env_kwarg),
        )
    except PyCollectError as exc:
        print(f"pycollect: error: {exc}", file=sys.stderr)
        return 2
    interrupted = False
    setup_s = 0.0
    with (
        collector,
        tqdm(
            total=args.frames,
            unit="frames",
            unit_scale=True,
            disable=args.no_progress,
            file=sys.stderr,
            dynamic_ncols=True,
        ) as bar,
    ):
        # Steady-state speed is timed from the first batch on; construction and the first
        # batch (which waits for worker processes to start) are reported as start-up.
        first_frames = 0
        try:
            for _ in collector:
                bar.update(collector.frames - bar.n)
                if not first_frames:
                    first_frames = collector.frames
                    setup_s = time.perf_counter() - started
                    started = time.perf_counter()
        except KeyboardInterrupt:
            interrupted = True
        except PyCollectError as exc:  # a worker given up on, an env returning what it may not
            bar.close()
            print(f"pycollect: error: {exc}", file=sys.stderr)
            return 1
        if not first_frames:
            setup_s, started = time.perf_counter() - started, time.perf_counter()
        elapsed = time.perf_counter() - started
    timed_frames = collector.frames - first_frames
    summary = {
        "env": collector.env_source.describe(),
        "workers": args.workers,
        "mode": "in-process" if not args.workers else ("async" if args.async_ else "sync"),
        "restarts": collector.stats().restarts,
        "envs_per_worker": collector.envs_per_worker,
        "frames": collector.frames,
        "seconds": round(elapsed, 3),
        "frames_per_s": round(timed_frames / elapsed, 1) if elapsed > 0 and timed_frames else None,
        "setup_seconds": round(setup_s, 3),
        "episodes": collector.episodes.count,
        "mean_return": round(collector.episodes.mean_return, 3) if collector.episodes.count else None,
        "interrupted": interrupted,
    }
    _print_summary(summary, as_json=args.json)
    return 130 if interrupted else 0


def _print_summary(summary: dict[str, Any], *, as_json: bool) -> None:
    if as_json:
        print(json.dumps(summary))
        return
    fps = summary["frames_per_s"]
    mean = summary["mean_return"]
    where = (
        "in-process"
        if summary["mode"] == "in-process"
        else f"{summary['workers']} workers x {summary['envs_per_worker']} envs, {summary['mode']}"
    )
    envs = f"{summary['envs_per_worker']} envs, " if summary["mode"] == "in-process" else ""
    print(f"env          {summary['env']} ({envs}{where})")
    print(f"frames       {summary['frames']:,}{' (interrupted)' if summary['interrupted'] else ''}")
    print(f"time         {summary['seconds']:.2f} s (+{summary['setup_seconds']:.2f} s start-up and first batch)")
    print(f"frames/s     {fps:,.0f}" if fps else "frames/s     -")
    print(f"episodes     {summary['episodes']:,}")
    if summary["restarts"]:
        print(f"restarts     {summary['restarts']} worker restart(s)")
    print(f"mean return  {mean:.2f}" if mean is not None else "mean return  - (no episode finished)")


_KIND_TITLES = {"env_backend": "env backend", "scheme": "weight-sync scheme", "device_policy": "device policy"}
_KIND_KEYS = {"env_backend": "env_backends", "scheme": "schemes", "device_policy": "device_policies"}


def _plugins(args: argparse.Namespace) -> int:
    from pycollect import PyCollectError, plugins

    try:
        found, skipped = plugins.registrations(), plugins.skipped()
    except PyCollectError as exc:
        print(f"pycollect: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        listing: dict[str, Any] = {key: [] for key in _KIND_KEYS.values()}
        for item in found:
            listing[_KIND_KEYS[item.kind]].append(
                {
                    "name": item.name,
                    "class": f"{item.cls.__module__}.{item.cls.__qualname__}",
                    "plugin": item.plugin.name,
                    "distribution": item.plugin.distribution,
                    "version": item.plugin.version,
                    "builtin": item.plugin.builtin,
                }
            )
        listing["not_loaded"] = [{"plugin": name, "reason": reason} for name, reason in skipped.items()]
        print(json.dumps(listing, indent=2))
        return 0
    rows = [("KIND", "NAME", "PLUGIN", "DISTRIBUTION")]
    for item in found:
        origin = f"{item.plugin.distribution} {item.plugin.version}" if item.plugin.distribution else "(runtime)"
        if item.plugin.builtin:
            origin += " (built-in)"
        rows.append((_KIND_TITLES[item.kind], item.name, item.plugin.name, origin))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        print("  ".join([*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[3]]))
    for name, reason in skipped.items():
        print(f"not loaded: {name} ({reason})")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``pycollect`` command; return its exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    if args.command == "run":
        return _run(args)
    if args.command == "plugins":
        return _plugins(args)
    parser.error(f"unknown command {args.command!r}")
    return 2
