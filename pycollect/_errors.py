"""The pycollect exception hierarchy.

Every error pycollect raises on purpose derives from :class:`PyCollectError`, so callers can
catch one type. Errors about bad arguments also derive from :class:`ValueError` (or
:class:`TypeError`) so that generic code that expects those keeps working.
"""

from __future__ import annotations

__all__ = [
    "CollectorClosedError",
    "ConfigError",
    "LayoutMismatchError",
    "PolicyError",
    "PyCollectError",
    "PyCollectWarning",
    "TransportError",
    "UnknownBackendError",
    "UnknownEnvError",
    "UnsupportedSpaceError",
    "WorkerCrashedError",
]


class PyCollectError(Exception):
    """Base class of every error raised by pycollect."""


class ConfigError(PyCollectError, ValueError):
    """An argument or option has a bad value; raised before anything starts running."""


class UnknownEnvError(ConfigError):
    """The env id is not known to the env backend that was asked to build it."""


class UnknownBackendError(ConfigError):
    """The prefix of an env spec (``"<backend>:<id>"``) names no registered env backend."""


class UnsupportedSpaceError(ConfigError):
    """An observation or action space has a type pycollect cannot lay out in a batch."""


class PolicyError(ConfigError):
    """The policy cannot be used.

    It fails on an example observation, or its output does not fit the action space.
    """


class CollectorClosedError(PyCollectError, RuntimeError):
    """The collector was used after :meth:`~pycollect.Collector.shutdown`."""


class TransportError(PyCollectError, RuntimeError):
    """The shared-memory transport failed (a system call, a corrupt slot, a full store)."""


class LayoutMismatchError(TransportError):
    """A process tried to attach to a segment built with another layout or pycollect version."""


class WorkerCrashedError(PyCollectError, RuntimeError):
    """A worker process died (or hung) and its restart policy gave up on it.

    The message carries the worker's own exception type, message and traceback when the
    worker could write them (an exception in an environment or policy); otherwise how the
    process ended (a signal, an exit code, a hang).

    Attributes:
        worker: Index of the worker.
        generation: The generation that ended last.
        error: The text the worker wrote (``"Type: message"``, then its traceback), or None.
    """

    def __init__(self, message: str, *, worker: int, generation: int, error: str | None) -> None:
        super().__init__(message)
        self.worker = worker
        self.generation = generation
        self.error = error


class PyCollectWarning(UserWarning):
    """Base class of warnings issued by pycollect."""
