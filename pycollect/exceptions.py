"""The pycollect exception hierarchy.

Every error pycollect raises on purpose derives from :class:`PyCollectError`, so callers can
catch one type; each subclass is one reason a user can act on. Errors about bad arguments also
derive from :class:`ValueError` so that generic code that expects one keeps working. Errors of
the native module (``pycollect._core``) are mapped onto these classes in one place, the
bindings' ``errors.rs``::

    PyCollectError
    ├── ConfigError (ValueError)          a bad argument, before anything runs
    │   ├── UnknownEnvError               the backend does not know the env
    │   ├── UnknownBackendError           no env backend has that name
    │   ├── UnknownSchemeError            no weight-sync scheme has that name
    │   ├── UnknownDevicePolicyError      no device placement policy has that name
    │   ├── UnsupportedSpaceError         a space that cannot be laid out in a batch
    │   ├── PolicyError                   the policy does not fit the env (at start or mid-run)
    │   ├── EnvCreationError              the env's constructor raised
    │   ├── ActionError                   a vector env's step() got actions that do not fit
    │   └── EnvStateError                 an env's state cannot be taken or restored
    ├── EnvOutputError                    an env returned what its spaces do not allow
    ├── PluginError                       a plugin failed to import or to register
    ├── CollectorClosedError (RuntimeError)
    ├── VectorEnvClosedError (RuntimeError)   a vector env used after close()
    ├── TransportError (RuntimeError)     the shared-memory transport failed
    │   ├── LayoutMismatchError           a segment of another layout or build
    │   ├── WeightsMismatchError          a worker acts with other weights than those published
    │   └── BufferExportError (BufferError)
    ├── SupervisorError (RuntimeError)    worker processes could not be started or stopped
    ├── WorkerCrashedError (RuntimeError) a worker died and its restart policy gave up
    │   └── WorkerStoppedError            a worker ended cleanly and is not restarted
    ├── AttachError                       no collector to watch (pycollect top): not one, gone, not ours
    └── ConformanceError (AssertionError) a plugin broke its contract (pycollect.testing)
"""

from __future__ import annotations

__all__ = [
    "ActionError",
    "AttachError",
    "BufferExportError",
    "CollectorClosedError",
    "ConfigError",
    "ConformanceError",
    "EnvCreationError",
    "EnvOutputError",
    "EnvStateError",
    "LayoutMismatchError",
    "PluginError",
    "PolicyError",
    "PyCollectError",
    "PyCollectWarning",
    "SupervisorError",
    "TransportError",
    "UnknownBackendError",
    "UnknownDevicePolicyError",
    "UnknownEngineError",
    "UnknownEnvError",
    "UnknownInferenceRunnerError",
    "UnknownSchemeError",
    "UnsupportedSpaceError",
    "VectorEnvClosedError",
    "WeightsMismatchError",
    "WorkerCrashedError",
    "WorkerStoppedError",
]


class PyCollectError(Exception):
    """Base class of every error raised by pycollect."""


class ConfigError(PyCollectError, ValueError):
    """An argument or option has a bad value; raised before anything starts running."""


class UnknownEnvError(ConfigError):
    """The env id is not known to the env backend that was asked to build it."""


class UnknownBackendError(ConfigError):
    """The prefix of an env spec (``"<backend>:<id>"``) names no registered env backend."""


class UnknownSchemeError(ConfigError):
    """``weight_sync`` names no registered weight-sync scheme."""


class UnknownDevicePolicyError(ConfigError):
    """``device_policy`` names no registered device placement policy."""


class UnknownEngineError(ConfigError):
    """``engine`` names no registered engine."""


class UnknownInferenceRunnerError(ConfigError):
    """``inference_runner`` names no registered inference runner."""


class UnsupportedSpaceError(ConfigError):
    """An observation or action space has a type pycollect cannot lay out in a batch."""


