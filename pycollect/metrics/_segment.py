"""Counting for the trainer, and a segment for the counters of a collection that has no other.

Collections whose workers are processes keep their counters in the segment the workers already
share. One that steps its envs in the trainer (``engine="inprocess"``) or elsewhere (the
``device`` engine, a plugin's engine) gets a small segment of control blocks instead, so its
``stats()``, a Prometheus scrape and ``pycollect top`` read it the same way.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pycollect._native import _core
from pycollect.metrics._reading import TRAINER_ONLY_MARK, CollectionMetrics, MetricsReader

__all__ = ["StepCounter", "TrainerCounter", "counters_segment"]

# A layout needs one field; this one byte per env is never written.
_UNUSED_FIELD = ("unused", "uint8", ())


def counters_segment(envs: int = 1) -> Any:
    """A segment with one worker control block, for the envs stepping in this process.

    Args:
        envs: The envs that step in the trainer (frames per step).
    """
    return _core.Segment.create(
        [_UNUSED_FIELD],
        n_workers=1,
        envs_per_worker=max(envs, 1),
        steps=1,
        slots_per_worker=1,
        weights_capacity=0,
        weights_buffers=3,
        backing="auto",
    )


class TrainerCounter:
    """What the trainer counts: batches, its waits for them, weight publishes, policy lag.

    Args:
        segment: The segment to count into: the engine's (``Engine.counters()``), whose worker
            blocks are its workers'; ``None``: a segment of its own, for the trainer's counts
            alone.
        description: What the collection is (``pycollect top``'s title).
        window_s: Seconds :meth:`read`'s rates and percentiles are over.
    """

    def __init__(self, segment: Any | None, description: str, window_s: float = 10.0) -> None:
        own = segment is None
        counting = counters_segment() if segment is None else segment
        counting.describe(TRAINER_ONLY_MARK + description if own else description)
        self.segment: Any = counting  # None once closed
        self._reader: MetricsReader | None = MetricsReader(
            counting.watch(), workers=0 if own else None, window_s=window_s
        )
        self._last: CollectionMetrics | None = None

    def batch(self, frames: int, wait_ns: int, versions: Any, latest: int, dropped: int = 0) -> None:
        """A batch of ``frames`` frames was delivered after ``wait_ns`` of waiting.

        ``versions``: the policy version of each of its frames (an array), or ``None``.
        """
        if versions is None or latest == 0:  # nothing published yet: no frame lags (no pass over them)
            self.segment.count_batch(frames, wait_ns, 0, 0, 0, dropped)
            return
        # A frame stamped with a version not yet published (a broken scheme's) counts as no lag.
        lag = np.maximum(latest - np.asarray(versions), 0)
        low, high = (int(lag.min()), int(lag.max())) if lag.size else (0, 0)
        self.segment.count_batch(frames, wait_ns, int(lag.sum()), low, high, dropped)

    def steps(self, steps: int, frames: int) -> None:
        """A vector env's trainer took ``steps`` steps (its batches), ``frames`` frames in all."""
        self.segment.count_steps(steps, frames)

    def publish(self, version: int, nbytes: int, ns: int) -> None:
        """The weights of ``version`` (``nbytes``) were published in ``ns`` nanoseconds."""
        self.segment.count_publish(version, nbytes, ns)

    def read(self) -> CollectionMetrics | None:
        """The figures now (after :meth:`close`: the last ones read)."""
        if self._reader is not None:
            self._last = self._reader.read()
        return self._last

    def close(self) -> None:
        """Read once more, then let go of the segment (the engine's may be large)."""
        if self._reader is not None:
            self.read()
            self._reader = None
            self.segment = None


class StepCounter:
    """A vector env's counting: its steps are its trainer's batches.

    Steps are added to the counters every ``every`` steps (each addition is a native call,
    which a vector env's step should not pay every time) and when read.

    Args:
        segment: The step backend's segment (``StepBackend.counters()``), or ``None``.
        description: What the vector env is (``pycollect top``'s title).
        num_envs: Frames one step makes.
        every: Steps between two additions.
    """

    def __init__(self, segment: Any | None, description: str, num_envs: int, every: int = 64) -> None:
        self._counter = TrainerCounter(segment, description)
        self._num_envs = num_envs
        self._every = every
        self._uncounted = 0

    def step(self) -> None:
        """One step was taken."""
        self._uncounted += 1
        if self._uncounted >= self._every:
            self._add()

    def _add(self) -> None:
        if self._uncounted and self._counter.segment is not None:
            self._counter.steps(self._uncounted, self._uncounted * self._num_envs)
        self._uncounted = 0

    def read(self) -> CollectionMetrics | None:
        """The figures now (after :meth:`close`: the last ones read)."""
        self._add()
        return self._counter.read()

    def close(self) -> None:
        """Count what is left, read once more and let go of the segment."""
        self._add()
        self._counter.close()
