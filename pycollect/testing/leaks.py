"""Finding processes and shared-memory segments a test left behind (Linux ``/proc``, no psutil).

A collector that shuts down reaps every worker and unmaps its segment. These helpers let a
test (or the ``pycollect_no_leftovers`` fixture of the pytest plugin) check that: take a
:func:`snapshot` before, and :func:`leftovers` after, which waits a little for processes that
are already exiting. Besides processes and named segments, they find the segments this process
still maps: once the garbage collector has run, one left mapped means that something the test
made still refers to it (an owner that did not let go of it at ``close()``, or a cycle that
kept an open one alive).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Leftovers", "Snapshot", "child_processes", "leftovers", "segment_mappings", "shm_segments", "snapshot"]

# Interpreter-wide helpers that multiprocessing starts once and keeps for the whole session
# (torchrl's replay buffers start the resource tracker); they are not a test's leftovers.
_SESSION_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")
# pycollect's own fork server lives as long as the trainer that started it (it exits with it).
# It is told apart by its process name, not its command line: the workers it forks share its
# command line but rename themselves at once (``pycollect-wkr``), so they are still found.
_SESSION_COMMS = ("pycollect-fsrv",)


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process, or None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # the command name may contain spaces
    return fields[0], int(fields[1])


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _session_helper(pid: int) -> bool:
    return _comm(pid) in _SESSION_COMMS or any(helper in _cmdline(pid) for helper in _SESSION_HELPERS)


def child_processes(pid: int | None = None) -> set[int]:
    """Live descendants of ``pid`` (default: this process), zombies and session helpers excluded.

    Session helpers are multiprocessing's resource tracker and fork server, and pycollect's
    fork server (workers it forked are children of the trainer, and are included).
    """
    root = os.getpid() if pid is None else pid
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(int(entry))) is not None and stat[0] != "Z":
            parents[int(entry)] = stat[1]
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return {child for child in found if not _session_helper(child)}


def shm_segments(pid: int | None = None) -> set[str]:
    """Named pycollect segments in ``/dev/shm`` created by ``pid`` (default: this process).

    pycollect names its fallback segments ``pycollect-<pid>-...`` (memfd segments have no
    name and cannot be left behind); filtering by pid keeps the check right when tests run
    in parallel processes.
    """
    prefix = f"pycollect-{os.getpid() if pid is None else pid}-"
    try:
        return {name for name in os.listdir("/dev/shm") if name.startswith(prefix)}
    except FileNotFoundError:
        return set()


def segment_mappings() -> set[str]:
    """This process's mappings of pycollect segments (memfd or ``/dev/shm``), as ``/proc/self/maps`` lines.

    A line names the mapping's address range and file, so two mappings of one segment, or a
    segment mapped again at another address, are told apart.
    """
    lines = Path("/proc/self/maps").read_text().splitlines()
    return {line for line in lines if "memfd:pycollect" in line or ("/dev/shm/" in line and "pycollect" in line)}


@dataclass(frozen=True)
class Snapshot:
    """The processes, segments and this process's segment mappings that existed at one moment."""

    processes: frozenset[int]
    segments: frozenset[str]
    mappings: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Leftovers:
    """What appeared after a :class:`Snapshot` and did not go away."""

    processes: frozenset[int]
    segments: frozenset[str]
    commands: Mapping[int, str] = field(default_factory=dict)
    """The command line of each process, read when it was found (a killed one has none)."""
    mappings: frozenset[str] = frozenset()
    """Segments this process still maps after a garbage collection (``/proc/self/maps`` lines)."""

    def __bool__(self) -> bool:
        return bool(self.processes or self.segments or self.mappings)

    def describe(self) -> str:
        """One line per leftover: each process with its command line, each segment, each mapping."""
        lines = [f"process {pid}: {self.commands.get(pid) or _cmdline(pid) or '?'}" for pid in sorted(self.processes)]
        lines += [f"shared-memory segment /dev/shm/{name}" for name in sorted(self.segments)]
        lines += [
            f"a segment this process still maps (something still refers to its owner or a view of it): {line}"
            for line in sorted(self.mappings)
        ]
        return "\n".join(lines)


def snapshot() -> Snapshot:
    """The child processes, pycollect segments and segment mappings of this process, now."""
    return Snapshot(frozenset(child_processes()), frozenset(shm_segments()), frozenset(segment_mappings()))


def leftovers(before: Snapshot, *, timeout_s: float = 5.0, kill: bool = True) -> Leftovers:
    """What appeared since ``before`` and is still there after up to ``timeout_s``.

    Processes that are exiting get until the deadline; what remains is reported (and, with
    ``kill``, killed, so that one leaking test does not break the ones after it).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        found = Leftovers(frozenset(child_processes() - before.processes), frozenset(shm_segments() - before.segments))
        if not found or time.monotonic() > deadline:
            break
        time.sleep(0.05)  # polling for processes that are still exiting, under the deadline
    mappings = segment_mappings() - before.mappings
    if mappings:  # waiting does not release a mapping; collecting may (an owner in a reference cycle)
        gc.collect()
        mappings = segment_mappings() - before.mappings
    # Read before any kill: the command line of a killed process is gone.
    found = dataclasses.replace(
        found, commands={pid: _cmdline(pid) for pid in found.processes}, mappings=frozenset(mappings)
    )
    if kill:
        for pid in found.processes:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    return found
