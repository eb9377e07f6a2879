"""The fork server: worker processes that start in milliseconds instead of seconds.

A worker that imports torch takes about three seconds to start with fork+exec. The fork
server is a process the trainer starts early and in the background (when
:mod:`pycollect.collector` is imported, before the trainer's own ``import torch``, so the two
overlap) that imports numpy, torch, gymnasium and pycollect's worker modules once, with one
compute thread and without ever initialising CUDA, and then forks a worker per request. The
trainer itself is never forked (it is multi-threaded and may hold a CUDA context).

It runs as ``python -m pycollect.worker --fork-server``, in its own process group, and exits
when the trainer goes: it watches its control socket for end of file, and it has a parent-death
signal when it was started from the main thread. ``PYCOLLECT_FORK_SERVER=0`` turns it off
(every worker is then started with fork+exec).

Supervision is unchanged: the Rust supervisor sends each launch over its own connection
(``SCM_RIGHTS`` for stdio, the lifeline and every passed fd, plus the complete environment and
cwd); the server forks a middle child that forks the worker and exits at once, so the worker
is reparented to the trainer, which the supervisor made a child subreaper. The server reaps
the middle child before it replies with the worker's pid, so the supervisor then holds the
worker's pidfd exactly as for an exec'd child (see ``rust/pycollect-core/src/supervisor/
forkserver.rs``). The worker (see :func:`_become_worker`) takes its own process group, its
fds at their numbers (closing every other), the environment, waits until the trainer is its
parent, arms its parent-death signal, waits for the supervisor's go byte on its lifeline and
runs :func:`pycollect._engines.workers.main.run`.

A server that is not single-threaded when a request comes refuses it; a refusal, a dead
server or no reply makes the supervisor fall back to fork+exec (``python -m pycollect.worker``).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Sequence

from pycollect._engines.workers import contract

__all__ = [
    "COMM_SERVER",
    "COMM_WORKER",
    "ENV_ENABLE",
    "connect",
    "enabled",
    "serve",
    "server_pid",
    "start",
    "wait_ready",
]

ENV_ENABLE = "PYCOLLECT_FORK_SERVER"
"""``0`` turns the fork server off; anything else (or unset) leaves it on."""

COMM_SERVER = "pycollect-fsrv"
"""The fork server's process name (``/proc/<pid>/comm``, what ``ps -o comm`` shows)."""
COMM_WORKER = "pycollect-wkr"
"""The process name of a worker forked by the server (at most 15 characters)."""

_ENV_CONTROL_FD = "PYCOLLECT_FORK_SERVER_FD"
_ENV_PARENT = "PYCOLLECT_FORK_SERVER_PARENT"
_ENV_PDEATHSIG = "PYCOLLECT_FORK_SERVER_PDEATHSIG"
_REPARENT_TIMEOUT_S = 10.0  # the middle child exits right after its fork
_GO_TIMEOUT_S = 120.0  # the supervisor writes the go byte right after it got the pid
_MAX_REQUEST = 1 << 20  # bytes: the environment is the bulk of a request
_MAX_FDS = 64
_STOP_TIMEOUT_S = 2.0

log = logging.getLogger("pycollect.workers")

# -- the trainer's side -----------------------------------------------------------------------


class _Server:
    """One running fork server, seen from the trainer that started it."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = dict(os.environ)
        env.update(
            {
                _ENV_CONTROL_FD: str(theirs.fileno()),
                _ENV_PARENT: str(os.getpid()),
                # The kernel ties the parent-death signal to the thread that forks: only the
                # main thread lives as long as the trainer.
                _ENV_PDEATHSIG: "1" if threading.current_thread() is threading.main_thread() else "0",
                contract.ENV_SYS_PATH: contract.worker_env(hide_cuda=False)[contract.ENV_SYS_PATH],
                "OMP_NUM_THREADS": "1",
                "MKL_NUM_THREADS": "1",
            }
        )
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "pycollect.worker", "--fork-server"],
                env=env,
                stdin=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                process_group=0,  # Ctrl-C in the terminal is the trainer's; we leave with it
            )
        finally:
            theirs.close()
        self.control = ours
        self.owner = os.getpid()
        self.lock = threading.Lock()
        self.ready = False

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        """Close the control socket (the server exits on end of file) and reap the server."""
        self.control.close()
        try:
            self.process.wait(timeout=_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def wait_ready(self, timeout_s: float) -> bool:
        """Wait until the server has done its imports (it then says ``ready`` once)."""
        with self.lock:
            if self.ready:
                return True
            deadline = time.monotonic() + timeout_s
            while not self.ready and self.alive():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                if select.select([self.control], [], [], min(left, 0.1))[0]:
                    self.ready = self.control.recv(16) == b"ready"
                    if not self.ready:
                        break  # end of file: it exited
            return self.ready

    def connect(self) -> int | None:
        """A new connection for one supervisor (the caller closes it), or None."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            with self.lock:
                socket.send_fds(self.control, [b"conn"], [theirs.fileno()])
        except OSError as exc:
            ours.close()
            log.debug("fork server unreachable (%s)", exc)
            return None
        finally:
            theirs.close()
        return ours.detach()


