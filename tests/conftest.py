"""Shared fixtures. Every test is checked for leftovers: no child process and no pycollect
shared-memory segment may outlive the test that created it."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

sys.path.insert(0, str(Path(__file__).parent))


def _shm_segments() -> set[str]:
    """Named segments this process created (pycollect names them ``pycollect-<pid>-...``;
    filtering by pid keeps the check correct when pytest-xdist runs tests in parallel)."""
    mine = f"pycollect-{os.getpid()}-"
    try:
        return {name for name in os.listdir("/dev/shm") if name.startswith(mine)}
    except FileNotFoundError:
        return set()


# Interpreter-wide helpers that multiprocessing starts once and keeps for the whole session
# (torchrl's replay buffers start the resource tracker); they are not leaks of a test.
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
def no_leftovers() -> Iterator[None]:
    """Fail a test that leaves a process or a /dev/shm segment behind."""
    children_before, shm_before = _children(), _shm_segments()
    yield
    deadline = time.monotonic() + 5.0
    while True:
        extra_children = _children() - children_before
        extra_shm = _shm_segments() - shm_before
        if not extra_children and not extra_shm:
            return
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    for pid in extra_children:
        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(pid).kill()
    pytest.fail(f"test left behind processes {sorted(extra_children)} and shm segments {sorted(extra_shm)}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """In CI a skipped test is a failure: every test must run there."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if os.environ.get("CI") and reporter is not None and reporter.stats.get("skipped"):
        reporter.write_line(f"CI: {len(reporter.stats['skipped'])} test(s) were skipped; failing the run")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
