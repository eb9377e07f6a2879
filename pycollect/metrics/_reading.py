"""Turning readings of the counters into figures: rates, time splits, percentiles, stragglers.

The workers and the trainer only add to totals (see ``rust/pycollect-core/src/metrics.rs``);
a :class:`MetricsReader` keeps the readings of the last ``window_s`` seconds and reports the
differences between the newest and the oldest of them, so every rate and percentile is over
that window, whoever reads and however often. A running worker's totals are read one word
after another while it steps, so two of them may be a step apart (frames a step ahead of
steps); rates over a window are unaffected.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pycollect._native import _core

__all__ = ["CollectionMetrics", "MetricsReader", "TrainerMetrics", "WorkerMetrics"]

_NS = 1e-9
_LATENCY_BOUNDS = np.array(_core.latency_buckets(), dtype=np.float64)
# A bucket read as its middle: within 6 % of any latency it holds.
_LATENCY_MIDDLES = _LATENCY_BOUNDS.mean(axis=1) * _NS
TRAINER_ONLY_MARK = "[trainer] "
"""How the description of a segment that holds only the trainer's counters begins."""
STRAGGLER_FRACTION = 0.5
"""A running worker stepping at less than this fraction of the median worker's rate is a straggler."""


@dataclass(frozen=True)
class WorkerMetrics:
    """One worker, as its counters say (rates, splits and percentiles over the reader's window).

    Attributes:
        worker: Its index.
        state: ``"running"``, ``"starting"``, ``"empty"`` (between a crash and its restart, or
            not started), ``"exiting"`` or ``"failed"``.
        pid: Its process id, if one runs.
        generation: The generation running (1 until its first restart).
        restarts: How often it was restarted (``generation - 1``).
        restarts_replayed: Restarts after which the new process restored its predecessor's
            state and stepped the lost rollout again (``recovery="replay"``): nothing lost.
        restarts_cut: Restarts after which it started afresh, its envs' trajectories cut (the
            default ``recovery="cut"``, or a replay that could not restore).
        steps: Steps taken so far (one step moves every env of the worker once).
        frames: Frames made so far (env steps of all its envs).
        rollouts: Rollouts handed over so far (0 for a vector env's workers, which serve steps).
        env_time_s: Seconds spent stepping the envs (and storing what they returned).
        policy_time_s: Seconds spent in the policy (0 where the policy runs in the trainer).
        wait_time_s: Seconds between steps: waiting for a free ring slot, new weights, or the
            trainer's next request.
        policy_version: The version of the weights it applied last (0: those it started with).
        weight_updates: How many times it applied new weights.
        frames_per_s: Frames per second over the window.
        steps_per_s: Steps per second over the window.
        step_p50_s: Median step latency (policy and envs) over the window; None without steps.
        step_p99_s: 99th percentile of the step latency over the window; None without steps.
        env_share: Share of the window's time spent stepping envs (0 to 1).
        policy_share: Share spent in the policy.
        wait_share: Share spent waiting.
        heartbeat_age_s: Seconds since its last heartbeat; None before the first.
        ring_filled: Rollouts it handed over that the trainer has not taken yet.
        ring_slots: Slots of its ring.
        straggler: Running, and stepping at under half the median worker's rate.
    """

    worker: int
    state: str
    pid: int | None
    generation: int
    restarts: int
    steps: int
    frames: int
    rollouts: int
    env_time_s: float
    policy_time_s: float
    wait_time_s: float
    policy_version: int
    weight_updates: int
    frames_per_s: float
    steps_per_s: float
    step_p50_s: float | None
    step_p99_s: float | None
    env_share: float
    policy_share: float
    wait_share: float
    heartbeat_age_s: float | None
    ring_filled: int
    ring_slots: int
    straggler: bool
    restarts_replayed: int = 0
    restarts_cut: int = 0


