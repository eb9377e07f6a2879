"""pycollect's pytest plugin fails a test that leaves a process behind, and only then."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

pytestmark = pytest.mark.timeout(120)

LEAKY = """
import subprocess, sys
import pytest

def test_leaks_a_process():
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])

def test_cleans_up():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()

@pytest.mark.usefixtures("pycollect_no_leftovers")
def test_leaks_with_the_fixture_asked_for():
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
"""


def test_the_ini_option_checks_every_test(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\npycollect_check_leftovers = true\n")
    pytester.makepyfile(LEAKY)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, errors=2)  # the fixture fails the two leaking tests at teardown
    result.stdout.fnmatch_lines(["*the test left behind:*", "*process * -c import time; time.sleep(60)*"])


def test_without_the_option_only_tests_that_ask_are_checked(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(LEAKY)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, errors=1)