_server: _Server | None = None
_lock = threading.Lock()
_in_server = False  # true in the server and in every process it forks


def enabled() -> bool:
    """Whether this process may use a fork server (Linux, not turned off, not a worker)."""
    return (
        sys.platform == "linux"
        and os.environ.get(ENV_ENABLE, "1") != "0"
        and not _in_server
        and contract.ENV_WORKER not in os.environ
    )


def start() -> None:
    """Start this process's fork server in the background, unless it runs or is turned off.

    Returns at once: the server does its imports while the caller goes on with its own.
    """
    global _server
    if not enabled():
        return
    with _lock:
        if (server := _own_server()) is not None and server.alive():
            return
        try:
            _server = _Server()
        except OSError as exc:
            log.debug("cannot start the fork server (%s); workers start with fork+exec", exc)
            _server = None
        else:
            atexit.register(_stop_at_exit, _server)


def _stop_at_exit(server: _Server) -> None:
    # At exit the server would see end of file anyway; closing first and waiting reaps it, so
    # that it is not left a zombie of a process that lives on (an embedding program).
    if server.owner == os.getpid():
        server.stop()


def connect() -> int | None:
    """A connection to the fork server for one supervisor, or None (then fork+exec).

    None when the server is turned off, was started by another process (this one is a fork of
    the trainer), or is not running; a server that died is started again for the collectors
    that come later.
    """
    if not enabled():
        return None
    server = _own_server()
    if server is None:
        log.debug("no fork server in this process; workers start with fork+exec")
        start()
        return None
    if not server.alive():
        log.debug("the fork server has exited (status %s); workers start with fork+exec", server.process.returncode)
        start()
        return None
    return server.connect()


def wait_ready(timeout_s: float = 60.0) -> bool:
    """Wait until this process's fork server has done its imports; False if it is not running.

    Collectors do not need this (a request that comes early just waits for the imports); it
    is for benchmarks and tests that want a warm server.
    """
    server = _own_server()
    return server is not None and server.wait_ready(timeout_s)


def server_pid() -> int | None:
    """The pid of this process's fork server while it runs."""
    server = _own_server()
    return server.process.pid if server is not None and server.alive() else None


def _own_server() -> _Server | None:
    """The fork server this process started (not one inherited through a fork of the trainer)."""
    server = _server
    return server if server is not None and server.owner == os.getpid() else None


# -- the server's side ------------------------------------------------------------------------


def _set_comm(name: str) -> None:
    with contextlib.suppress(OSError), open("/proc/self/comm", "w") as comm:
        comm.write(name)


def _preload() -> None:
    """Import once what every worker imports, so that a forked worker finds it loaded."""
    import numpy  # noqa: F401

    for name in ("torch", "gymnasium", "tensordict"):
        with contextlib.suppress(ImportError):
            __import__(name)
    import torch

    torch.set_num_threads(1)
    # Worker modules (see main._collect); importing them touches no CUDA.
    import pycollect._engines.workers.main
    import pycollect._engines.workers.spec
    import pycollect._rollout.actions
    import pycollect._rollout.runner
    import pycollect._rollout.seeding
    import pycollect.weights.scheme  # noqa: F401


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def serve() -> int:
    """Run the fork server (``python -m pycollect.worker --fork-server``); returns its exit status."""
    global _in_server
    _in_server = True
    _set_comm(COMM_SERVER)
    trainer = int(os.environ[_ENV_PARENT])
    if os.environ.get(_ENV_PDEATHSIG) == "1":
        from pycollect import _core

        _core.set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != trainer:
        return 0  # the trainer is already gone
    control = socket.socket(fileno=int(os.environ.pop(_ENV_CONTROL_FD)))
    os.set_inheritable(control.fileno(), False)
    try:
        _preload()
    except Exception:
        traceback.print_exc()
        return 1
    with contextlib.suppress(OSError):
        control.send(b"ready")
    conns: dict[int, socket.socket] = {}
    while True:
        readable, _, _ = select.select([control.fileno(), *conns], [], [])
        for fd in readable:
            if fd == control.fileno():
                try:
                    msg, fds, _, _ = socket.recv_fds(control, 16, 4)
                except OSError:
                    msg, fds = b"", []
                if not msg:
                    return 0  # end of file: the trainer is gone
                for new in fds:
                    os.set_inheritable(new, False)
                    conns[new] = socket.socket(fileno=new)
                continue
            conn = conns[fd]
            try:
                msg, fds, flags, _ = socket.recv_fds(conn, _MAX_REQUEST, _MAX_FDS)
            except OSError:
                msg, fds, flags = b"", [], 0
            if not msg:  # that supervisor is done
                conn.close()
                del conns[fd]
                continue
            try:
                if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
                    reply = b"error: request too large"
                else:
                    reply = _spawn(msg, fds, trainer, [control, *conns.values()])
            except Exception as exc:  # a bad request must not end the server
                reply = f"error: {type(exc).__name__}: {exc}".encode()
            finally:
                for received in fds:
                    os.close(received)
            with contextlib.suppress(OSError):
                conn.send(reply)


