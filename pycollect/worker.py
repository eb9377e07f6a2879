"""The worker process: ``python -P -m pycollect.worker``, started by a collector's supervisor.

This module is the process's entry point and nothing else; the loop it runs is
:mod:`pycollect._workers.main`, and what a worker is started with (``-P`` and the
trainer's path, so that it imports the trainer's pycollect wherever the trainer runs) is
:mod:`pycollect._workers.contract`. It is a public name so that ``ps`` shows what a
worker is: ``python -P -m pycollect.worker``.

``python -P -m pycollect.worker --fork-server`` runs the fork server instead
(:mod:`pycollect._workers.forkserver`); the workers it forks show that command line
too, and the process name ``pycollect-wkr``.
"""

from __future__ import annotations

import os
import sys

from pycollect._workers.main import run

__all__ = ["run"]

if __name__ == "__main__":
    if sys.argv[1:] == ["--fork-server"]:
        from pycollect._workers.forkserver import serve

        os._exit(serve())
    status = run()
    # The environments are closed and the error (if any) is written: skip the interpreter's
    # teardown, which takes a second or more once torch is imported and would eat into the
    # supervisor's grace period.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
