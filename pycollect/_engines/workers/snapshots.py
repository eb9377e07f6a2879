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

An area holds a length word (little-endian u64, at its start) and, :data:`HEADER` bytes in,
the pickled state. The length is cleared first and written last, so a worker that dies while
writing leaves an area that reads as empty, never as a torn state.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from typing import Any

import numpy as np

from pycollect._native import _core
from pycollect.exceptions import EnvStateError

__all__ = ["FORMAT", "HEADER", "RESUMED", "load_snapshot", "read_snapshot", "snapshot_capacity", "write_snapshot"]

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


def write_snapshot(area: np.ndarray, state: Mapping[str, Any], worker: int) -> None:
    """Pickle ``state`` into ``area`` (a writable uint8 view of a slot's snapshot area).

    Raises:
        EnvStateError: The state does not fit the area, naming both sizes.
    """
    data = pickle.dumps({"format": FORMAT, **state}, protocol=pickle.HIGHEST_PROTOCOL)
    capacity = len(area) - HEADER
    if len(data) > capacity:
        raise EnvStateError(
            f"worker {worker}: the state after a rollout takes {len(data)} bytes, more than the {capacity} of a "
            "snapshot area (sized from the probe env's state): an env whose state grows this much cannot be "
            "snapshot; pass snapshots=False (and recovery='cut')"
        )
    lengths = area[:8].view(np.uint64)
    lengths[0] = 0  # a worker that dies below leaves an empty area
    area[HEADER : HEADER + len(data)] = np.frombuffer(data, np.uint8)
    lengths[0] = len(data)


def read_snapshot(area: np.ndarray) -> bytes | None:
    """The pickled state in ``area`` (a uint8 view of a slot's snapshot area), or ``None`` if empty."""
    size = int(area[:8].view(np.uint64)[0])
    if size == 0 or size > len(area) - HEADER:
        return None
    return area[HEADER : HEADER + size].tobytes()


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
