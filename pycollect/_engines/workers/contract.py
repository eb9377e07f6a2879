"""The contract between the trainer and a worker process: how a worker is started.

The supervisor (Rust) starts every worker as ``python -m pycollect.worker`` with the segment
at :data:`SEGMENT_FD` and its lifeline at :data:`LIFELINE_FD`, and names them, the worker's
index and its generation in environment variables; those numbers and names are the native
module's constants. The pool adds the pickled :class:`~.spec.WorkerSpec` at :data:`SPEC_FD`
and the variables below. Both sides read them from here, so they cannot drift apart.

Environment of a worker:

``PYCOLLECT_WORKER``, ``PYCOLLECT_GENERATION``
    The worker's index and generation (1 for the first start, +1 at every restart).
``PYCOLLECT_SEGMENT_FD``, ``PYCOLLECT_SPEC_FD``
    Inherited descriptors of the segment and of the pickled spec.
``PYCOLLECT_LIFELINE_FD``
    The read end of a pipe whose write end the supervisor holds: end of file means the
    supervisor is gone or stopping; the worker exits within a few seconds even if it never
    sees the shutdown flag.
``PYCOLLECT_SYS_PATH``
    The trainer's ``sys.path`` (JSON), so the worker imports what the trainer can.
``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``
    1: one compute thread per worker.
``CUDA_VISIBLE_DEVICES``
    ``""`` (set by the trainer when no placement allows CUDA, else by each worker whose
    placement does not): such a worker never creates a CUDA context.
"""

from __future__ import annotations

import json
import os
import sys

from pycollect import _core

__all__ = [
    "ENV_GENERATION",
    "ENV_LIFELINE_FD",
    "ENV_SEGMENT_FD",
    "ENV_SPEC_FD",
    "ENV_SYS_PATH",
    "ENV_WORKER",
    "LIFELINE_FD",
    "SEGMENT_FD",
    "SPEC_FD",
    "worker_argv",
    "worker_env",
]

LIFELINE_FD: int = _core.CHILD_LIFELINE_FD
SEGMENT_FD: int = _core.CHILD_SEGMENT_FD
SPEC_FD = SEGMENT_FD + 1
"""Where a worker finds the memfd that holds its pickled spec."""

ENV_WORKER: str = _core.ENV_WORKER
ENV_GENERATION: str = _core.ENV_GENERATION
ENV_SEGMENT_FD: str = _core.ENV_SEGMENT_FD
ENV_LIFELINE_FD: str = _core.ENV_LIFELINE_FD
ENV_SPEC_FD = "PYCOLLECT_SPEC_FD"
ENV_SYS_PATH = "PYCOLLECT_SYS_PATH"


def worker_argv() -> list[str]:
    """The command line of a worker process."""
    return [sys.executable, "-m", "pycollect.worker"]


def worker_env(*, hide_cuda: bool) -> dict[str, str]:
    """Environment variables every worker gets on top of the trainer's.

    Args:
        hide_cuda: Hide CUDA from every worker (no placement allows it).
    """
    env = {
        ENV_SYS_PATH: json.dumps([entry or os.getcwd() for entry in sys.path]),
        ENV_SPEC_FD: str(SPEC_FD),
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
    }
    if hide_cuda:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env
