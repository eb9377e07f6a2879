"""Promises about time: how fast failures are noticed and processes go away.

These are not unit tests: on a loaded machine they can fail for reasons that are not bugs, so
they are deselected from the normal run (``-m 'not timing'`` in pyproject.toml) and run alone,
one at a time, by CI: ``python -m pytest -m timing``. Each states its promise in its name.
"""

from __future__ import annotations

import signal
import time

import pytest
from test_transport import _segment, start_waiting_consumer
from trainer_process import alive, start_trainer, wait_gone

from pycollect import Collector, WorkerCrashedError
from pycollect.testing.envs import HangingEnv

pytestmark = [pytest.mark.timing, pytest.mark.timeout(120)]


def test_no_worker_outlives_a_sigkilled_trainer_by_2_s() -> None:
    trainer, workers = start_trainer()
    trainer.send_signal(signal.SIGKILL)
    trainer.wait(timeout=10)
    killed = time.monotonic()
    wait_gone(workers, timeout_s=30)
    assert time.monotonic() - killed < 2.0, f"workers {workers} outlived the trainer by more than 2 s"


def test_ctrl_c_shuts_a_trainer_down_within_5_s() -> None:
    trainer, workers = start_trainer()
    sent = time.monotonic()
    trainer.send_signal(signal.SIGINT)
    out, _ = trainer.communicate(timeout=60)
    assert "clean" in out and not alive(workers)
    assert time.monotonic() - sent < 5.0


def test_ctrl_c_reaches_a_waiting_consumer_within_1_s() -> None:
    child = start_waiting_consumer(_segment(64))
    sent = time.monotonic()  # CLOCK_MONOTONIC is system-wide: the child's timestamp compares
    child.send_signal(signal.SIGINT)
    out, _ = child.communicate(timeout=30)
    caught = float(out.split()[-1])
    assert caught - sent < 1.0, f"KeyboardInterrupt took {caught - sent:.2f} s"


def test_a_hung_env_is_reported_within_the_heartbeat_timeout_plus_10_s() -> None:
    with Collector(HangingEnv, frames_per_batch=8, num_workers=1, heartbeat_timeout_s=1.0, restart="never") as c:
        started = time.monotonic()
        with pytest.raises(WorkerCrashedError, match="stopped beating its heartbeat"):
            c.next_batch()
        assert time.monotonic() - started < 1.0 + 10.0
