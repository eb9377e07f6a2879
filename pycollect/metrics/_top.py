"""``pycollect top``: a live terminal view of a running collection, built with ``rich``.

One frame is a header (the collection, its trainer, its policy) and a table with one row per
worker. :func:`render_metrics` makes a frame of one :class:`CollectionMetrics` (it needs no
terminal); :func:`run_top` watches a collection of another process and redraws the frame
every ``refresh_s`` seconds until Ctrl-C or the collection's end; :func:`live_view` shows a
collection of this process while the caller goes on (``pycollect run --top``).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from statistics import median

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.filesize import decimal
from rich.live import Live
from rich.measure import Measurement
from rich.prompt import Prompt
from rich.table import Table
from rich.text import Text

from pycollect.exceptions import AttachError
from pycollect.metrics._attach import CollectionInfo, _open_watch, attach, find_collections
from pycollect.metrics._reading import TRAINER_ONLY_MARK, CollectionMetrics, MetricsReader, WorkerMetrics

__all__ = ["format_duration", "format_rate", "live_view", "render_metrics", "run_top"]

MIN_WINDOW_S = 0.05
"""A reading over a shorter window has no rates worth showing yet ("measuring...")."""
HEARTBEAT_LATE_S = 5.0
"""A running worker whose last heartbeat is older than this is shown as late."""
_BAR_WIDTH = 10
# Each part of a worker's time has its glyph as well as its colour, so the bar reads without colour.
_SPLIT = (("█", "green"), ("▓", "blue"), ("░", "grey50"))
_POLL_S = 0.1  # how often a wait checks that the watched collection still runs


# -- formatting -------------------------------------------------------------------------------


def _three_figures(value: float) -> str:
    if value < 10:
        return f"{value:.2f}"
    if value < 100:
        return f"{value:.1f}"
    return f"{value:.0f}"


def format_duration(seconds: float | None) -> str:
    """A duration in µs, ms or s, with three significant figures (``"-"`` for None)."""
    if seconds is None:
        return "-"
    if seconds <= 0:
        return "0"
    if seconds < 1e-3:
        return f"{_three_figures(seconds * 1e6)}µs"
    if seconds < 1:
        return f"{_three_figures(seconds * 1e3)}ms"
    return f"{_three_figures(seconds)}s"


def format_rate(per_s: float) -> str:
    """A rate with at least three significant figures: ``12.3``, ``950``, ``12,346``, ``2,346k``."""
    if per_s <= 0:
        return "0"
    if per_s < 100:
        return f"{per_s:.1f}"
    if per_s < 1e6:
        return f"{per_s:,.0f}"
    return f"{per_s / 1e3:,.0f}k"


def _split(worker: WorkerMetrics, *, bar: bool) -> Text:
    """The worker's time split (env, policy, wait) as percentages, after a bar of it if ``bar``."""
    shares = (worker.env_share, worker.policy_share, worker.wait_share)
    text = Text()
    if bar:
        if sum(shares) > 0:
            cells = [round(share * _BAR_WIDTH) for share in shares]
            cells[0] = max(_BAR_WIDTH - cells[1] - cells[2], 0)  # rounding: the bar is always full width
            for count, (glyph, colour) in zip(cells, _SPLIT, strict=True):
                text.append(glyph * count, style=colour)
        text.append(" " * (_BAR_WIDTH - len(text)) + " ")
    text.append("/".join(f"{share * 100:.0f}" for share in shares) + "%")
    return text


# -- one frame --------------------------------------------------------------------------------


def _state(worker: WorkerMetrics, median_rate: float) -> tuple[str, str]:
    """The word for a worker's state, and its style: what is wrong is said, not only coloured."""
    if worker.state == "running":
        if worker.straggler:
            ratio = worker.frames_per_s / median_rate if median_rate > 0 else 0.0
            return f"straggler {ratio:.2f}x", "bold yellow"
        return "running", "green"
    if worker.state == "failed":
        return "FAILED", "bold red"
    if worker.state in ("empty", "starting") and worker.restarts > 0:
        return "restarting", "bold magenta"
    if worker.state == "empty":
        return "not started", "dim"
    return worker.state, "cyan"  # starting, exiting


