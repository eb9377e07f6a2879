"""Shared test setup.

Every test is checked for leftovers by pycollect's own pytest plugin
(``pycollect.testing.pytest_plugin``, switched on by ``pycollect_check_leftovers`` in
pyproject.toml): no child process and no pycollect shared-memory segment may outlive the test.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """In CI a skipped test is a failure: every test must run there."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if os.environ.get("CI") and reporter is not None and reporter.stats.get("skipped"):
        reporter.write_line(f"CI: {len(reporter.stats['skipped'])} test(s) were skipped; failing the run")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
