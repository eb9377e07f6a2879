"""The built-in step backends, ``inprocess`` and ``workers``, registered as any plugin's would be.

``make_vec(..., step_backend=None)`` (and ``SB3VecEnv``, and ``start_backend``) picks
``inprocess`` for ``num_workers=0`` and ``workers`` otherwise. The classes are importable from
here, to build on (``docs/plugins.md`` subclasses :class:`InProcessBackend`).
"""

from __future__ import annotations

from collections.abc import Sequence

from pycollect._step_backends.inprocess import InProcessBackend
from pycollect._step_backends.workers import WorkerStepBackend
from pycollect._steps.backend import StepBackend
from pycollect.hookspecs import hookimpl

__all__ = ["InProcessBackend", "WorkerStepBackend"]


@hookimpl
def register_step_backend() -> Sequence[type[StepBackend]]:
    """Register :class:`InProcessBackend` (``"inprocess"``) and :class:`WorkerStepBackend` (``"workers"``)."""
    return [InProcessBackend, WorkerStepBackend]
