"""Supervised worker processes on one shared-memory segment: what every owner of workers shares.

A :class:`WorkerProcesses` is the part of worker processes that does not depend on what they
do: a collector's :class:`~pycollect._engines.workers.WorkerPool` (rollouts) and a vector env's
:class:`~pycollect._step_backends.workers.WorkerStepBackend` (steps; the ``central`` engine has one per group of
its workers) each compose one. In order:

1. Made: named segments left by crashed trainers are swept, and the segment is created (a
   named fallback's name is unlinked at once: workers get its descriptor, never its name, so
   nothing is left in ``/dev/shm`` even if the trainer crashes).
2. The owner sets up what needs the segment before any worker runs (a scheme's weights sender,
   ring consumers, result views, step channels), then :meth:`~WorkerProcesses.start` writes
   the spec (with the segment's layout hash) into a sealed memory file, connects to the fork
   server and starts the supervisor, which launches every worker with that file at
   :data:`~.contract.SPEC_FD`.
3. The owner reads the supervisor's events through :attr:`~WorkerProcesses.log`, and
   :meth:`~WorkerProcesses.stats` / :meth:`~WorkerProcesses.events` report them.
4. :meth:`~WorkerProcesses.close` stops the workers (shutdown flag, grace, SIGTERM, SIGKILL,
   reap), keeps what they ended as, and lets go of the spec file, the supervisor and the segment.
"""

from __future__ import annotations

import os
import time
import weakref
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from pycollect import _lifetime
from pycollect._native import _core
from pycollect._workers import contract, forkserver
from pycollect._workers.spec import WorkerSpec, write_spec
from pycollect._workers.supervision import SupervisionLog
from pycollect.config import SupervisionConfig

__all__ = ["WorkerProcesses"]

_STARTUP_POLL_S = 0.01  # how often await_running looks whether the workers have built their envs


class WorkerProcesses:
    """One segment, the spec its workers start from, and the supervisor that runs them.

    Made with the segment only; :meth:`start` starts the workers. The owner closes it (once is
    enough; :meth:`start` closes it itself if it fails half-way).

    Args:
        segment_layout: The arguments of ``Segment.create`` but ``backing`` (fields, sizes,
            ``n_workers``...).
        supervision: How the workers are watched, restarted and stopped.

    Attributes:
        segment: The shared-memory segment (until :meth:`close`).
        num_workers: How many workers run on it.
        supervisor: The native supervisor (``None`` before :meth:`start` and after :meth:`close`).
        log: What follows from the supervisor's events (``None`` likewise): the owner polls it
            between its waits, and raises its own closed error where it finds none.
    """

    def __init__(self, segment_layout: Mapping[str, Any], supervision: SupervisionConfig) -> None:
        self._supervision = supervision
        self.supervisor: _core.Supervisor | None = None
        self.log: SupervisionLog | None = None
        self._spec_fd = -1
        self._closed = False
        self._owner: weakref.ref[_lifetime.Closable] | None = None  # ended with the process, if given
        self._final_stats: tuple[_core.WorkerStats, ...] = ()  # what stats() reports once closed
        self._final_events: tuple[_core.WorkerEvent, ...] = ()
        _core.sweep_stale_segments()  # named fallbacks left by crashed trainers (memfd leaves none)
        self.segment = _core.Segment.create(**segment_layout, backing="auto")
        if self.segment.name is not None:
            self.segment.unlink_name()  # workers get the descriptor, never the name
        self.num_workers = self.segment.n_workers

    @property
    def spec_fd(self) -> int:
        """The descriptor of the spec's sealed memory file (-1 before :meth:`start` and after :meth:`close`)."""
        return self._spec_fd

    def start(self, spec: WorkerSpec[Any], *, hide_cuda: bool, owner: _lifetime.Closable | None = None) -> None:
        """Write ``spec`` for the workers and start them, forked by the fork server if one is usable.

        Args:
            spec: What every worker builds (its ``layout_hash`` is filled in here).
            hide_cuda: Start the workers with CUDA hidden (``CUDA_VISIBLE_DEVICES=""``).
            owner: What is to end with the process (at exit, on SIGTERM) and be forgotten by a
                fork child (:mod:`pycollect._lifetime`), if the owner is not tracked otherwise.

        Raises:
            SupervisorError: The supervisor could not start the workers (what was opened is closed).
        """
        try:
            self._spec_fd = write_spec(replace(spec, layout_hash=self.segment.layout_hash))
            # Starts the fork server if none runs and waits for it (interruptibly); None: fork+exec
            # (why is logged), e.g. the server is turned off, or did not answer and was replaced.
            fork_server = forkserver.connect()
            try:
                self.supervisor = _core.Supervisor(
                    self.segment,
                    contract.worker_argv(),
                    env=contract.worker_env(hide_cuda=hide_cuda),
                    pass_fds=[(self._spec_fd, contract.SPEC_FD)],
                    supervision=self._supervision,
                    fork_server=fork_server,
                )
            finally:
                if fork_server is not None:
                    os.close(fork_server)  # the supervisor holds its own duplicate
            if owner is not None:
                self._owner = weakref.ref(owner)  # weak: the owner holds this object
                _lifetime.track(owner)
            self.log = SupervisionLog(self.supervisor, self.num_workers, self._supervision.restart)
        except BaseException:
            self.close()
            raise

    def await_running(self) -> None:
        """Wait until every worker has built what its spec asks for, so that one that cannot fails here.

        Raises:
            WorkerCrashedError: A worker failed to start (its envs' constructor raised, their
                spaces differ from the probe env's) and its restart policy gave up.
        """
        controls = [self.segment.worker_control(w) for w in range(self.num_workers)]
        while True:
            assert self.log is not None, "start() the workers first"
            self.log.poll()
            if all(control.state == "running" for control in controls):
                return
            time.sleep(_STARTUP_POLL_S)

    def stats(self) -> tuple[_core.WorkerStats, ...]:
        """Each worker's :class:`~pycollect._core.WorkerStats`; once closed, as the workers ended."""
        if self.supervisor is None:
            return self._final_stats
        return tuple(self.supervisor.stats())

    def events(self) -> tuple[_core.WorkerEvent, ...]:
        """The supervisor's recent events (at most 100), oldest first; once closed, those taken before."""
        if self.log is None:
            return self._final_events
        self.log.take_events()
        return self.log.events

    def close(self) -> None:
        """Stop every worker (flag, grace, SIGTERM, SIGKILL, reap) and let go of what it holds; once."""
        if self._closed:
            return
        self._closed = True
        owner = self._owner() if self._owner is not None else None
        if owner is not None:
            _lifetime.untrack(owner)
        if self.supervisor is not None:
            self.supervisor.shutdown(grace_s=self._supervision.shutdown_grace_s)
            self._final_stats = tuple(self.supervisor.stats())
        else:
            self.segment.shutdown()
        if self.log is not None:
            self._final_events = self.log.events  # none taken now: that would log every worker's exit at shutdown
        if self._spec_fd >= 0:
            os.close(self._spec_fd)
            self._spec_fd = -1
        self.log = None
        self.supervisor = None  # it holds the segment for the workers it started
        del self.segment  # the mapping goes with the owner's last reference

    def forget(self) -> None:
        """In a forked child: this copy owns none of the workers; never act on them."""
        self._closed = True
