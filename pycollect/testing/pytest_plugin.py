"""pycollect's pytest plugin (entry point ``pytest11``), active wherever pycollect is installed.

It adds the fixture ``pycollect_no_leftovers``, which fails a test that leaves a child
process or a pycollect shared-memory segment behind (after giving exiting processes a few
seconds), or a segment the test process still maps once the garbage collector has run, and
kills the processes it found so the next test starts clean. Use it per test
(``@pytest.mark.usefixtures("pycollect_no_leftovers")``) or for a whole suite with the ini
option::

    [tool.pytest.ini_options]
    pycollect_check_leftovers = true
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pycollect.testing.leaks import leftovers, snapshot

__all__ = ["pycollect_no_leftovers"]

_OPTION = "pycollect_check_leftovers"


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the ini option that turns the leftover check on for every test."""
    parser.addini(_OPTION, type="bool", default=False, help="fail any test that leaves a process or segment behind")


@pytest.fixture
def pycollect_no_leftovers() -> Iterator[None]:
    """Fail the test if it leaves a child process, a pycollect segment or a mapping of one behind."""
    before = snapshot()
    yield
    found = leftovers(before)
    if found:
        pytest.fail(f"the test left behind:\n{found.describe()}", pytrace=False)


@pytest.fixture(autouse=True)
def _pycollect_check_leftovers(request: pytest.FixtureRequest) -> None:
    if request.config.getini(_OPTION):
        request.getfixturevalue("pycollect_no_leftovers")
