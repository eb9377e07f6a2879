"""The ``pycollect`` command line.

``pycollect run`` collects experience from an environment with a random policy and reports
how fast it went; it is the quickest way to see pycollect work on a machine.

What the command says besides its summary goes to stderr, one line each: ``pycollect: error:
...`` (bad input: status 2; an error while collecting: status 1), ``pycollect: warning: ...``
(the library's warnings and the ``pycollect`` loggers' records, such as a worker restart), and
with ``-v`` ``pycollect: info: ...`` and ``pycollect: debug: ...`` (every worker start and exit). Messages of the
library name its arguments (``num_workers``); the command names its flags (``--workers``)
instead, through :data:`FLAGS`.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import logging
import math
import os
import re
import sys
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from pycollect.exceptions import PyCollectError, PyCollectWarning, WorkerCrashedError

if TYPE_CHECKING:
    from pycollect.collector import Collector
    from pycollect.config import CollectorConfig

__all__ = ["FLAGS", "build_parser", "flag_names", "main"]

DEFAULT_ENV = "CartPole-v1"
DEFAULT_FRAMES = 100_000
"""Frames ``pycollect run`` collects without ``--frames``: at least this many, in whole batches."""
DISABLE_VARIABLE, LOAD_VARIABLE = "PYCOLLECT_DISABLE_PLUGINS", "PYCOLLECT_LOAD_PLUGINS"  # see pycollect.plugins

_DESCRIPTION = """\
pycollect collects reinforcement-learning experience from environments and delivers it as
TorchRL-compatible TensorDict batches.

Start with:
  pycollect run                          collect 100,000 frames of CartPole-v1, show the speed
  pycollect run Pendulum-v1 --frames 50000
  pycollect run --workers 2              step the environments in 2 worker processes
  pycollect run --workers 2 -v           ... and say when each worker starts and ends
  pycollect run --workers 4 --top        ... with a live view of each worker instead of the bar
  pycollect run envpool:Pong-v5 --workers 2 --envs-per-worker 4
                                         a batched env: each worker hosts one EnvPool of 4 envs
  pycollect run --help                   every option of 'run'
  pycollect top                          watch a collection running in another terminal: each
                                         worker's frames/s, step latency, where its time goes,
                                         stragglers and restarts marked
  pycollect plugins                      the env backends, weight-sync schemes, device
                                         policies, engines, inference runners and step
                                         backends installed, and which plugin provides each
"""

_TOP_DESCRIPTION = """\
Watch a running pycollect collection of yours, live and read-only: watching neither stops,
slows nor changes it. The header shows the trainer (frames/s, batches/s, time waiting for
data, frames and batches delivered) and the policy (version, lag of the frames delivered,
frames dropped for lag, weight publishes). Each worker has a row:

  state               running; 'straggler 0.20x' (running at under half the median worker's
                      frames/s: 0.20 of it); 'restarting' (between a crash and its restart);
                      'FAILED' (given up on); starting, exiting, not started
  restarts            how often it was restarted
  frames/s, steps/s   its rates (a step moves each of its envs once)
  p50 step, p99 step  step latency (policy and envs), median and 99th percentile
  env/policy/wait     where its time goes: stepping envs, in the policy, waiting for a free
                      slot of its ring, new weights or the trainer
  ring                rollouts it handed over that the trainer has not taken yet / slots
  heartbeat           time since its last sign of life ('late' after 5 s)
  version             the policy version it uses

Rates and percentiles are over the last --window seconds. A narrow terminal shows fewer
columns (about 130 show them all).
"""

_TOP_EPILOG = """\
examples:
  pycollect top                     your only running collection (several: choose one)
  pycollect top 12345               the collection whose trainer has pid 12345
  pycollect top CartPole            the collection whose description has this word
  pycollect top --once 12345        one frame, for a script or a log