def _header(metrics: CollectionMetrics) -> Table:
    trainer = metrics.trainer
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    grid.add_row(
        "pycollect top",
        Text.assemble(
            f"pid {metrics.pid}   rates over the last {metrics.window_s:.1f} s   ",
            (metrics.description or "(no description)", "bold"),
        ),
    )
    grid.add_row(
        "trainer",
        Text(
            f"{format_rate(trainer.frames_per_s)} frames/s   {format_rate(trainer.batches_per_s)} batches/s   "
            f"waiting for data {trainer.wait_share:.0%}   {trainer.frames:,} frames in {trainer.batches:,} batches"
        ),
    )
    each = f" ({decimal(trainer.last_publish_bytes)} each)" if trainer.publishes else ""
    dropped = Text(f"{trainer.frames_dropped:,} frames dropped", style="yellow" if trainer.frames_dropped else "")
    grid.add_row(
        "policy",
        Text.assemble(
            f"version {trainer.policy_version}   "
            f"lag mean {trainer.lag_mean:.2f} (last batch {trainer.lag_min} to {trainer.lag_max})   ",
            dropped,
            f"   {trainer.publishes:,} publishes, {decimal(trainer.publish_bytes)}{each}",
        ),
    )
    return grid


_DROPPED_WHEN_NARROW = ("version", "p50 step", "steps/s", "bar", "ring", "pid", "heartbeat", "restarts")
"""The worker table's columns left out, in this order, until the table fits the console."""


def _workers(metrics: CollectionMetrics, left_out: frozenset[str] = frozenset()) -> Table:
    """The worker table, without the columns named in ``left_out`` (``"bar"``: the split's bar)."""
    running = [w.frames_per_s for w in metrics.workers if w.state == "running"]
    median_rate = median(running) if running else 0.0
    bar = "bar" not in left_out
    legend = Text.assemble(*((glyph, colour) for glyph, colour in _SPLIT), " ") if bar else Text()
    columns: dict[str, tuple[str | Text, str, str]] = {  # header, justify, footer
        "worker": ("worker", "right", "all"),
        "state": ("state", "left", ""),
        "pid": ("pid", "right", ""),
        "restarts": ("restarts", "right", ""),
        "frames/s": ("frames/s", "right", format_rate(sum(w.frames_per_s for w in metrics.workers))),
        "steps/s": ("steps/s", "right", format_rate(sum(w.steps_per_s for w in metrics.workers))),
        "p50 step": ("p50 step", "right", ""),
        "p99 step": ("p99 step", "right", ""),
        "split": (legend + "env/policy/wait", "left", ""),
        "ring": ("ring", "right", ""),
        "heartbeat": ("heartbeat", "right", ""),
        "version": ("version", "right", ""),
    }
    shown = [name for name in columns if name not in left_out]
    table = Table(
        box=box.MINIMAL, show_footer=len(metrics.workers) > 1, header_style="bold", footer_style="bold", pad_edge=False
    )
    for name in shown:
        header, justify, footer = columns[name]
        table.add_column(header, justify=justify, footer=footer, no_wrap=True)  # type: ignore[arg-type]
    for worker in metrics.workers:
        word, style = _state(worker, median_rate)
        late = worker.state == "running" and (worker.heartbeat_age_s or 0.0) > HEARTBEAT_LATE_S
        cells: dict[str, str | Text] = {
            "worker": str(worker.worker),
            "state": Text(word, style=style),
            "pid": str(worker.pid) if worker.pid else "-",
            "restarts": Text(str(worker.restarts), style="magenta" if worker.restarts else ""),
            "frames/s": format_rate(worker.frames_per_s),
            "steps/s": format_rate(worker.steps_per_s),
            "p50 step": format_duration(worker.step_p50_s),
            "p99 step": format_duration(worker.step_p99_s),
            "split": _split(worker, bar=bar),
            "ring": f"{worker.ring_filled}/{worker.ring_slots}",
            "heartbeat": Text(
                format_duration(worker.heartbeat_age_s) + (" late" if late else ""), style="bold red" if late else ""
            ),
            "version": str(worker.policy_version),
        }
        row_style = None if style in ("green", "cyan", "dim") else style.removeprefix("bold ")
        table.add_row(*(cells[name] for name in shown), style=row_style)
    return table


