"""Importing this module starts the fork server in the background (see :mod:`.forkserver`).

:mod:`pycollect.collector` imports it before torch, so that the server's imports overlap the
trainer's own.
"""

from __future__ import annotations

from pycollect._engines.workers import forkserver

forkserver.start()