class PolicyError(ConfigError):
    """The policy cannot be used.

    It fails on an example observation, or its output does not fit the action space.
    """


class EnvCreationError(ConfigError):
    """Building an environment raised; the message names the env, its kwargs and the error."""


class ActionError(ConfigError):
    """A vector env's ``step()`` got actions it cannot send; nothing was sent.

    Actions of the wrong shape or structure (a Dict action without one of its keys), of a
    dtype that cannot be cast to the action space's without changing their kind (floats for a
    Discrete space), outside the action space's bounds, or actions for envs that ended while
    ``autoreset_mode`` is ``DISABLED`` and were not reset. The message names the value and the
    env whose action it is.
    """


class EnvStateError(ConfigError):
    """An environment's state cannot be taken (``get_state``) or restored (``set_state``).

    Raised when a feature that needs snapshots (a checkpoint with env states, crash replay)
    meets an env that has none, naming the env and the part of it (a wrapper, a simulator)
    that cannot be saved; and when a saved state does not fit the env it is given to.
    """


class EnvOutputError(PyCollectError):
    """An environment returned something its spaces do not allow.

    An observation of another shape, a value of another kind (``None``, a float for an integer
    field, a value too large for the field's dtype), a reward that is not a real number or does
    not fit float32, or done flags that are not booleans: pycollect refuses to cast or broadcast
    it silently. The message names the env, the field, what came and what the space says.
    """


class PluginError(PyCollectError):
    """A plugin could not be used: it failed to import or to register, or it clashes with another.

    Attributes:
        plugin: The name of the plugin at fault (its entry-point name, or the module of a
            built-in plugin).
    """

    def __init__(self, message: str, *, plugin: str) -> None:
        super().__init__(message)
        self.plugin = plugin


class CollectorClosedError(PyCollectError, RuntimeError):
    """The collector was used after :meth:`~pycollect.Collector.shutdown`."""


class VectorEnvClosedError(PyCollectError, RuntimeError):
    """A :class:`pycollect.vector.VectorEnv` was used (``step``, ``reset``, ``call``...) after ``close()``."""


class TransportError(PyCollectError, RuntimeError):
    """The shared-memory transport failed (a system call, a corrupt slot, a full store)."""


class LayoutMismatchError(TransportError):
    """A process tried to attach to a segment built with another layout or pycollect version."""


class WeightsMismatchError(TransportError):
    """A worker applied weights whose bytes differ from those the trainer published for that version.

    Each publish carries a digest of the weights (XXH3-64 of their bytes); each worker reports
    the digest of what it applied. The message names the worker, the version and both digests.

    Attributes:
        worker: Index of the worker.
        version: The policy version it applied.
    """

    def __init__(self, message: str, *, worker: int, version: int) -> None:
        super().__init__(message)
        self.worker = worker
        self.version = version


class BufferExportError(TransportError, BufferError):
    """A view of shared memory could not be exported (e.g. a writable view of a read-only slot)."""


class SupervisorError(PyCollectError, RuntimeError):
    """Worker processes could not be started, watched or stopped (a failed spawn, a system call)."""


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


class ConformanceError(PyCollectError, AssertionError):
    """A plugin broke the contract of its extension point (raised by :mod:`pycollect.testing`).

    It is an ``AssertionError``, so pytest reports it as a failed check.
    """


class WorkerStoppedError(WorkerCrashedError):
    """A worker ended with status 0 and its restart policy (``transient``, ``never``) leaves it down.

    In sync mode every batch needs every worker, so the collector cannot go on; in async mode
    it goes on with the workers left (with a warning) until none is left.
    """


class AttachError(PyCollectError):
    """A running collection could not be watched (``pycollect top``, :func:`pycollect.metrics.attach`).

    The pid is not a process, not a pycollect collector, belongs to another user, or the
    collection ended. Watching never changes the collection, so nothing else is affected.
    """


class PyCollectWarning(UserWarning):
    """Base class of warnings issued by pycollect."""
