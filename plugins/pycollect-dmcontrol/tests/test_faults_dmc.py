"""Issue 42's targets on dm_control cheetah-run: a resumed run and a run whose workers are killed
deliver the uninterrupted run's batches, hash for hash."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

from pycollect import Collector
from pycollect.testing.batches import batch_digest

pytestmark = pytest.mark.timeout(300)

ENV = "dm_control:cheetah-run"


def _collector(**settings: Any) -> Collector:
    return Collector(ENV, **{"frames_per_batch": 64, "envs_per_worker": 2, "seed": 11, **settings})


@pytest.mark.parametrize("engine", ["inprocess", "workers", "central"])
def test_cheetah_run_resumes_byte_for_byte(engine: str) -> None:
    settings: dict[str, Any] = {"engine": engine}
    if engine != "inprocess":
        settings |= {"num_workers": 2, "snapshots": True}
    with _collector(**settings) as whole:
        expected = [batch_digest(whole.next_batch()) for _ in range(30)]
    with _collector(**settings) as first:
        assert [batch_digest(first.next_batch()) for _ in range(10)] == expected[:10]
        state = first.state_dict(env_states=True)
    with _collector(**settings, resume=state) as resumed:
        assert [batch_digest(resumed.next_batch()) for _ in range(20)] == expected[10:]


def test_cheetah_run_workers_killed_every_few_batches_are_replayed() -> None:
    with _collector(num_workers=2) as calm:
        expected = [batch_digest(calm.next_batch()) for _ in range(50)]
    with _collector(num_workers=2, recovery="replay", max_restarts=40, restart_window_s=600) as killed:
        got = []
        for b in range(50):
            got.append(batch_digest(killed.next_batch()))
            if b % 5 == 2:
                pid = killed.stats().workers[b % 2].pid
                if pid is not None:
                    os.kill(pid, signal.SIGKILL)
        assert killed.stats().restarts >= 5
    assert got == expected
