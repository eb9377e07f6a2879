"""A worker's state after each rollout, kept in the snapshot area of the rollout's slot.

With ``snapshots`` (``recovery="replay"``, a checkpoint with env states) a worker saves, after
each rollout and before it commits the slot, everything its next rollout depends on: every
env's state (through the env backend), the runner's observations, carried state, trajectory
ids and counters, the random actions' stream, torch's random stream, and its rollout count.
The slot's commit publishes it with the rollout, so:

- the trainer reads it with the rollout it pops: the state after the last rollout delivered
  of each worker, what a checkpoint saves;
- a restarted worker reads the one of the last slot its ring committed, restores it, and steps
  again the rollout its predecessor lost (the slot it was writing was never committed, so that
  area is never the one read).

Pickling the state costs about 10 µs per env (CartPole) to 60 µs (Pong), too much after
every rollout of a cheap env; so a worker pickles it at most every ``snapshot_every_s``
seconds and writes, with each rollout, the last one and how many rollouts it stepped since
(*replays*). Whoever restores it steps those again (their results are dropped: they were
delivered) to reach the state after the rollout; that costs at most ``snapshot_every_s`` of
stepping, and only on a restore.

An area holds a length word (little-endian u64, at its start), the replay count (the next
8 bytes) and, :data:`HEADER` bytes in, the pickled state. The length is cleared first and
written last, so a worker that dies while writing leaves an area that reads as empty, never
as a torn state.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from typing import Any

import numpy as np

from pycollect._native import _core
from pycollect.exceptions import EnvStateError

__all__ = [
    "FORMAT",
    "HEADER",
    "RESUMED",
    "load_snapshot",
    "pickle_state",
    "read_snapshot",
    "snapshot_capacity",
    "write_snapshot",
]

HEADER = _core.SNAPSHOT_HEADER
"""Bytes before a snapshot's own bytes in its area (the first 8 hold its length)."""
FORMAT = 1
"""The layout of a worker's state dict; a snapshot of another is refused."""
RESUMED = 1
"""Slot flag: the rollout continues, from a snapshot, the trajectories of a dead predecessor."""
_SLACK = 4
"""A snapshot area holds this many times the first snapshot's size (states grow: a deque fills)."""
_MIN_BYTES = 64 * 1024


def snapshot_capacity(probe_bytes: int, envs: int) -> int:
    """Bytes each snapshot area needs, from the state of one probe env (pickled) and the env count."""
    return max(_MIN_BYTES, _SLACK * (probe_bytes * envs + 16 * 1024))


def pickle_state(state: Mapping[str, Any]) -> bytes:
    """A worker's state dict, pickled with its format (what :func:`write_snapshot` writes)."""
    return pickle.dumps({"format": FORMAT, **state}, protocol=pickle.HIGHEST_PROTOCOL)


def write_snapshot(area: np.ndarray, data: bytes, replays: int, worker: int) -> None:
    """Write a pickled state and its replay count into ``area`` (a writable uint8 view of a slot's area).

    Raises:
        EnvStateError: The state does not fit the area, naming both sizes.
    """
    capacity = len(area) - HEADER
    if len(data) > capacity:
        raise EnvStateError(
            f"worker {worker}: the state after a rollout takes {len(data)} bytes, more than the {capacity} of a "
            "snapshot area (sized from the probe env's state): an env whose state grows this much cannot be "
            "snapshot; pass snapshots=False (and recovery='cut')"
        )
    words = area[:16].view(np.uint64)
    words[0] = 0  # a worker that dies below leaves an empty area
    area[HEADER : HEADER + len(data)] = np.frombuffer(data, np.uint8)
    words[1] = replays
    words[0] = len(data)


def read_snapshot(area: np.ndarray) -> tuple[bytes, int] | None:
    """The pickled state in ``area`` and its replay count, or ``None`` if the area is empty."""
    words = area[:16].view(np.uint64)
    size = int(words[0])
    if size == 0 or size > len(area) - HEADER:
        return None
    return area[HEADER : HEADER + size].tobytes(), int(words[1])


def load_snapshot(data: bytes, worker: int) -> dict[str, Any]:
    """Unpickle a worker's state, checking its format.

    Raises:
        EnvStateError: Not a worker state of this format.
    """
    try:
        state = pickle.loads(data)
    except Exception as exc:
        raise EnvStateError(f"worker {worker}: its snapshot cannot be read: {type(exc).__name__}: {exc}") from exc
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        found = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise EnvStateError(f"worker {worker}: a snapshot of format {found!r}, this pycollect reads format {FORMAT}")
    return state
