"""Supervision events go through the ``pycollect`` loggers; a library adds no handler but a NullHandler."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from pycollect import Collector, WorkerCrashedError, WorkerStoppedError
from pycollect.testing.envs import ExitingEnv, RaisingEnv


def _events(caplog: pytest.LogCaptureFixture) -> list[tuple[str, int, str]]:
    """(event kind, level, message) of every supervision record, in order."""
    return [
        (record.worker_event.kind, record.levelno, record.getMessage())
        for record in caplog.records
        if record.name == "pycollect.workers"
    ]


def test_importing_pycollect_configures_no_logging() -> None:
    code = (
        "import logging, pycollect; "
        "print(logging.getLogger().handlers, [type(h).__name__ for h in logging.getLogger('pycollect').handlers])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[] ['NullHandler']"


@pytest.mark.timeout(120)
def test_a_crashing_worker_is_logged_restarted_then_given_up(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="pycollect")
    with (
        Collector(RaisingEnv, frames_per_batch=20, num_workers=1, max_restarts=1) as collector,
        pytest.raises(WorkerCrashedError),
    ):
        for _ in collector:
            pass
    events = _events(caplog)
    assert [(kind, level) for kind, level, _ in events] == [
        ("started", logging.DEBUG),
        ("exited", logging.WARNING),
        ("restarting", logging.WARNING),
        ("started", logging.DEBUG),
        ("exited", logging.WARNING),
        ("gave_up", logging.ERROR),
    ]
    messages = [message for _, _, message in events]
    assert messages[0].startswith("worker 0 (generation 1) started, pid ")
    assert messages[1] == "worker 0 (generation 1) exited with status 1"
    assert messages[2].startswith("restarting worker 0 as generation 2 in ")
    assert messages[5] == (
        "worker 0 (generation 2) exited with status 1; restart policy 'permanent' gave up after 1 restart(s): "
        "ZeroDivisionError: boom at step 7"
    )


@pytest.mark.timeout(120)
def test_a_clean_exit_is_info_and_a_stop_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pycollect")
    with (
        Collector(ExitingEnv, frames_per_batch=20, num_workers=1, restart="transient") as collector,
        pytest.raises(WorkerStoppedError),
    ):
        for _ in collector:
            pass
    assert [(kind, level) for kind, level, _ in _events(caplog)] == [
        ("exited", logging.INFO),
        ("stopped", logging.WARNING),
    ]
    assert _events(caplog)[1][2] == (
        "worker 0 (generation 1) exited with status 0; restart policy 'transient' does not restart a worker "
        "that ends cleanly"
    )


@pytest.mark.timeout(120)
def test_a_worker_logs_its_failure_with_traceback_on_stderr(capfd: pytest.CaptureFixture[str]) -> None:
    with (
        Collector(RaisingEnv, frames_per_batch=20, num_workers=1, max_restarts=0) as collector,
        pytest.raises(WorkerCrashedError),
    ):
        for _ in collector:
            pass
    err = capfd.readouterr().err
    assert "pycollect worker 0 (generation 1): failed:\nTraceback (most recent call last):\n" in err, err
    assert err.rstrip().endswith("ZeroDivisionError: boom at step 7"), err
