"""The fork server: workers forked from it are supervised exactly like exec'd ones, and every
way it can fail (turned off, refusing, dead) falls back to fork+exec without losing a worker."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from trainer_process import start_trainer, wait_gone

from pycollect import Collector
from pycollect._engines.workers import forkserver
from pycollect.testing import wait_until
from pycollect.testing.envs import CountingEnv
from pycollect.testing.leaks import child_processes

pytestmark = pytest.mark.timeout(180)


def _stat(pid: int) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after the command name: state, ppid, pgrp, ..."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _comm(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().strip()


def _started(c: Collector) -> list:
    return [e for e in c.stats().events if e.kind == "started"]


def _kill_and_restart(c: Collector, worker: int) -> Any:
    """SIGKILL ``worker``, wait for its generation 2 to start, collect 3 batches; its ``started`` event."""
    os.kill(c.stats().workers[worker].pid, signal.SIGKILL)
    wait_until(
        lambda: any(e.worker == worker and e.generation == 2 for e in _started(c)),
        timeout_s=60,
        what=f"worker {worker}'s restart",
    )
    for _ in range(3):
        c.next_batch()  # both workers deliver
    return next(e for e in _started(c) if e.worker == worker and e.generation == 2)


def _collector() -> Collector:
    return Collector(CountingEnv, frames_per_batch=16, envs_per_worker=2, num_workers=2, env_kwargs={"length": 1000})


@pytest.fixture
def server() -> int:
    """This process's fork server, running and done with its imports; its pid."""
    forkserver.start()
    assert forkserver.wait_ready(120.0), "the fork server did not come up"
    pid = forkserver.server_pid()
    assert pid is not None
    return pid


def test_a_forked_worker_is_a_child_of_the_trainer_in_its_own_group(server: int) -> None:
    with _collector() as c:
        c.next_batch()
        started = _started(c)
        assert [e.launched_by for e in started] == ["fork_server", "fork_server"]
        assert all(e.fallback is None for e in started)
        pids = [w.pid for w in c.stats().workers]
        for pid in pids:
            _, ppid, pgrp = _stat(pid)[:3]
            assert int(ppid) == os.getpid()  # reparented to the trainer, which reaps it
            assert int(pgrp) == pid  # its own process group, as an exec'd worker
            assert _comm(pid) == forkserver.COMM_WORKER
        # The leak check sees the workers but not the long-lived server.
        children = child_processes()
        assert set(pids) <= children
        assert server not in children
    assert not set(pids) & child_processes()


def test_a_restart_after_sigkill_comes_from_the_server(server: int) -> None:
    with _collector() as c:
        c.next_batch()
        restart = _kill_and_restart(c, 1)
        assert restart.launched_by == "fork_server"
        assert forkserver.server_pid() == server  # the same server
        assert _comm(c.stats().workers[1].pid) == forkserver.COMM_WORKER


def test_with_the_server_turned_off_workers_are_execed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(forkserver.ENV_ENABLE, "0")
    with _collector() as c:
        c.next_batch()
        started = _started(c)
        assert [(e.launched_by, e.fallback) for e in started] == [("exec", None), ("exec", None)]
        for w in c.stats().workers:
            cmdline = Path(f"/proc/{w.pid}/cmdline").read_bytes().split(b"\0")
            assert cmdline[1:3] == [b"-m", b"pycollect.worker"] and b"--fork-server" not in cmdline


def test_a_refusing_server_falls_back_to_exec(monkeypatch: pytest.MonkeyPatch) -> None:
    # A stand-in server that refuses every request, as the real one does when it is not
    # single-threaded.
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    requests: list[bytes] = []

    def refuse() -> None:
        while True:
            msg, fds, _, _ = socket.recv_fds(ours, 1 << 20, 64)
            for fd in fds:
                os.close(fd)
            if not msg:
                return
            requests.append(msg)
            ours.send(b"refused: the fork server has 3 threads; forking it is not safe")

    thread = threading.Thread(target=refuse, daemon=True)
    thread.start()
    monkeypatch.setattr(forkserver, "connect", lambda: os.dup(theirs.fileno()))
    try:
        with _collector() as c:
            c.next_batch()
            started = _started(c)
    finally:
        theirs.close()
        thread.join(timeout=10)
        ours.close()
    assert len(requests) == 1  # the first refusal makes this supervisor stop asking
    assert requests[0].startswith(b"spawn\0%d\0" % os.getpid())
    assert [e.launched_by for e in started] == ["exec", "exec"]
    assert all(e.fallback is not None and "3 threads" in e.fallback for e in started)


def test_the_server_refuses_to_fork_when_it_has_threads() -> None:
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        reply = forkserver._spawn(b"spawn\0%d\0/\0\0" % os.getppid(), [], os.getppid(), [])
    finally:
        stop.set()
        thread.join()
    assert reply.startswith(b"refused: the fork server has ") and b"threads" in reply


def test_the_death_of_the_server_mid_run_falls_back_without_losing_a_worker(server: int) -> None:
    try:
        with _collector() as c:
            c.next_batch()
            os.kill(server, signal.SIGKILL)
            wait_until(lambda: _stat(server)[0] == "Z", timeout_s=30, what="the fork server to die")
            restart = _kill_and_restart(c, 0)
            assert restart.launched_by == "exec" and restart.fallback is not None
            assert [w.state for w in c.stats().workers] == ["running", "running"]
    finally:
        # The next collector finds the server dead and starts a new one for those after it.
        assert forkserver.connect() is None
        assert forkserver.wait_ready(120.0)
        assert forkserver.server_pid() not in (None, server)


def _servers_of(pid: int) -> list[int]:
    """The fork servers among the children of ``pid``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if int(_stat(int(entry))[1]) == pid and _comm(int(entry)) == forkserver.COMM_SERVER:
                    found.append(int(entry))
            except (OSError, IndexError):
                continue
    return found


def test_forked_workers_and_the_server_die_with_a_sigkilled_trainer() -> None:
    trainer, workers = start_trainer()
    assert [_comm(pid) for pid in workers] == [forkserver.COMM_WORKER] * 2  # forked, not exec'd
    for pid in workers:
        assert int(_stat(pid)[1]) == trainer.pid
    servers = _servers_of(trainer.pid)
    assert len(servers) == 1
    trainer.send_signal(signal.SIGKILL)
    trainer.wait(timeout=10)
    wait_gone(workers, timeout_s=60)  # their parent-death signal (armed after reparenting)
    wait_gone(servers, timeout_s=60)  # its control socket's end of file, or its own pdeathsig


EXITING_TRAINER = """
import os
from pycollect import Collector
from pycollect._engines.workers import forkserver
assert forkserver.wait_ready(120.0)
print(forkserver.server_pid(), flush=True)
os._exit(0)  # no atexit: the server must notice on its own
"""


def test_the_server_exits_when_its_trainer_exits() -> None:
    trainer = subprocess.run(
        [sys.executable, "-c", EXITING_TRAINER], capture_output=True, text=True, timeout=120, check=True
    )
    wait_gone([int(trainer.stdout.split()[-1])], timeout_s=60)