def _spawn(msg: bytes, fds: list[int], trainer: int, sockets: Sequence[socket.socket]) -> bytes:
    """Fork one worker for a request; the reply for the supervisor."""
    parts = msg.split(b"\0")
    if len(parts) < 4 or parts[0] != b"spawn":
        return b"error: malformed request"
    try:
        parent = int(parts[1])
        targets = [int(n) for n in parts[3].split(b",") if n]
    except ValueError:
        return b"error: malformed request"
    cwd = parts[2]
    env = dict(entry.split(b"=", 1) for entry in parts[4:] if b"=" in entry)
    if len(targets) != len(fds):
        return b"error: descriptor count does not match the request"
    if parent != trainer:
        return b"refused: the request does not come from this server's trainer"
    if (threads := _threads()) != 1:
        return b"refused: the fork server has %d threads; forking it is not safe" % threads
    read_end, write_end = os.pipe()
    try:
        middle = os.fork()
    except OSError as exc:
        os.close(read_end)
        os.close(write_end)
        return f"error: fork: {exc}".encode()
    if middle == 0:
        try:
            os.close(read_end)
            worker = os.fork()
            if worker == 0:
                os.close(write_end)
                _become_worker(parent, cwd, env, fds, targets, sockets)
            os.write(write_end, str(worker).encode())
        finally:
            os._exit(0)  # at once: this is what reparents the worker to the trainer
    os.close(write_end)
    chunks = []
    while chunk := os.read(read_end, 64):
        chunks.append(chunk)
    os.close(read_end)
    os.waitpid(middle, 0)  # reaped before the reply: the worker is the trainer's child by now
    pid = b"".join(chunks)
    if not pid:
        return b"error: the worker could not be forked"
    return b"ok " + pid


def _become_worker(
    parent: int,
    cwd: bytes,
    env: dict[bytes, bytes],
    fds: list[int],
    targets: list[int],
    sockets: Sequence[socket.socket],
) -> None:
    """Turn this forked process into a worker; never returns."""
    status = 1
    try:
        os.setpgid(0, 0)
        _set_comm(COMM_WORKER)
        for sock in sockets:
            sock.detach()  # the fds are closed below; no finaliser may close a reused number
        import fcntl

        floor = max(targets) + 1
        moved = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, floor) for fd in fds]
        for source, target in zip(moved, targets, strict=True):
            os.dup2(source, target, inheritable=True)
        keep = set(targets)
        for name in os.listdir("/proc/self/fd"):
            if int(name) not in keep:
                with contextlib.suppress(OSError):
                    os.close(int(name))
        os.environ.clear()
        os.environb.update(env)
        os.chdir(cwd)
        deadline = time.monotonic() + _REPARENT_TIMEOUT_S
        while os.getppid() != parent:  # the middle child is exiting
            if time.monotonic() > deadline:
                os._exit(1)
            time.sleep(0.0005)
        from pycollect import _core

        # Only now: armed while the middle child was our parent, its exit would have fired it.
        _core.set_parent_death_signal(signal.SIGKILL)
        if os.getppid() != parent:
            os._exit(1)  # the trainer died in between
        lifeline = int(os.environ[contract.ENV_LIFELINE_FD])
        ready, _, _ = select.select([lifeline], [], [], _GO_TIMEOUT_S)
        if not ready or os.read(lifeline, 1) != b"g":
            os._exit(0)  # the supervisor gave up on this launch: it started another
        if os.environ.get("PYTHONUNBUFFERED"):  # what an exec'd worker gets from the variable
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(AttributeError, ValueError):
                    stream.reconfigure(write_through=True)  # type: ignore[union-attr]
        from pycollect._engines.workers.main import run

        status = run()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        with contextlib.suppress(BaseException):
            traceback.print_exc()
    finally:
        os._exit(status)