@dataclass(frozen=True)
class TrainerMetrics:
    """The trainer, as its counters say (rates over the reader's window).

    Attributes:
        batches: Batches delivered so far.
        frames: Frames delivered so far.
        batches_per_s: Batches per second over the window.
        frames_per_s: Frames per second over the window.
        wait_time_s: Seconds the trainer spent waiting for data so far.
        wait_share: Share of the window's time it spent waiting for data.
        publishes: Weight publishes so far.
        publish_time_s: Seconds spent publishing weights so far.
        publish_bytes: Bytes of weights published so far.
        last_publish_bytes: Bytes of one publish (the last), 0 before the first.
        policy_version: The version last published.
        policy_time_s: Seconds spent in the policy in the trainer (the central engine's).
        lag_mean: Mean policy lag of the frames delivered over the window: how many versions
            older than the latest published the weights that made them were.
        lag_min: The smallest lag of a frame of the last batch.
        lag_max: The largest lag of a frame of the last batch.
        frames_dropped: Frames left out of batches for a lag over ``max_policy_lag``.
    """

    batches: int
    frames: int
    batches_per_s: float
    frames_per_s: float
    wait_time_s: float
    wait_share: float
    publishes: int
    publish_time_s: float
    publish_bytes: int
    last_publish_bytes: int
    policy_version: int
    policy_time_s: float
    lag_mean: float
    lag_min: int
    lag_max: int
    frames_dropped: int


@dataclass(frozen=True)
class CollectionMetrics:
    """A collection's metrics at one moment.

    Attributes:
        pid: The trainer's process id.
        description: What the collection is (env, engine, workers), as its trainer set it.
        window_s: The seconds the rates and percentiles are over (less early in a run).
        trainer: The trainer's figures.
        workers: Each local worker's, by index (empty without worker processes).
    """

    pid: int
    description: str
    window_s: float
    trainer: TrainerMetrics
    workers: tuple[WorkerMetrics, ...]

    @property
    def stragglers(self) -> tuple[int, ...]:
        """The workers marked as stragglers."""
        return tuple(w.worker for w in self.workers if w.straggler)


@dataclass(frozen=True)
class _Reading:
    """Raw counters at one moment."""

    time_ns: int
    trainer: dict[str, int]
    workers: tuple[dict[str, int], ...]
    latency: tuple[np.ndarray, ...]
    states: tuple[tuple[str, int, int, int, int], ...]


