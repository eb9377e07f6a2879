"""Finding the collections running on this machine, and watching one from another process.

A collection's counters live in its shared-memory segment, a memfd that its trainer holds
open (``/memfd:pycollect`` in ``/proc/<pid>/fd``; a named ``/dev/shm/pycollect-...`` segment
where memfd is unavailable). Watching opens that file read-only through ``/proc`` and maps
only its control part, read-only: nothing the watcher does reaches the collection. Only the
user's own collections are watched, also for root.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pycollect._native import _core
from pycollect.exceptions import AttachError, PyCollectError
from pycollect.metrics._reading import TRAINER_ONLY_MARK, MetricsReader

__all__ = ["CollectionInfo", "attach", "find_collections"]

_PROC = Path("/proc")
_SEGMENT_LINKS = ("/memfd:pycollect", "/dev/shm/pycollect-")


@dataclass(frozen=True)
class CollectionInfo:
    """A collection found running.

    Attributes:
        pid: Its trainer's process id.
        description: What it is (env, engine, workers), as its trainer set it.
        workers: Its worker count.
        fd: The trainer's fd of its segment (in ``/proc/<pid>/fd``).
    """

    pid: int
    description: str
    workers: int
    fd: int


def _owner(pid: int) -> int:
    try:
        return (_PROC / str(pid)).stat().st_uid
    except FileNotFoundError:
        raise AttachError(f"no process has pid {pid}") from None


def _command(pid: int) -> str:
    try:
        raw = (_PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip() or "?"


def _open_watch(pid: int, fd: int) -> _core.Watch | None:
    """A watch on ``pid``'s fd ``fd`` if it is a ready segment that ``pid`` made, else None."""
    try:
        own = os.open(_PROC / str(pid) / "fd" / str(fd), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None  # closed meanwhile
    try:
        watch = _core.Watch.open(own)
    except PyCollectError:
        return None  # not ready yet, or another build's
    finally:
        os.close(own)
    # A worker holds its collector's segment too: only the trainer's counts as the collection.
    return watch if watch.creator_pid == pid else None


def _collections_of(pid: int) -> list[tuple[CollectionInfo, _core.Watch]]:
    if _owner(pid) != os.getuid():
        raise AttachError(
            f"pid {pid} ({_command(pid)}) belongs to user id {_owner(pid)}, not to you ({os.getuid()}): "
            "only your own collections can be watched"
        )
    fd_dir = _PROC / str(pid) / "fd"
    try:
        entries = list(os.scandir(fd_dir))
    except FileNotFoundError:
        raise AttachError(f"no process has pid {pid}") from None
    except PermissionError:
        raise AttachError(f"pid {pid} ({_command(pid)}): its open files cannot be read") from None
    found = []
    seen = set()  # a segment held on several fds (a watch of its own collection's) is one collection
    for entry in sorted(entries, key=lambda e: int(e.name)):
        try:
            target = os.readlink(entry.path)
            inode = os.stat(entry.path).st_ino if target.startswith(_SEGMENT_LINKS) else None
        except OSError:
            continue
        if inode is None or inode in seen:
            continue
        seen.add(inode)
        watch = _open_watch(pid, int(entry.name))
        if watch is not None:
            description = watch.description().removeprefix(TRAINER_ONLY_MARK)
            info = CollectionInfo(pid, description, _workers_of(watch), int(entry.name))
            found.append((info, watch))
    return found


def _workers_of(watch: _core.Watch) -> int:
    """The real workers: a segment the trainer made only for its counters says it has none."""
    return 0 if watch.description().startswith(TRAINER_ONLY_MARK) else int(watch.n_workers)


def find_collections() -> list[CollectionInfo]:
    """Every collection of yours running on this machine, by pid."""
    found: list[CollectionInfo] = []
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != os.getuid():
                continue
            found.extend(info for info, _ in _collections_of(int(entry.name)))
        except (AttachError, OSError):
            continue  # gone meanwhile
    return sorted(found, key=lambda info: (info.pid, info.fd))


def attach(target: int | str, *, window_s: float = 5.0) -> MetricsReader:
    """Watch a running collection of yours: its pid, or a word of its description.

    Args:
        target: The trainer's pid, or text its description contains (``"CartPole"``).
        window_s: Seconds the reader's rates and percentiles are over.

    Returns:
        A reader whose :meth:`~MetricsReader.read` gives the collection's figures now.

    Raises:
        AttachError: No such process, another user's, no collection in it, no collection
            matching the text, or more than one (each named).
    """
    found: list[tuple[CollectionInfo, _core.Watch | None]]
    if isinstance(target, int) or (isinstance(target, str) and target.isdigit()):
        pid = int(target)
        found = list(_collections_of(pid))
        if not found:
            raise AttachError(f"pid {pid} ({_command(pid)}) runs no pycollect collection")
    else:
        found = [(info, None) for info in find_collections() if str(target).lower() in info.description.lower()]
        if not found:
            raise AttachError(f"no running collection of yours matches {target!r}")
    if len(found) > 1:
        listed = "; ".join(f"pid {info.pid}: {info.description}" for info, _ in found)
        raise AttachError(f"{target!r} matches {len(found)} collections ({listed}); name one by its description")
    info, watch = found[0]
    if watch is None:
        watch = _open_watch(info.pid, info.fd)
        if watch is None:
            raise AttachError(f"the collection of pid {info.pid} ended")
    return MetricsReader(watch, workers=info.workers, window_s=window_s)
