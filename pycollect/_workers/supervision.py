"""What the trainer makes of the supervisor's events: restarts, cut rollouts and the final error.

The supervisor (a Rust thread) reports every start, exit, failed spawn, scheduled restart and
give-up as a typed :class:`~pycollect._core.WorkerEvent`. The owner of the workers (a
collector's pool, a vector env's step backend) takes them in between its waits;
:class:`SupervisionLog` keeps what it needs from them and logs each one to the
``pycollect.workers`` logger (:data:`logger`), with the event as the record's ``worker_event``
attribute:

========================================  ========
event                                     level
========================================  ========
started                                   DEBUG
exited with status 0                      INFO
exited otherwise (status, signal, hang)   WARNING
spawn_failed, restarting, stopped         WARNING
gave_up (with the worker's error)         ERROR
========================================  ========
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pycollect.exceptions import WorkerCrashedError, WorkerStoppedError

if TYPE_CHECKING:
    from pycollect._native import _core

__all__ = ["SupervisionLog", "crash_summary", "describe_exit", "logger"]

_KEEP_EVENTS = 100

logger = logging.getLogger("pycollect.workers")
"""Where the trainer logs what happens to its workers (a child of the ``pycollect`` logger)."""


class SupervisionLog:
    """The supervisor's events, taken in order, and what follows from them.

    Args:
        supervisor: The workers' supervisor.
        num_workers: How many workers it supervises.
        restart: The restart policy's name, for messages.
    """

    def __init__(self, supervisor: _core.Supervisor, num_workers: int, restart: str) -> None:
        self.supervisor = supervisor
        self.restart = restart
        self._events: list[_core.WorkerEvent] = []
        self.num_workers = num_workers
        self._dead_generation = [0] * num_workers  # the newest generation seen to end, per worker
        self._fatal: WorkerCrashedError | None = None  # a worker given up on: every batch fails
        self._stopped: dict[int, _core.WorkerEvent] = {}  # ended cleanly, not restarted: worker -> event
        self._unreported: list[int] = []  # stopped workers not yet returned by newly_stopped()

    @property
    def events(self) -> tuple[_core.WorkerEvent, ...]:
        """The most recent events (at most 100), oldest first."""
        return tuple(self._events)

    def poll(self) -> None:
        """Take in every pending event.

        Raises:
            WorkerCrashedError: A worker was given up on (now, or at any earlier poll).
        """
        self.take_events()
        if self._fatal is not None:
            raise self._fatal

    def take_events(self) -> None:
        """Take in every pending event without raising (a give-up is kept for :meth:`poll`)."""
        while (event := self.supervisor.next_event(timeout_s=0.0)) is not None:
            self._events.append(event)
            del self._events[:-_KEEP_EVENTS]
            if event.kind == "exited":
                self._dead_generation[event.worker] = max(self._dead_generation[event.worker], event.generation)
            elif event.kind == "gave_up":
                error = self._crash_error(event)
                if self._fatal is None:
                    self._fatal = error
                self._log(event, logging.ERROR, crash_summary(error))
                continue  # logged with what the worker raised
            elif event.kind == "stopped":
                self._stopped[event.worker] = event
                self._unreported.append(event.worker)
            self._log(event, *self._describe(event))

    def _describe(self, event: _core.WorkerEvent) -> tuple[int, str]:
        """The level and message that log ``event`` (all kinds but gave_up)."""
        name = f"worker {event.worker} (generation {event.generation})"
        if event.kind == "started":
            how = "forked by the fork server" if event.launched_by == "fork_server" else "fork+exec"
            if event.fallback is not None:
                how += f"; fork server not used: {event.fallback}"
            return logging.DEBUG, f"{name} started, pid {event.pid} ({how})"
        if event.kind == "exited":
            clean = event.exit is not None and event.exit.reason == "exit" and event.exit.code == 0
            return logging.INFO if clean else logging.WARNING, f"{name} {describe_exit(event.exit)}"
        if event.kind == "spawn_failed":
            return logging.WARNING, f"{name} could not be started: {event.error}"
        if event.kind == "restarting":
            after = f"{event.after_s:.2f} s" if event.after_s is not None else "a moment"
            return logging.WARNING, f"restarting worker {event.worker} as generation {event.generation} in {after}"
        return logging.WARNING, self.describe_stop(event.worker)  # stopped

    @staticmethod
    def _log(event: _core.WorkerEvent, level: int, message: str) -> None:
        logger.log(level, "%s", message, extra={"worker_event": event})

    def stopped(self, worker: int) -> bool:
        """Whether ``worker`` ended cleanly and its restart policy leaves it down."""
        return worker in self._stopped

    def newly_stopped(self) -> list[int]:
        """Workers that stopped since the last call."""
        found, self._unreported = self._unreported, []
        return found

    def stopped_error(self, worker: int, why: str) -> WorkerStoppedError:
        """The error for a collector that cannot go on because ``worker`` stopped (``why``)."""
        return WorkerStoppedError(
            f"{self.describe_stop(worker)}, {why}",
            worker=worker,
            generation=self._stopped[worker].generation,
            error=None,
        )

    def describe_stop(self, worker: int) -> str:
        """``worker 1 (generation 1) exited with status 0; restart policy 'transient' ...``."""
        generation = self._stopped[worker].generation
        how = describe_exit(self.supervisor.stats()[worker].last_exit)
        return (
            f"worker {worker} (generation {generation}) {how}; restart policy '{self.restart}' does not "
            "restart a worker that ends cleanly"
        )

    def ended(self, worker: int, generation: int) -> bool:
        """Whether ``generation`` of ``worker`` is known to have ended."""
        return generation <= self._dead_generation[worker]

    def _crash_error(self, event: _core.WorkerEvent) -> WorkerCrashedError:
        worker = event.worker
        text = self.supervisor.last_error(worker)
        how = describe_exit(self.supervisor.stats()[worker].last_exit)
        message = f"worker {worker} (generation {event.generation}) {how}; restart policy "
        message += f"'{self.restart}' gave up after {event.restarts or 0} restart(s)"
        if text:
            message += f"\n\nThe worker raised {text}"
        return WorkerCrashedError(message, worker=worker, generation=event.generation, error=text)


def crash_summary(error: WorkerCrashedError) -> str:
    """A crash on one line: how the worker ended and gave up, then the first line of what it raised."""
    text = str(error).strip()
    summary = text.splitlines()[0] if text else "a worker crashed"
    raised = (error.error or "").strip()
    return f"{summary}: {raised.splitlines()[0]}" if raised else summary


def describe_exit(last_exit: _core.WorkerExit | None) -> str:
    """How a worker ended, as a phrase: ``"was killed by signal 9"``."""
    if last_exit is None:
        return "ended"
    if last_exit.reason == "hung":
        return "stopped beating its heartbeat and was killed"
    if last_exit.signal is not None:
        return f"was killed by signal {last_exit.signal}"
    if last_exit.code is not None:
        return f"exited with status {last_exit.code}"
    return "ended"