class _WorkerTable:
    """The worker table with as many columns as the console's width holds."""

    def __init__(self, metrics: CollectionMetrics) -> None:
        self.metrics = metrics

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        left_out: frozenset[str] = frozenset()
        table = _workers(self.metrics)
        unbounded = options.update(max_width=10_000)
        for name in _DROPPED_WHEN_NARROW:
            if Measurement.get(console, unbounded, table).maximum <= options.max_width:
                break
            left_out |= {name}
            table = _workers(self.metrics, left_out)
        yield table


def render_metrics(metrics: CollectionMetrics, *, note: str | None = None) -> RenderableType:
    """One frame of ``pycollect top``: the header, a row per worker and ``note`` under them.

    Stragglers (``straggler`` and their rate as a fraction of the median worker's), workers
    restarting (``restarting``), failed (``FAILED``) and late heartbeats (``late``) are said in
    words as well as in colour.
    """
    parts: list[RenderableType] = [_header(metrics)]
    if metrics.window_s < MIN_WINDOW_S:
        parts.append(Text("measuring the rates...", style="dim"))
    elif not metrics.workers:
        parts.append(Text("no worker processes: the envs step in the trainer", style="dim"))
    else:
        parts.append(_WorkerTable(metrics))
    if note:
        parts.append(Text(note, style="dim"))
    return Group(*parts)


# -- watching a collection of another process -------------------------------------------------


class _Liveness:
    """Whether the watched collection still runs: its trainer still holds the same segment."""

    def __init__(self, pid: int, fd: int | None) -> None:
        self.pid = pid
        self._path = Path(f"/proc/{pid}/fd/{fd}")
        self._inode = None if fd is None else self._read_inode()  # None: found ended already

    def _read_inode(self) -> int | None:
        try:
            return os.stat(self._path).st_ino
        except OSError:
            return None  # the trainer is gone (or a zombie, whose fds are closed)

    def alive(self) -> bool:
        """The trainer process runs and holds the segment it held when the watch began."""
        return self._inode is not None and self._read_inode() == self._inode

    def wait(self, seconds: float) -> bool:
        """Wait ``seconds``, or less if the collection ends meanwhile; whether it still runs."""
        deadline = time.monotonic() + seconds
        while self.alive():
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            time.sleep(min(left, _POLL_S))
        return False


def _choose(infos: list[CollectionInfo], console: Console, interactive: bool) -> CollectionInfo:
    """The collection to watch when none was named: the only one, or one the user picks."""
    if not infos:
        raise AttachError(
            "no pycollect collection of yours is running on this machine "
            "(start one, e.g. 'pycollect run --workers 4 --frames -1', then run 'pycollect top')"
        )
    if len(infos) == 1:
        return infos[0]
    listing = Table(box=box.SIMPLE, title="running collections")
    for column in ("#", "pid", "workers", "description"):
        listing.add_column(column, justify="right" if column != "description" else "left")
    for number, info in enumerate(infos, 1):
        listing.add_row(str(number), str(info.pid), str(info.workers), Text(info.description))
    console.print(listing)
    if not interactive:
        raise AttachError(
            f"{len(infos)} collections of yours are running: name one, "
            "'pycollect top PID' or 'pycollect top WORD' (a word of its description)"
        )
    numbers = [str(number) for number in range(1, len(infos) + 1)]
    return infos[int(Prompt.ask("watch which one (#)", choices=numbers, console=console)) - 1]


