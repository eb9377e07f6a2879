"""Shared fixtures: no test may leave a child process behind; headless dm_control."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

# Before dm_control is first imported: no OpenGL context is ever needed (the wrapper does not
# render), and without a display GLFW would only warn. Worker processes inherit it.
os.environ.setdefault("MUJOCO_GL", "disable")

import psutil
import pytest

# Worker processes get the trainer's sys.path, so they can import the factories module.
sys.path.insert(0, str(Path(__file__).parent))

# Interpreter-wide helpers multiprocessing keeps for the session; not leaks of a test.
_SESSION_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


def _children() -> set[int]:
    pids = set()
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                continue
            if any(helper in " ".join(child.cmdline()) for helper in _SESSION_HELPERS):
                continue
        except psutil.NoSuchProcess:
            continue
        pids.add(child.pid)
    return pids


@pytest.fixture(autouse=True)
def no_leftover_processes() -> Iterator[None]:
    """Fail a test that leaves a child process behind (after a short grace for reaping)."""
    before = _children()
    yield
    # Poll, never wait(): the workers are this process's children, and reaping them here would
    # take that job from pycollect's supervisor. The grace covers processes on their way out.
    deadline = time.monotonic() + 5.0
    while (extra := _children() - before) and time.monotonic() < deadline:
        time.sleep(0.05)
    if not extra:
        return
    for pid in extra:
        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(pid).kill()
    pytest.fail(f"test left behind processes {sorted(extra)}")
