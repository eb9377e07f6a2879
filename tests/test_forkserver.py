"""The fork server: workers forked from it are supervised exactly like exec'd ones, every way it
can fail (turned off, refusing, dead, stopped, silent) falls back to fork+exec without losing a
worker, it exits with its trainer, and it takes requests from nobody else."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

import pytest
from trainer_process import start_trainer, wait_gone

from pycollect import Collector
from pycollect._workers import forkserver
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
            assert cmdline[1:4] == [b"-P", b"-m", b"pycollect.worker"] and b"--fork-server" not in cmdline


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
        # The next collector finds the server dead, starts a new one and uses it.
        fd = forkserver.connect()
        assert fd is not None
        os.close(fd)
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
import pycollect
from pycollect._workers import forkserver
pycollect.prestart()
assert forkserver.wait_ready(120.0)
print(forkserver.server_pid(), flush=True)
os._exit(0)  # no atexit: the server must notice on its own
"""


def test_the_server_exits_when_its_trainer_exits() -> None:
    trainer = subprocess.run(
        [sys.executable, "-c", EXITING_TRAINER], capture_output=True, text=True, timeout=120, check=True
    )
    wait_gone([int(trainer.stdout.split()[-1])], timeout_s=60)


# -- a server that stops answering (issue 16, item 8) --------------------------------------------


def _warm_server() -> int:
    forkserver.start()
    assert forkserver.wait_ready(120.0), "the fork server did not come up"
    pid = forkserver.server_pid()
    assert pid is not None
    return pid


@pytest.mark.parametrize("how", ["stopped", "silent"])
def test_a_server_that_does_not_answer_is_replaced_and_its_collector_starts_with_exec(
    monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    if how == "silent":
        # A server that is not in the stopped state but does not answer (wedged): only the
        # acknowledgement's deadline tells.
        monkeypatch.setattr(forkserver._Server, "stopped", lambda self: False)
        monkeypatch.setattr(forkserver, "_ACK_TIMEOUT_S", 1.0)
    old = _warm_server()
    handle = os.pidfd_open(old)
    try:
        signal.pidfd_send_signal(handle, signal.SIGSTOP)
        wait_until(lambda: _stat(old)[0] in ("T", "t"), timeout_s=30, what="the fork server to stop")
        with _collector() as c:
            c.next_batch()
            assert [(e.launched_by, e.fallback) for e in _started(c)] == [("exec", None), ("exec", None)]
        # Killed and reaped, not left behind stopped (the leak check does not see servers).
        assert old not in _servers_of(os.getpid())
        with _collector() as c:  # a later collector gets a fresh server
            c.next_batch()
            assert [e.launched_by for e in _started(c)] == ["fork_server", "fork_server"]
        assert forkserver.server_pid() not in (None, old)
        assert _servers_of(os.getpid()) == [forkserver.server_pid()]
    finally:
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(handle, signal.SIGCONT)
        os.close(handle)


def test_ctrl_c_interrupts_the_wait_for_a_server_that_does_not_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forkserver._Server, "stopped", lambda self: False)
    monkeypatch.setattr(forkserver, "_ACK_TIMEOUT_S", 120.0)
    server = _warm_server()
    handle = os.pidfd_open(server)

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.pidfd_send_signal(handle, signal.SIGSTOP)
        wait_until(lambda: _stat(server)[0] in ("T", "t"), timeout_s=30, what="the fork server to stop")
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        with pytest.raises(KeyboardInterrupt) as caught:
            _collector()
        # Raised in the trainer's wait for the server, not after a wait in native code.
        assert "_await" in [frame.name for frame in traceback.extract_tb(caught.value.__traceback__)]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        signal.pidfd_send_signal(handle, signal.SIGCONT)
        os.close(handle)
    # Resumed, the server answers the request that was interrupted; the next one is not confused by it.
    with _collector() as c:
        c.next_batch()
        assert [e.launched_by for e in _started(c)] == ["fork_server", "fork_server"]
    assert forkserver.server_pid() == server


# -- the server exits with its trainer, whatever thread started it (item 10) ---------------------

THREAD_TRAINER = """
import os, sys, threading, time
from pycollect._workers import forkserver
thread = threading.Thread(target=forkserver.start)  # no parent-death signal for the server then
thread.start()
thread.join()
assert forkserver.wait_ready(120.0)
# "dup": the forked child keeps the control socket open whatever pycollect closes at fork.
kept = os.dup(forkserver._server.control.fileno()) if sys.argv[1] == "dup" else None
child = os.fork()
if child == 0:
    time.sleep(600)
    os._exit(0)
print(forkserver.server_pid(), child, flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("holds", ["fork", "dup"])
def test_a_server_started_from_a_thread_exits_when_its_trainer_is_killed(holds: str) -> None:
    trainer = subprocess.Popen(
        [sys.executable, "-c", THREAD_TRAINER, holds], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert trainer.stdout is not None and trainer.stderr is not None
    line = trainer.stdout.readline()
    assert line, trainer.stderr.read()
    server, child = (int(pid) for pid in line.split())
    child_handle = os.pidfd_open(child)
    try:
        trainer.send_signal(signal.SIGKILL)
        trainer.wait(timeout=10)
        wait_gone([server], timeout_s=30)
    finally:
        signal.pidfd_send_signal(child_handle, signal.SIGKILL)
        os.close(child_handle)
        trainer.stdout.close()
        trainer.stderr.close()


# -- what the server takes on its control socket (item 17) ---------------------------------------


def test_a_descriptor_that_is_not_a_socket_does_not_end_the_server() -> None:
    server = _warm_server()
    own = forkserver._own_server()
    assert own is not None
    read_end, write_end = os.pipe()
    try:
        with own.lock:
            socket.send_fds(own.control, [b"conn 999999"], [read_end])
    finally:
        os.close(read_end)
        os.close(write_end)
    with _collector() as c:
        c.next_batch()
        assert [e.launched_by for e in _started(c)] == ["fork_server", "fork_server"]
    assert forkserver.server_pid() == server


STRANGER = """
import os, socket, sys
control = socket.socket(fileno=int(sys.argv[1]))
if sys.argv[2] == "nobody":
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)
read_end, _ = os.pipe()
socket.send_fds(control, [b"conn 1"], [read_end])  # not a socket
ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
socket.send_fds(control, [b"conn 2"], [theirs.fileno()])  # a socket, but ours: a stranger's
theirs.close()
try:
    ours.send(b"hello")
    reply = ours.recv(4096)
except (BrokenPipeError, ConnectionResetError):  # closed, with or before our request
    reply = b""
print("closed" if not reply else repr(reply), flush=True)
"""


@pytest.mark.parametrize("who", ["same-user", "nobody"])
def test_the_server_takes_nothing_from_another_process(who: str) -> None:
    server = _warm_server()
    own = forkserver._own_server()
    assert own is not None
    held = os.dup(own.control.fileno())  # what an os.fork() child of the trainer could hold
    try:
        result = subprocess.run(
            [sys.executable, "-c", STRANGER, str(held), who],
            pass_fds=(held,),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(held)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "closed"  # refused and closed: no reply, no worker for it
    with _collector() as c:
        c.next_batch()
        assert [e.launched_by for e in _started(c)] == ["fork_server", "fork_server"]
    assert forkserver.server_pid() == server