class MetricsReader:
    """Reads a collection's counters through a ``_core.Watch`` and reports them over a window.

    Args:
        watch: The collection's ``_core.Watch`` (its own segment's, or another process's).
        workers: How many of the segment's worker blocks are real workers (0 for a collection
            whose segment only holds the trainer's metrics).
        window_s: Seconds the rates and percentiles are over.
    """

    def __init__(self, watch: Any, workers: int | None = None, window_s: float = 10.0) -> None:
        if not window_s > 0:
            raise ValueError(f"window_s must be > 0, got {window_s!r}")
        self.watch = watch
        self.workers = watch.n_workers if workers is None else workers
        self.window_s = window_s
        self._readings: deque[_Reading] = deque([self._read()])
        self._lock = threading.Lock()  # a Prometheus scrape reads from its server's thread

    def _read(self) -> _Reading:
        watch = self.watch
        per_worker = [watch.worker_totals(w) for w in range(self.workers)]
        return _Reading(
            time_ns=_core.monotonic_time_ns(),
            trainer=dict(zip(_core.TRAINER_TOTALS, watch.trainer_totals(), strict=True)),
            workers=tuple(dict(zip(_core.WORKER_TOTALS, totals, strict=True)) for totals, _ in per_worker),
            latency=tuple(np.asarray(latency, dtype=np.int64) for _, latency in per_worker),
            states=tuple(watch.worker_state(w) for w in range(self.workers)),
        )

    def read(self) -> CollectionMetrics:
        """Read the counters now; figures over the window that ends now (safe from several threads)."""
        with self._lock:
            return self._read_locked()

    def _read_locked(self) -> CollectionMetrics:
        now = self._read()
        readings = self._readings
        readings.append(now)
        # Keep the newest reading at least window_s old as the base (and the first ever).
        while len(readings) > 2 and (now.time_ns - readings[1].time_ns) * _NS >= self.window_s:
            readings.popleft()
        base = readings[0]
        elapsed = max((now.time_ns - base.time_ns) * _NS, 1e-9)
        workers = _mark_stragglers([self._worker(w, base, now, elapsed) for w in range(self.workers)])
        return CollectionMetrics(
            pid=int(self.watch.creator_pid),
            description=self.watch.description().removeprefix(TRAINER_ONLY_MARK),
            window_s=elapsed,
            trainer=self._trainer(base, now, elapsed),
            workers=tuple(workers),
        )

    def _worker(self, w: int, base: _Reading, now: _Reading, elapsed: float) -> dict[str, Any]:
        totals, before = now.workers[w], base.workers[w]
        delta = {key: totals[key] - before[key] for key in totals}
        state, pid, generation, heartbeat_ns, filled = now.states[w]
        if state in ("running", "starting") and pid and not _alive(pid):
            state = "empty"  # it died, and its restart (if any) has not begun: what it wrote is stale
        busy = delta["env_ns"] + delta["policy_ns"] + delta["wait_ns"]
        p50, p99 = _percentiles(now.latency[w] - base.latency[w], (0.5, 0.99))
        return {
            "worker": w,
            "state": state,
            "pid": pid or None,
            "generation": generation,
            "restarts": max(generation - 1, 0),
            "restarts_replayed": totals["restarts_replayed"],
            "restarts_cut": totals["restarts_cut"],
            "steps": totals["steps"],
            "frames": totals["frames"],
            "rollouts": totals["rollouts"],
            "env_time_s": totals["env_ns"] * _NS,
            "policy_time_s": totals["policy_ns"] * _NS,
            "wait_time_s": totals["wait_ns"] * _NS,
            "policy_version": totals["policy_version"],
            "weight_updates": totals["weight_updates"],
            "frames_per_s": delta["frames"] / elapsed,
            "steps_per_s": delta["steps"] / elapsed,
            "step_p50_s": p50,
            "step_p99_s": p99,
            "env_share": delta["env_ns"] / busy if busy else 0.0,
            "policy_share": delta["policy_ns"] / busy if busy else 0.0,
            "wait_share": delta["wait_ns"] / busy if busy else 0.0,
            "heartbeat_age_s": max(now.time_ns - heartbeat_ns, 0) * _NS if heartbeat_ns else None,
            "ring_filled": filled,
            "ring_slots": self.watch.slots_per_worker,
        }

    def _trainer(self, base: _Reading, now: _Reading, elapsed: float) -> TrainerMetrics:
        totals, before = now.trainer, base.trainer
        lag_frames = totals["lag_frames"] - before["lag_frames"]
        publishes = totals["publishes"]
        return TrainerMetrics(
            batches=totals["batches"],
            frames=totals["frames"],
            batches_per_s=(totals["batches"] - before["batches"]) / elapsed,
            frames_per_s=(totals["frames"] - before["frames"]) / elapsed,
            wait_time_s=totals["wait_ns"] * _NS,
            wait_share=min((totals["wait_ns"] - before["wait_ns"]) * _NS / elapsed, 1.0),
            publishes=publishes,
            publish_time_s=totals["publish_ns"] * _NS,
            publish_bytes=totals["publish_bytes"],
            last_publish_bytes=totals["publish_bytes"] // publishes if publishes else 0,
            policy_version=totals["policy_version"],
            policy_time_s=totals["policy_ns"] * _NS,
            lag_mean=(totals["lag_sum"] - before["lag_sum"]) / lag_frames if lag_frames else 0.0,
            lag_min=totals["lag_min"],
            lag_max=totals["lag_max"],
            frames_dropped=totals["lag_dropped"],
        )


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (exists and is not a zombie waiting to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] not in (b"Z", b"X")


def _percentiles(counts: np.ndarray, quantiles: tuple[float, ...]) -> tuple[float | None, ...]:
    total = int(counts.sum())
    if total <= 0:
        return tuple(None for _ in quantiles)
    cumulative = np.cumsum(counts)
    return tuple(float(_LATENCY_MIDDLES[int(np.searchsorted(cumulative, q * total))]) for q in quantiles)


def _mark_stragglers(workers: list[dict[str, Any]]) -> list[WorkerMetrics]:
    """Each worker's figures, a running one far below the median rate marked as a straggler."""
    running = [w["frames_per_s"] for w in workers if w["state"] == "running"]
    median = float(np.median(running)) if len(running) >= 2 else 0.0
    return [
        WorkerMetrics(
            **w, straggler=median > 0 and w["state"] == "running" and w["frames_per_s"] < STRAGGLER_FRACTION * median
        )
        for w in workers
    ]
