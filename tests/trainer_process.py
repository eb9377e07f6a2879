"""A trainer in a child process with two workers, for tests that kill or interrupt the trainer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pycollect.testing import wait_until
from pycollect.testing.leaks import child_processes

TRAINER = """
import pycollect
from pycollect.testing.envs import CountingEnv
c = pycollect.Collector(CountingEnv, frames_per_batch=8, envs_per_worker=2, num_workers=2)
try:
    c.next_batch()
    print(" ".join(str(w.pid) for w in c.stats().workers), flush=True)
    while True:
        c.next_batch()
except KeyboardInterrupt:
    c.shutdown()
    print("clean", flush=True)
"""


def start_trainer(script: str = TRAINER) -> tuple[subprocess.Popen[str], list[int]]:
    """Start the trainer (``script``); return it once it printed its workers' pids, with them."""
    trainer = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parent,
    )
    assert trainer.stdout is not None
    line = trainer.stdout.readline()
    assert line, trainer.stderr.read() if trainer.stderr else "trainer died"
    return trainer, [int(pid) for pid in line.split()]


def alive(pids: list[int]) -> list[int]:
    """Which of ``pids`` still run (zombies count as gone)."""
    running = child_processes(1) | child_processes()  # reparented to init, or still ours
    return [pid for pid in pids if pid in running or _running(pid)]


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_gone(pids: list[int], timeout_s: float) -> None:
    """Wait until none of ``pids`` runs."""
    wait_until(lambda: not alive(pids), timeout_s=timeout_s, what=f"workers {pids} to exit")
