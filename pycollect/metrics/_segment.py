"""A segment that holds only control blocks: the counters of a collection that has no other.

Collections whose workers are processes keep their counters in the segment the workers already
share. One that steps its envs in the trainer (``engine="inprocess"``, ``"device"``) or
elsewhere (a plugin's engine) gets this small segment instead, so its ``stats()``, a
Prometheus scrape and ``pycollect top`` read it the same way.
"""

from __future__ import annotations

from typing import Any

from pycollect._native import _core
from pycollect.metrics._attach import TRAINER_ONLY_MARK

__all__ = ["counters_segment"]

# A layout needs one field; this one byte per env is never written.
_UNUSED_FIELD = ("unused", "uint8", ())


def counters_segment(description: str, *, envs: int = 1, in_trainer: bool = True) -> Any:
    """A segment with one worker control block, for the envs stepping in this process.

    Args:
        description: What the collection is (``pycollect top``'s title).
        envs: The envs that step in the trainer (frames per step).
        in_trainer: Whether envs step in this process; ``False``: the segment holds only the
            trainer's counters (its worker block is unused, and readers show no worker).
    """
    segment = _core.Segment.create(
        [_UNUSED_FIELD],
        n_workers=1,
        envs_per_worker=max(envs, 1),
        steps=1,
        slots_per_worker=1,
        weights_capacity=0,
        weights_buffers=3,
        backing="auto",
    )
    segment.describe(description if in_trainer else TRAINER_ONLY_MARK + description)
    return segment
