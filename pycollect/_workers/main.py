"""The worker process (run by ``python -m pycollect.worker``): attach, run the worker loop, report.

A worker attaches to the collector's shared-memory segment, guards its process group (nothing
an env starts outlives it), watches its lifeline to the supervisor, reads its
:class:`~.spec.WorkerSpec` and runs the one worker loop, :func:`.serve.serve`: it answers the
trainer's requests on its step channel and, between them, does the local work its spec asks
for: a collector's rollouts (:class:`~.spec.RolloutLoop`, :mod:`.rollouts`, which fills the
worker's ring slots with rollouts of its policy) or a vector env's (or the central engine's)
steps (:class:`~.spec.StepLoop`, :mod:`.steps`, which steps its envs as the trainer asks).

On any exception it writes the exception type, message and traceback into its control block,
where the trainer reads them, and exits with status 1.

With a random policy nothing here imports torch.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
import traceback
from typing import Any

from pycollect._workers import contract

__all__ = ["format_error", "run"]

_LIFELINE_GRACE_S = 3.0
_ATTACH_TIMEOUT_S = 10.0  # the trainer marks the segment ready before it starts any worker


_MESSAGE_HEAD = 1024  # characters of a long exception message that are kept


def format_error(exc: BaseException, capacity: int) -> str:
    """``"Type: message"`` first, then the traceback (what the trainer shows), in ``capacity`` bytes.

    The text goes into a fixed area of the worker's control block. A long message keeps its
    head; a traceback that still does not fit keeps its tail, the frames nearest the error;
    each cut says how much it dropped.
    """
    name = f"{type(exc).__module__}.{type(exc).__qualname__}".removeprefix("builtins.")
    summary = f"{name}: {_shorten(str(exc))}"
    lines = traceback.format_exception(exc)
    lines[-1] = _shorten(lines[-1].rstrip("\n")) + "\n"  # the traceback ends with the message again
    trace = "".join(lines)
    text = f"{summary}\n\n{trace}"
    if len(text.encode()) <= capacity:
        return text
    encoded = trace.encode()
    marker = f"[... {len(encoded)} bytes of the traceback, of which only the end is kept ...]\n"
    budget = max(capacity - len(f"{summary}\n\n{marker}".encode()), 0)
    tail = encoded[len(encoded) - budget :].decode(errors="ignore")  # a cut character is dropped
    return f"{summary}\n\n{marker}{tail}"


def _shorten(text: str) -> str:
    if len(text) <= _MESSAGE_HEAD:
        return text
    return f"{text[:_MESSAGE_HEAD]} [... {len(text) - _MESSAGE_HEAD} characters truncated]"


def _watch_lifeline(fd: int) -> None:
    def watch() -> None:
        try:
            while os.read(fd, 64):
                pass  # the supervisor never writes; data would be ignored
        except OSError:
            pass
        # The supervisor is gone or is shutting us down. An orderly shutdown also sets the
        # segment's flag, and the main loop then closes the environments (which may own
        # processes of their own) and returns; give it that long, then leave regardless.
        time.sleep(_LIFELINE_GRACE_S)
        os._exit(0)

    threading.Thread(target=watch, name="pycollect-lifeline", daemon=True).start()


def _work(segment: Any, control: Any, worker: int, generation: int) -> None:
    """Read the spec, check it is for this segment, and run the worker loop (:func:`.serve.serve`)."""
    from pycollect._workers.serve import serve
    from pycollect._workers.spec import read_spec
    from pycollect.exceptions import LayoutMismatchError

    spec_fd = int(os.environ[contract.ENV_SPEC_FD])
    spec = read_spec(spec_fd)
    os.close(spec_fd)  # read once; nothing this worker runs may inherit it
    if segment.layout_hash != spec.layout_hash:
        raise LayoutMismatchError(f"segment layout {segment.layout_hash:#x} is not the spec's {spec.layout_hash:#x}")
    serve(segment, control, worker, generation, spec)


def _stderr_logger(worker: int, generation: int) -> logging.Logger:
    """This worker's logger, ``pycollect.worker``; ``pycollect`` records (WARNING and up) go to stderr.

    A worker's stderr is the trainer's, so each record says which worker wrote it. The handler
    is the worker process's own: the trainer's logging is the application's to configure.
    """
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"pycollect worker {worker} (generation {generation}): %(message)s"))
    logging.getLogger("pycollect").addHandler(handler)
    return logging.getLogger("pycollect.worker")


def run() -> int:
    """Run one worker; returns the process exit status."""
    if contract.ENV_SYS_PATH in os.environ:
        sys.path[:] = json.loads(os.environ[contract.ENV_SYS_PATH])
    contract.restore_user_env()  # before any env code: what the processes it starts inherit
    from pycollect._native import _core

    # First, while this process maps no segment and runs no thread of its own: a process in
    # this worker's group that SIGKILLs the group when this process ends, however it ends (a
    # SIGKILLed trainer leaves no supervisor to do it), so nothing an env starts outlives us.
    _core.guard_process_group()
    worker = int(os.environ[contract.ENV_WORKER])
    generation = int(os.environ[contract.ENV_GENERATION])
    log = _stderr_logger(worker, generation)
    lifeline = os.environ.get(contract.ENV_LIFELINE_FD)
    if lifeline is not None:
        os.set_inheritable(int(lifeline), False)  # a process an env starts must not hold it
        _watch_lifeline(int(lifeline))
    segment_fd = int(os.environ[contract.ENV_SEGMENT_FD])
    segment = _core.Segment.attach(segment_fd, timeout_s=_ATTACH_TIMEOUT_S)
    os.close(segment_fd)  # the segment keeps its own close-on-exec duplicate
    control = segment.worker_control(worker)
    control.pid = os.getpid()
    control.state = "starting"
    control.beat()
    try:
        _work(segment, control, worker, generation)
    except BaseException as exc:
        if segment.is_shutdown and isinstance(exc, KeyboardInterrupt | SystemExit):
            return 0
        control.write_error(format_error(exc, _core.WORKER_ERROR_CAPACITY))
        control.state = "failed"
        log.error("failed:", exc_info=exc)
        return 1
    control.state = "exiting"
    return 0
