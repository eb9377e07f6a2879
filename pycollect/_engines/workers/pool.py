"""The trainer's side of worker processes: segment, supervisor, and batches out of the rings.

A :class:`WorkerPool` owns one shared-memory segment and one supervisor. Each of its
``num_workers`` worker processes (``python -m pycollect.worker``) fills rollout slots in its
own ring; the pool turns committed slots into ``TensorDict`` batches:

* sync: one rollout of every worker per batch, ordered by worker, ``[W*K, T]``. Every worker
  commits exactly one slot per batch, so batch ``b`` sits in slot ``b % slots`` of every
  ring and, in the segment, forms one contiguous block per field.
* async: the next finished rollout of any worker, ``[K, T]``; workers keep collecting while
  the trainer trains.

Batches are copied out (owned by the caller) unless ``zero_copy`` is set, in which case they
are views of the slots, valid until the next batch.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from pycollect import _core
from pycollect._batch.recycle import RecycledMemory
from pycollect._batch.tensordict import BatchField, allocate
from pycollect._engines.workers.spec import WorkerSpec, field_name, write_spec
from pycollect._rollout.keys import NEXT_DONE, NEXT_TRUNCATED
from pycollect.exceptions import CollectorClosedError, WorkerCrashedError
from pycollect.weights.layout import WeightsLayout

__all__ = ["SLOTS_PER_WORKER", "WEIGHTS_PUBLISH_TIMEOUT_S", "WEIGHT_BUFFERS", "PoolOptions", "WorkerPool"]

_SPEC_CHILD_FD = 5
_POLL_S = 0.1  # how often a waiting trainer looks at supervisor events

SLOTS_PER_WORKER = 2
"""Rollout slots in each worker's ring: a worker runs at most one rollout ahead."""
WEIGHT_BUFFERS = 3
"""Buffers of the weights store: the latest, one being written, one a reader may still hold."""
WEIGHTS_PUBLISH_TIMEOUT_S = 5.0
"""How long publishing weights waits for a buffer no reader holds (only a dead reader takes long)."""


@dataclass(frozen=True)
class PoolOptions:
    """Supervision settings of a pool (see :class:`pycollect.Collector` for their meaning).

    The native supervisor has no defaults of its own: these are the defaults.
    """

    restart: str = "permanent"
    max_restarts: int = 3
    restart_window_s: float = 60.0
    heartbeat_timeout_s: float = 30.0
    startup_timeout_s: float = 120.0
    shutdown_grace_s: float = 2.0
    backoff_initial_s: float = 0.1
    backoff_max_s: float = 5.0
    check_interval_s: float = 0.1
    term_timeout_s: float = 2.0