def _open(target: int | str | CollectionInfo, window_s: float) -> tuple[MetricsReader, _Liveness]:
    """A reader of ``target``'s counters, and what tells whether it still runs."""
    if isinstance(target, CollectionInfo):
        watch = _open_watch(target.pid, target.fd)
        if watch is None:
            raise AttachError(f"the collection of pid {target.pid} ended")
        return MetricsReader(watch, workers=target.workers, window_s=window_s), _Liveness(target.pid, target.fd)
    reader = attach(target, window_s=window_s)
    pid = int(reader.watch.creator_pid)
    description = reader.watch.description().removeprefix(TRAINER_ONLY_MARK)
    fds = [info.fd for info in find_collections() if info.pid == pid and info.description == description]
    return reader, _Liveness(pid, fds[0] if fds else None)


def _console() -> Console:
    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = max(console.width, 132)  # a script's output: a whole row on one line
    return console


def run_top(
    target: int | str | CollectionInfo | None = None,
    *,
    refresh_s: float = 1.0,
    window_s: float = 5.0,
    once: bool = False,
    console: Console | None = None,
) -> None:
    """Watch a running collection of yours, redrawing its frame until Ctrl-C or its end.

    Watching is read-only: it neither stops, slows nor changes the collection.

    Args:
        target: The trainer's pid, a word of the collection's description, a collection
            :func:`find_collections` found, or ``None``: the only collection of yours running
            (with several, a list to choose from where the console is a terminal).
        refresh_s: Seconds between two frames.
        window_s: Seconds the rates and percentiles are over.
        once: Measure for ``refresh_s``, print one frame and return (for scripts).
        console: Where to draw (default: stdout).

    Raises:
        AttachError: No such process, another user's, no collection in it, none matching,
            more than one matching; with ``target=None``: none running, or several where
            none can be chosen.
    """
    if not refresh_s > 0 or not window_s > 0:
        raise ValueError(f"refresh_s and window_s must be > 0, got {refresh_s!r} and {window_s!r}")
    console = _console() if console is None else console
    if target is None:
        interactive = not once and console.is_terminal and sys.stdin.isatty()
        target = _choose(find_collections(), console, interactive)
    reader, liveness = _open(target, window_s)
    ended = f"pycollect top: the collection of pid {liveness.pid} ended"
    if once:
        running = liveness.wait(refresh_s)
        console.print(render_metrics(reader.read(), note=None if running else ended))
        return
    try:
        with Live(
            Text(f"pycollect top: watching pid {liveness.pid}...", style="dim"), console=console, auto_refresh=False
        ) as live:
            running = True
            while running:
                running = liveness.wait(refresh_s)
                note = "Ctrl-C to quit" if running else None
                live.update(render_metrics(reader.read(), note=note), refresh=True)
    except KeyboardInterrupt:
        return
    console.print(ended)


@contextlib.contextmanager
def live_view(
    reader: MetricsReader,
    *,
    refresh_s: float = 1.0,
    console: Console | None = None,
    note: Callable[[], str] | None = None,
) -> Iterator[None]:
    """Show ``reader``'s collection live while the ``with`` block runs (redrawn in a thread).

    What the block prints meanwhile appears above the view; the last frame stays on the
    console after the block.

    Args:
        reader: The collection's counters (one of this process: ``attach(os.getpid())``).
        refresh_s: Seconds between two frames.
        console: Where to draw (default: stdout).
        note: Called for each frame; its text is shown under the table (e.g. progress).
    """

    def frame() -> RenderableType:
        return render_metrics(reader.read(), note=note() if note is not None else None)

    with Live(get_renderable=frame, console=console, refresh_per_second=1 / refresh_s):
        yield
