"""``pycollect.prestart()``: start the fork server early, so that its imports overlap yours."""

from __future__ import annotations

from pycollect._workers import forkserver

__all__ = ["prestart"]


def prestart() -> None:
    """Start the fork server in the background now, so that collectors with workers start fast.

    Importing pycollect starts no process. The first :class:`~pycollect.Collector` with
    ``num_workers >= 1`` starts the fork server (the process that forks workers with numpy,
    torch and gymnasium already imported) and waits for its imports, about as long as one
    ``import torch``. Calling this first thing in a training script, before its own imports,
    lets the server do its imports meanwhile, and the first collector then finds it ready.

    Returns at once. Does nothing if the server runs already, or is turned off
    (``PYCOLLECT_FORK_SERVER=0``), or in a worker process. The server exits with this process.
    """
    forkserver.start()