class WorkerPool:
    """Worker processes that fill the rings of one segment, and the batches they make.

    Args:
        spec: What every worker builds (the segment fields are ``spec.fields``).
        fields: The batch fields, with shapes and dtypes, in the spec's order.
        sync: Sync (one rollout of every worker per batch) or async mode.
        zero_copy: Yield views of the slots (valid until the next batch) instead of copies.
        storing_device: Where owned batches are delivered.
        options: Supervision settings.
    """

    def __init__(
        self,
        spec: WorkerSpec,
        fields: Sequence[BatchField],
        *,
        sync: bool,
        zero_copy: bool,
        storing_device: torch.device,
        options: PoolOptions,
        weights: WeightsLayout | None,
    ) -> None:
        self.num_workers = spec.num_workers
        self.sync = sync
        self.zero_copy = zero_copy
        self.storing_device = storing_device
        self.options = options
        self._fields = tuple(fields)
        self._memory = RecycledMemory()
        self._names = {field.key: field_name(field.key) for field in self._fields}
        self._held: list[Any] = []  # leases of the last zero-copy batch
        self._next_worker = 0  # async round-robin start
        self._dead_generation = [0] * self.num_workers  # newest generation seen to end, per worker
        self._restarts = 0
        self._events: list[_core.WorkerEvent] = []
        self._fatal: WorkerCrashedError | None = None  # a worker given up on: every batch fails
        self._closed = False
        self._weights = weights
        self._weights_buffer = np.empty(weights.nbytes if weights is not None else 0, np.uint8)

        _core.sweep_stale_segments()  # named fallbacks left by crashed trainers (memfd leaves none)
        self.segment = _core.Segment.create(
            [(self._names[f.key], f.dtype.name, f.shape) for f in self._fields],
            n_workers=spec.num_workers,
            envs_per_worker=spec.envs_per_worker,
            steps=spec.steps,
            slots_per_worker=SLOTS_PER_WORKER,
            weights_capacity=weights.nbytes if weights is not None else 0,
            weights_buffers=WEIGHT_BUFFERS,
            backing="auto",
        )
        if self.segment.name is not None:
            # A named fallback segment: workers get its descriptor, never its name, so the
            # name can go at once and nothing is left in /dev/shm even if we crash.
            self.segment.unlink_name()
        self._spec_fd = -1
        self.supervisor: _core.Supervisor | None = None
        try:
            spec = replace(spec, layout_hash=self.segment.layout_hash)
            self._spec_fd = write_spec(spec)
            self.consumers = [self.segment.consumer(w) for w in range(self.num_workers)]
            self._writer = self.segment.weights_writer() if weights is not None else None
            self.supervisor = _core.Supervisor(
                self.segment,
                [sys.executable, "-m", "pycollect.worker"],
                env=_worker_env(),
                pass_fds=[(self._spec_fd, _SPEC_CHILD_FD)],
                restart=options.restart,
                max_restarts=options.max_restarts,
                restart_window_s=options.restart_window_s,
                backoff_initial_s=options.backoff_initial_s,
                backoff_max_s=options.backoff_max_s,
                startup_timeout_s=options.startup_timeout_s,
                heartbeat_timeout_s=options.heartbeat_timeout_s,
                check_interval_s=options.check_interval_s,
                grace_s=options.shutdown_grace_s,
                term_timeout_s=options.term_timeout_s,
            )
        except BaseException:
            self.close()
            raise

    # -- batches ---------------------------------------------------------------------------

    def next_batch(self) -> TensorDict:
        """The next batch: ``[W*K, T]`` in sync mode, ``[K, T]`` in async mode."""
        self._release_held()
        leases = [self._pop(worker) for worker in range(self.num_workers)] if self.sync else [self._pop_any()]
        try:
            batch = self._assemble(leases)
        except BaseException:
            for lease in leases:
                lease.release()
            raise
        if self.zero_copy:
            self._held = leases
        else:
            for lease in leases:
                lease.release()
        return batch

    def _pop(self, worker: int) -> Any:
        consumer = self.consumers[worker]
        while True:
            self._check_workers()
            lease = consumer.pop(timeout_s=_POLL_S)
            if lease is not None:
                return lease
            if self.segment.is_shutdown:
                raise CollectorClosedError("the collector is shutting down")

    def _pop_any(self) -> Any:
        while True:
            self._check_workers()
            which = _core.wait_any(self.consumers, timeout_s=_POLL_S, start=self._next_worker)
            if which is not None:
                lease = self.consumers[which].try_pop()
                if lease is not None:
                    self._next_worker = (which + 1) % self.num_workers
                    return lease
            if self.segment.is_shutdown:
                raise CollectorClosedError("the collector is shutting down")

    def _assemble(self, leases: list[Any]) -> TensorDict:
        k, t = self.segment.envs_per_worker, self.segment.steps
        rows = k * len(leases)
        one_block = self.sync and len({lease.slot for lease in leases}) == 1 and len(leases) == self.num_workers
        # Owned batches are copied into recycled memory (no page faults once warm);
        # zero-copy batches are the slots themselves.
        owned = None if self.zero_copy else allocate(self._fields, rows, t, self._memory)
        td = TensorDict(batch_size=[rows, t], names=[None, "time"])
        for field in self._fields:
            name = self._names[field.key]
            if one_block:  # writable: torch warns about read-only buffers; the slots are leased
                sources = [np.asarray(self.segment.batch_view(name, leases[0].slot, writable=True))]
            else:
                sources = [np.asarray(lease.view(name)) for lease in leases]
            if owned is not None:
                array, start = owned[field.key], 0
                for source in sources:
                    array[start : start + len(source)] = source
                    start += len(source)
            elif len(sources) == 1:
                array = sources[0]
            else:  # rings out of step after a restart: no single view exists, so a copy
                array = np.concatenate(sources)
            td.set(field.key, torch.from_numpy(array))
        for i, lease in enumerate(leases):
            if self._generation_ended(lease):
                _mark_cut(td, slice(i * k, (i + 1) * k))
        if not self.zero_copy and self.storing_device.type != "cpu":
            td = td.to(self.storing_device)
        return td

    def _generation_ended(self, lease: Any) -> bool:
        """Whether ``lease`` is the last rollout its (dead) worker generation committed."""
        if lease.generation > self._dead_generation[lease.worker]:
            return False
        following = self.consumers[lease.worker].peek()
        return following is None or following[1] != lease.generation

    def _release_held(self) -> None:
        for lease in self._held:
            lease.release()
        self._held = []

    # -- supervision -----------------------------------------------------------------------

    def _check_workers(self) -> None:
        """Take in supervisor events; raise if a worker was given up on."""
        if self._fatal is not None:
            raise self._fatal
        assert self.supervisor is not None
        while (event := self.supervisor.next_event(timeout_s=0.0)) is not None:
            self._events.append(event)
            del self._events[:-100]
            if event.kind == "exited":
                self._dead_generation[event.worker] = max(self._dead_generation[event.worker], event.generation)
            elif event.kind == "restarting":
                self._restarts += 1
            elif event.kind == "gave_up":
                self._fatal = self._crash_error(event)
                raise self._fatal

    def _crash_error(self, event: _core.WorkerEvent) -> WorkerCrashedError:
        assert self.supervisor is not None
        worker = event.worker
        text = self.supervisor.last_error(worker)
        how = _describe_exit(self.supervisor.stats()[worker].last_exit)
        message = f"worker {worker} (generation {event.generation}) {how}; restart policy "
        message += f"'{self.options.restart}' gave up after {event.restarts or 0} restart(s)"
        if text:
            message += f"\n\nThe worker raised {text}"
        return WorkerCrashedError(message, worker=worker, generation=event.generation, error=text)

    def stats(self) -> dict[str, Any]:
        """Supervision stats: ``{"workers", "restarts", "last_error", "events"}``.

        ``workers`` lists a :class:`~pycollect._core.WorkerStats` per worker, ``events`` the
        last (at most 100) :class:`~pycollect._core.WorkerEvent` objects taken in.
        """
        workers = self.supervisor.stats() if self.supervisor is not None else []
        errors = [w.last_error for w in workers if w.last_error]
        return {
            "workers": workers,
            "restarts": sum(w.restarts for w in workers),
            "last_error": errors[-1] if errors else None,
            "events": list(self._events),
        }

    # -- weights ---------------------------------------------------------------------------

    def publish_weights(self, module: torch.nn.Module, policy_version: int) -> int:
        """Copy ``module``'s weights into the store; workers load them between rollouts.

        Workers record ``policy_version`` on every frame they collect with these weights.
        """
        assert self._weights is not None and self._writer is not None
        data = self._weights.pack(module, self._weights_buffer, policy_version)
        return int(self._writer.publish(data, timeout_s=WEIGHTS_PUBLISH_TIMEOUT_S))

    # -- lifetime --------------------------------------------------------------------------

    def close(self) -> list[_core.WorkerEnding]:
        """Stop every worker (flag, grace, SIGTERM, SIGKILL, reap) and release the segment."""
        if self._closed:
            return []
        self._closed = True
        self._held = []
        report: list[_core.WorkerEnding] = []
        if self.supervisor is not None:
            report = self.supervisor.shutdown(grace_s=self.options.shutdown_grace_s)
        else:
            self.segment.shutdown()
        if self._spec_fd >= 0:
            os.close(self._spec_fd)
            self._spec_fd = -1
        return report


def _worker_env() -> dict[str, str]:
    """Environment for workers.

    One compute thread each, no CUDA context on the CPU, and the trainer's import path, so
    that whatever the trainer can import (the module of an env factory, say) a worker can too.
    """
    return {
        "PYCOLLECT_SYS_PATH": json.dumps([entry or os.getcwd() for entry in sys.path]),
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "CUDA_VISIBLE_DEVICES": "",
        "PYTHONUNBUFFERED": "1",
        "PYCOLLECT_SPEC_FD": str(_SPEC_CHILD_FD),
    }


def _mark_cut(td: TensorDict, rows: slice) -> None:
    """Mark the last step of ``rows`` truncated: their trajectories end with a dead worker."""
    truncated, done = td.get(NEXT_TRUNCATED), td.get(NEXT_DONE)
    truncated[rows, -1] = True
    done[rows, -1] = True


def _describe_exit(last_exit: _core.WorkerExit | None) -> str:
    if last_exit is None:
        return "ended"
    if last_exit.reason == "hung":
        return "stopped beating its heartbeat and was killed"
    if last_exit.signal is not None:
        return f"was killed by signal {last_exit.signal}"
    if last_exit.code is not None:
        return f"exited with status {last_exit.code}"
    return "ended"
