"""The contract between the trainer and a worker process: how a worker is started.

The supervisor (Rust) starts every worker as ``python -m pycollect.worker`` with the segment
at :data:`SEGMENT_FD` and its lifeline at :data:`LIFELINE_FD`, and names them, the worker's
index and its generation in environment variables; those numbers and names are the native
module's constants. :class:`~.processes.WorkerProcesses` adds the pickled spec at
:data:`SPEC_FD` and the variables below. Both sides read them from here, so they cannot drift apart.

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
``PYTHONPATH``, ``PYCOLLECT_USER_PYTHONPATH``
    The worker runs ``python -P -m pycollect.worker``: ``-P`` keeps the working directory off
    the front of its ``sys.path`` (in a clone's root, the source tree, which has no built
    extension, would shadow the installed package), and ``PYTHONPATH`` holds the trainer's
    ``sys.path``, so that ``-m`` finds the very ``pycollect`` the trainer imported. The user's
    own ``PYTHONPATH`` (JSON; ``null`` when unset) is put back by :func:`restore_user_env`
    before any env code runs, so processes an env starts see what the user set.
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
import warnings

from pycollect._native import _core
from pycollect.exceptions import PyCollectWarning

__all__ = [
    "ENV_GENERATION",
    "ENV_LIFELINE_FD",
    "ENV_SEGMENT_FD",
    "ENV_SPEC_FD",
    "ENV_SYS_PATH",
    "ENV_USER_PYTHONPATH",
    "ENV_WORKER",
    "LIFELINE_FD",
    "SEGMENT_FD",
    "SPEC_FD",
    "path_env",
    "restore_user_env",
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
ENV_USER_PYTHONPATH = "PYCOLLECT_USER_PYTHONPATH"


def worker_argv() -> list[str]:
    """The command line of a worker process (see the module docs for ``-P``)."""
    return [sys.executable, "-P", "-m", "pycollect.worker"]


def _trainer_path() -> list[str]:
    """This process's ``sys.path`` with every relative entry (``""`` is the working directory) made absolute.

    A worker runs in the trainer's working directory, but the fork server does not, and a
    relative entry would name another directory there. With the working directory removed
    (see :func:`worker_env`), relative entries name nothing and are left out.
    """
    try:
        cwd = os.getcwd()
    except FileNotFoundError:
        cwd = None
    path = []
    for entry in sys.path:
        if os.path.isabs(entry):
            path.append(entry)
        elif cwd is not None:
            path.append(os.path.normpath(os.path.join(cwd, entry)))
    return path


def path_env() -> dict[str, str]:
    """What makes a ``python -P -m pycollect.worker`` import the trainer's ``pycollect`` (module docs)."""
    path = _trainer_path()
    return {
        ENV_SYS_PATH: json.dumps(path),
        # An entry that holds the separator cannot be written here; run() sets sys.path exactly.
        "PYTHONPATH": os.pathsep.join(entry for entry in path if os.pathsep not in entry),
        ENV_USER_PYTHONPATH: json.dumps(os.environ.get("PYTHONPATH")),
    }


def restore_user_env() -> None:
    """In a worker or the fork server: put back the ``PYTHONPATH`` the trainer was started with."""
    saved = os.environ.pop(ENV_USER_PYTHONPATH, None)
    if saved is None:
        return
    user = json.loads(saved)
    if user is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = user


def _check_cwd() -> None:
    """Warn when this process's working directory was removed: workers then start in ``/``.

    The supervisor starts them there (a process cannot be started in a directory that no
    longer exists); the warning says so before a relative path in an env's settings fails.
    """
    try:
        os.getcwd()
    except FileNotFoundError:
        try:
            where = os.readlink("/proc/self/cwd").removesuffix(" (deleted)")
        except OSError:
            where = "unknown"
        warnings.warn(
            f"the working directory of this process ({where}) was removed: workers start in '/' "
            "and relative paths in sys.path are left out",
            PyCollectWarning,
            stacklevel=_caller_level(),
        )


def _caller_level() -> int:
    """The ``stacklevel`` of the first frame outside pycollect, for a warning raised by ``_check_cwd``."""
    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    frame = sys._getframe(2)  # _check_cwd's caller; warn() counts _check_cwd as level 1
    level = 2
    while frame.f_back is not None and frame.f_code.co_filename.startswith(package + os.sep):
        frame = frame.f_back
        level += 1
    return level


def worker_env(*, hide_cuda: bool) -> dict[str, str]:
    """Environment variables every worker gets on top of the trainer's.

    Warns (:class:`~pycollect.PyCollectWarning`) when the trainer's working directory was
    removed: workers then start in ``/``.

    Args:
        hide_cuda: Hide CUDA from every worker (no placement allows it).
    """
    _check_cwd()
    env = {
        **path_env(),
        ENV_SPEC_FD: str(SPEC_FD),
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
    }
    if hide_cuda:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env