Quit with Ctrl-C; top also exits when the collection ends (status 0). A collection it cannot
watch (no such process, another user's, not a collection, no name or several matching) is
said on one line, 'pycollect: error: ...', status 2.
"""

FLAGS = {
    "num_workers": "--workers",
    "frames_per_batch": "--frames-per-batch",
    "envs_per_worker": "--envs-per-worker",
    "total_frames": "--frames",
    "max_frames_per_traj": "--max-frames-per-traj",
    "seed": "--seed",
    "env_kwargs": "--env-kwarg",
    "checkpoint_dir": "--checkpoint-dir",
    "checkpoint_every": "--checkpoint-every",
}
"""The Collector arguments that ``pycollect run`` sets, and the flag that sets each."""

_NAMES = re.compile(r"\b(" + "|".join(FLAGS) + r")\b(?!-)")


def flag_names(text: str) -> str:
    """``text`` (a message of the library) with the Collector's argument names as the command's flags.

    The library's checks name the argument first (``"num_workers must be ..."``) and quote
    values as ``name=value``; both become flags (``"--workers must be ..."``,
    ``"--workers=3"``). A name that is also an ordinary word (``seed``) is only translated
    there, at the start or before ``=``; the others wherever they stand.
    """

    def swap(match: re.Match[str]) -> str:
        name = match.group(1)
        if "_" in name or match.start() == 0 or text.startswith("=", match.end()):
            return FLAGS[name]
        return name

    return _NAMES.sub(swap, text)


def _say(level: str, text: str, stream: TextIO | None = None) -> None:
    """Print ``pycollect: LEVEL: text`` on stderr, clearing and redrawing a progress bar around it."""
    from tqdm import tqdm

    stream = sys.stderr if stream is None else stream
    with tqdm.external_write_mode(file=stream):
        print(f"pycollect: {level}: {text}", file=stream, flush=True)


class _StderrHandler(logging.Handler):
    """The ``pycollect`` loggers' records as ``pycollect: LEVEL: message`` lines on stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        event = getattr(record, "worker_event", None)
        if event is not None and event.kind == "gave_up":
            return  # the collector raises WorkerCrashedError right after, which the command prints
        try:
            text = record.getMessage()
            if record.exc_info:
                text += "\n" + logging.Formatter().formatException(record.exc_info)
            _say(record.levelname.lower(), text)
        except Exception:
            self.handleError(record)


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    text = flag_names(str(message))
    if not issubclass(category, PyCollectWarning):
        text = f"{category.__name__}: {text}"  # another library's: say what kind
    _say("warning", text, file)


@contextlib.contextmanager
def _diagnostics(verbose: bool) -> Iterator[None]:
    """Warnings and the ``pycollect`` loggers' records as one line each on stderr, while the command runs."""
    logger = logging.getLogger("pycollect")
    handler = _StderrHandler()
    level = logger.level
    logger.setLevel(logging.DEBUG if verbose else logging.WARNING)
    logger.addHandler(handler)
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _process_started() -> float:
    """The ``time.perf_counter()`` reading at which this process started (Linux), else now.

    The command's start-up then counts the interpreter's own start and every import, not just
    what follows them.
    """
    now = time.perf_counter()
    try:
        with open("/proc/self/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()  # after "pid (comm)": field 3 on
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return now
    return now - age if 0 <= age < 60 else now  # an implausible age: a clock we cannot compare


def _env_kwarg(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE with KEY a Python identifier, got {text!r}")
    try:
        value: Any = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        value = raw  # a bare word is a string: render_mode=rgb_array
    return key, value


def _settings_without_flags() -> list[str]:
    """The fields of ``CollectorConfig`` and ``SupervisionConfig`` that no flag of ``run`` sets (``--set`` does)."""
    from dataclasses import fields

    from pycollect.config import CollectorConfig, SupervisionConfig

    names = [f.name for config in (CollectorConfig, SupervisionConfig) for f in fields(config)]
    return [name for name in names if name not in FLAGS and name not in ("supervision", "sync")]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``pycollect`` command."""
    parser = argparse.ArgumentParser(
        prog="pycollect",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"pycollect {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_run_command(commands)
    _add_top_command(commands)
    _add_plugins_command(commands)
    return parser


def _add_run_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``pycollect run``: what to collect and how, other settings, what is printed."""
    run = commands.add_parser(
        "run",
        help="collect frames from an environment and report frames/s",
        description=(
            "Collect frames from ENV with a uniform random policy, with a progress bar, then "
            "print frames, frames/s, finished episodes and their mean return."
        ),
        epilog=(
            "Errors, warnings (a worker restarted, a batch size rounded up) and with -v more "
            "are printed on stderr, one line each: 'pycollect: error: ...', 'pycollect: "
            "warning: ...'. Status: 0 done, 1 an error while collecting, 2 bad input, "
            "130 interrupted."
        ),
    )
    _add_collection_options(run)
    _add_setting_options(run)
    _add_checkpoint_options(run)
    _add_output_options(run)


def _add_collection_options(run: argparse.ArgumentParser) -> None:
    """The environment, the workers and the frames: the settings a flag of its own sets (:data:`FLAGS`)."""
    run.add_argument(
        "env",
        nargs="?",
        default=DEFAULT_ENV,
        metavar="ENV",
        help=(
            f"environment: a gymnasium id such as {DEFAULT_ENV} (the default), or "
            "'BACKEND:TARGET' such as 'gymnasium:Pendulum-v1' or 'callable:pkg.module:make_env'; a batched env "
            "('envpool:Pong-v5', 'gymnax:CartPole-v1' with pycollect-jax) has --envs-per-worker sub-envs"
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
        help="with --workers N: each batch is the next rollout of any worker (default: one of every worker)",
    )
    run.add_argument(
        "--envs-per-worker", type=int, default=8, metavar="K", help="environments stepped together (default 8)"
    )
    run.add_argument(
        "--frames",
        type=int,
        default=None,
        metavar="N",
        help=f"frames to collect, in whole batches (default {DEFAULT_FRAMES}, rounded up; -1: until Ctrl-C)",
    )
    run.add_argument(
        "--frames-per-batch",
        type=int,
        default=1024,
        metavar="N",
        help="frames in each batch, rounded up to a whole step of every env (default 1024)",
    )
    run.add_argument(
        "--max-frames-per-traj", type=int, default=None, metavar="N", help="truncate episodes after N steps"
    )
    run.add_argument("--seed", type=int, default=None, metavar="S", help="seed for a reproducible run")


def _add_setting_options(run: argparse.ArgumentParser) -> None:
    """The environment's keyword arguments, and ``--set`` for every collector setting without a flag."""
    run.add_argument(
        "--env-kwarg",
        type=_env_kwarg,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="keyword argument for the environment constructor (repeatable); VALUE is a Python literal",
    )
    run.add_argument(
        "--set",
        dest="settings",
        type=_env_kwarg,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help=(
            "any other collector setting (repeatable; VALUE is a Python literal), e.g. --set max_restarts=5 "
            f"--set apply_weights=between_steps. The settings: {', '.join(_settings_without_flags())}; "
            "help(pycollect.CollectorConfig) says what each does"
        ),
    )


def _add_checkpoint_options(run: argparse.ArgumentParser) -> None:
    """Checkpoints of the run, and resuming one (docs/faults.md)."""
    run.add_argument(
        "--checkpoint-dir",
        default=None,
        metavar="DIR",
        help="write checkpoints into DIR (every --checkpoint-every batches, and on SIGTERM), to resume the run",
    )
    run.add_argument(
        "--checkpoint-every",
        type=int,
        default=0,
        metavar="N",
        help="batches between two checkpoints (with --checkpoint-dir)",
    )
    run.add_argument(
        "--resume",
        default=None,
        metavar="DIR",
        help=(
            "continue the run checkpointed in DIR (its newest checkpoint), with the same env and flags; "
            "it goes on checkpointing there unless --checkpoint-dir says where"
        ),
    )


def _add_output_options(run: argparse.ArgumentParser) -> None:
    """What ``run`` prints: the progress bar or the live view, the summary's form, the diagnostics; the export."""
    run.add_argument("--no-progress", action="store_true", help="do not draw a progress bar")
    run.add_argument(
        "--top",
        action="store_true",
        help="show the live view of 'pycollect top' (each worker's rates, stragglers) instead of the progress bar",
    )
    run.add_argument(
        "--prometheus-port",
        type=_port,
        default=None,
        metavar="PORT",
        help="serve the collection's metrics to Prometheus on http://127.0.0.1:PORT/metrics while it runs",
    )
    run.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    run.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also say when each worker starts and ends ('pycollect: debug:' and 'info:' lines)",
    )


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def _port(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number from 1 to 65535, got {text!r}")
    return int(text)


def _add_top_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``pycollect top``."""
    top = commands.add_parser(
        "top",
        help="watch a running collection live: each worker's rates, latency, time split, stragglers",
        description=_TOP_DESCRIPTION,
        epilog=_TOP_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    top.add_argument(
        "target",
        nargs="?",
        default=None,
        metavar="PID_OR_NAME",
        help=(
            "the trainer's pid, or a word of the collection's description (its env, e.g. CartPole); "
            "default: your only running collection (with several: a list to choose from)"
        ),
    )
    top.add_argument(
        "--refresh", type=_seconds, default=1.0, metavar="S", help="seconds between two redraws (default 1)"
    )
    top.add_argument(
        "--window",
        type=_seconds,
        default=5.0,
        metavar="S",
        help="seconds the rates and percentiles are over (default 5)",
    )
    top.add_argument(
        "--once",
        action="store_true",
        help="measure for --refresh seconds, print one frame and exit (for scripts and logs)",
    )


def _add_plugins_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``pycollect plugins``."""
    plugins = commands.add_parser(
        "plugins",
        help="list what the installed plugins provide (env backends, schemes, engines, step backends...)",
        description=(
            "List every registered env backend, weight-sync scheme, device placement policy, engine, "
            "inference runner and step backend (what steps a vector env) with the plugin, distribution "
            "and version that provides it, built-ins included, "
            f"and installed plugins that were not loaded ({DISABLE_VARIABLE}, {LOAD_VARIABLE})."
        ),
    )
    plugins.add_argument("--json", action="store_true", help="print the list as one JSON object")


def _version() -> str:
    from pycollect import __version__

    return __version__


def _run(args: argparse.Namespace, started: float) -> int:
    """``pycollect run``; ``started`` is when the command started, as ``time.perf_counter()``."""
    from pycollect.config import CollectorConfig

    config = _run_config(args)
    if config is None:
        return 2
    if args.workers:
        from pycollect import prestart

        prestart()  # the fork server's imports overlap ours (tqdm, torch); a no-op if turned off
    if args.frames is None:  # the default is the command's choice: whole batches, nothing to warn about
        whole = math.ceil(DEFAULT_FRAMES / config.batch_frames) * config.batch_frames
        config = CollectorConfig.from_settings(config, total_frames=whole)
    collected = _collect(args, config, started)
    if isinstance(collected, int):
        return collected
    _print_summary(_summary(args, collected), as_json=args.json)
    return 130 if collected.interrupted else 0


def _run_config(args: argparse.Namespace) -> CollectorConfig | None:
    """The settings of ``run`` from its flags and ``--set``, checked; ``None``: refused, and said why.

    The Collector's own checks, before seconds of importing torch.
    """
    from pycollect.config import CollectorConfig

    if args.async_ and args.workers == 0:
        _say("error", "--async needs --workers N with N >= 1 (in-process collection has no async mode)")
        return None
    settings: dict[str, Any] = {
        "frames_per_batch": args.frames_per_batch,
        "total_frames": DEFAULT_FRAMES if args.frames is None else args.frames,
        "envs_per_worker": args.envs_per_worker,
        "num_workers": args.workers,
        "sync": not args.async_,
        "max_frames_per_traj": args.max_frames_per_traj,
        "seed": args.seed,
        "checkpoint_dir": args.checkpoint_dir or args.resume,
        "checkpoint_every": args.checkpoint_every,
    }
    for name, value in args.settings:
        if name in settings or name == "env_kwargs":
            flag = "--async" if name == "sync" else FLAGS[name]
            _say("error", f"--set {name}=...: use {flag} for {name}")
            return None
        settings[name] = value
    try:
        return CollectorConfig.from_settings(**settings)
    except PyCollectError as exc:
        _say("error", flag_names(str(exc)))
        return None


@dataclass(frozen=True)
class _Collected:
    """What the summary of ``run`` is made of."""

    collector: Collector
    first_frames: int  # frames of the first batch: start-up, not timed
    setup_s: float  # from the start of the command to the first batch
    elapsed: float  # from the first batch to the end
    interrupted: bool


def _collect(args: argparse.Namespace, config: CollectorConfig, started: float) -> _Collected | int:
    """Build the collector and run it to its end under a progress bar.

    Until the first batch the bar says what the time goes on: importing torch (seconds),
    building envs and starting workers. Returns what the summary needs, or the status of an
    error it has said: 2 (the collector refused its input), 1 (an error while collecting).
    """
    from tqdm import tqdm

    with tqdm(
        desc="importing torch",
        bar_format="{desc}...",
        unit="frames",
        unit_scale=True,
        disable=args.no_progress,
        file=sys.stderr,
        dynamic_ncols=True,
    ) as bar:
        from pycollect import Collector  # imports torch and tensordict

        bar.set_description_str(f"starting {args.workers} worker(s)" if args.workers else "building envs")
        try:
            collector = Collector(args.env, config=config, env_kwargs=dict(args.env_kwarg), resume=args.resume)
        except PyCollectError as exc:
            bar.leave = False
            bar.close()
            _say("error", flag_names(str(exc)))
            return 2
        with collector:
            # Whole batches of whole steps: what the collector really delivers.
            total = len(collector) * collector.frames_per_batch if collector.total_frames > 0 else None
            with contextlib.ExitStack() as stack:
                if args.prometheus_port is not None:
                    endpoint = _serve_prometheus(collector, args.prometheus_port, bar)
                    if endpoint is None:
                        return 2
                    stack.callback(endpoint.close)
                if args.top and _enter_top_view(stack, collector, total, bar):
                    return _timed(collector, tqdm(disable=True), started)  # the view instead of the bar
                bar.bar_format = None
                bar.set_description_str("", refresh=False)
                bar.reset(total=total)  # and redraw: a bar from here on
                return _timed(collector, bar, started)


def _serve_prometheus(collector: Collector, port: int, bar: Any) -> Any | None:
    """Serve ``collector``'s metrics on 127.0.0.1:``port``; ``None``: it cannot be, and was said why."""
    try:
        from pycollect.metrics import serve_prometheus  # type: ignore[attr-defined,unused-ignore]
    except ImportError as exc:
        bar.leave = False
        bar.close()
        _say("error", f"--prometheus-port: this pycollect cannot serve Prometheus metrics ({exc})")
        return None
    try:
        endpoint = serve_prometheus(collector, port=port)
    except (PyCollectError, OSError, ImportError) as exc:  # a port in use, prometheus-client missing
        bar.leave = False
        bar.close()
        _say("error", f"--prometheus-port {port}: {exc}")
        return None
    logging.getLogger("pycollect.cli").info("Prometheus metrics on http://127.0.0.1:%d/metrics", port)
    return endpoint


def _enter_top_view(stack: contextlib.ExitStack, collector: Collector, total: int | None, bar: Any) -> bool:
    """Show ``pycollect top``'s view of this process's collector (on stderr) until ``stack`` closes.

    Returns whether it is shown: a collection that cannot be watched keeps the progress bar, with a warning.
    """
    from rich.console import Console

    from pycollect.exceptions import AttachError
    from pycollect.metrics import attach
    from pycollect.metrics._top import live_view

    try:
        reader = attach(os.getpid())
    except AttachError as exc:
        _say("warning", f"--top: {exc}; showing the progress bar instead")
        return False
    bar.leave = False
    bar.close()

    def progress() -> str:
        if total is None:
            return f"{collector.frames:,} frames collected; Ctrl-C to stop"
        done = "" if collector.frames >= total else "; Ctrl-C to stop"
        return f"{collector.frames:,} of {total:,} frames collected{done}"

    stack.enter_context(live_view(reader, console=Console(stderr=True), note=progress))
    return True


def _timed(collector: Collector, bar: Any, started: float) -> _Collected | int:
    """Iterate ``collector`` to its end (or Ctrl-C), timing it, with ``bar`` showing its frames.

    Steady-state speed is timed from the first batch on; everything before it (the imports,
    the envs, the worker processes) is reported as start-up.
    """
    interrupted = False
    setup_s = 0.0
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
        _say("error", _one_line(exc))
        return 1
    if not first_frames:
        setup_s, started = time.perf_counter() - started, time.perf_counter()
    elapsed = time.perf_counter() - started
    return _Collected(collector, first_frames, setup_s, elapsed, interrupted)


def _summary(args: argparse.Namespace, collected: _Collected) -> dict[str, Any]:
    """What ``run`` reports (the keys of ``--json``), once the collector is closed."""
    collector, elapsed = collected.collector, collected.elapsed
    timed_frames = collector.frames - collected.first_frames
    return {
        "env": collector.env_source.describe(),
        "workers": args.workers,
        "mode": "in-process" if not args.workers else ("async" if args.async_ else "sync"),
        "restarts": collector.stats().restarts,
        "envs_per_worker": collector.envs_per_worker,
        "frames": collector.frames,
        "seconds": round(elapsed, 3),
        "frames_per_s": round(timed_frames / elapsed, 1) if elapsed > 0 and timed_frames else None,
        "setup_seconds": round(collected.setup_s, 3),
        "episodes": collector.episodes.count,
        "mean_return": round(collector.episodes.mean_return, 3) if collector.episodes.count else None,
        "interrupted": collected.interrupted,
    }


def _one_line(exc: PyCollectError) -> str:
    """An error while collecting, on one line: a crashed worker's traceback is on stderr already."""
    if isinstance(exc, WorkerCrashedError):
        from pycollect._workers.supervision import crash_summary

        return crash_summary(exc)
    return str(exc)


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


def _top(args: argparse.Namespace) -> int:
    """``pycollect top``: 0 when quit or the collection ended, 2 when it cannot be watched."""
    from pycollect.exceptions import AttachError
    from pycollect.metrics._top import run_top

    target = int(args.target) if args.target is not None and args.target.isdigit() else args.target
    try:
        run_top(target, refresh_s=args.refresh, window_s=args.window, once=args.once)
    except AttachError as exc:
        _say("error", str(exc))
        return 2
    return 0


_KIND_TITLES = {
    "env_backend": "env backend",
    "scheme": "weight-sync scheme",
    "device_policy": "device policy",
    "engine": "engine",
    "inference_runner": "inference runner",
    "step_backend": "step backend",
}
_KIND_KEYS = {
    "env_backend": "env_backends",
    "scheme": "schemes",
    "device_policy": "device_policies",
    "engine": "engines",
    "inference_runner": "inference_runners",
    "step_backend": "step_backends",
}


def _plugins(args: argparse.Namespace) -> int:
    from pycollect import plugins

    try:
        found, skipped = plugins.registrations(), plugins.skipped()
    except PyCollectError as exc:
        _say("error", str(exc))
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
    """Run the ``pycollect`` command; return its exit status.

    Run as the command (``argv`` None), its start-up is timed from the start of the process;
    called with ``argv``, from this call.
    """
    started = _process_started() if argv is None else time.perf_counter()
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    with _diagnostics(getattr(args, "verbose", False)):
        if args.command == "run":
            return _run(args, started)
        if args.command == "top":
            return _top(args)
        if args.command == "plugins":
            return _plugins(args)
    parser.error(f"unknown command {args.command!r}")
    return 2
