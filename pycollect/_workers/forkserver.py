"""The fork server: worker processes that start in milliseconds instead of seconds.

A worker that imports torch takes about three seconds to start with fork+exec. The fork
server is a process that imports numpy, torch, gymnasium and pycollect's worker modules once,
with one compute thread and without ever initialising CUDA, and then forks a worker per
request. The trainer itself is never forked (it is multi-threaded and may hold a CUDA
context).

Importing pycollect starts nothing. The server is started where it is needed: by the first
collector with workers (:func:`connect`), which waits for its imports (in short slices, so
Ctrl-C gets through, and for at most :data:`_READY_TIMEOUT_S`) and then uses it, or earlier
by :func:`pycollect.prestart` (:func:`start`), which returns at once, so that the server's
imports overlap the caller's own (the ``pycollect`` command calls it first thing).
``PYCOLLECT_FORK_SERVER=0`` turns it off (every worker is then started with fork+exec).

It runs as ``python -P -m pycollect.worker --fork-server`` (the trainer's ``sys.path``, not the
working directory, decides which ``pycollect`` it imports: see :mod:`.contract`), in ``/``, in
its own process group, and exits when the trainer goes, whatever thread started it: it
watches the trainer's pidfd, and its control socket for end of file (the trainer's end is
closed in every ``os.fork()`` child, which cannot use it anyway); it also has a parent-death
signal when it was started from the main thread.

Every collector asks the server for its own connection over the control socket and waits a
few seconds at most (:data:`_ACK_TIMEOUT_S`) for the acknowledgement. A server that does not
answer in time, or that is stopped (SIGSTOP, a debugger, a frozen container), is killed,
reaped and replaced by a fresh one for the collectors that come later; that collector's
workers start with fork+exec. A supervisor then waits at most 10 s for each reply
(``REPLY_TIMEOUT`` in ``forkserver.rs``).

The server trusts nothing but its trainer: it takes a message only when the kernel-reported
credentials of its sender (``SO_PASSCRED``) are the trainer's pid and uid, and a connection
only when it is a unix ``SOCK_SEQPACKET`` socket that the trainer made (``SO_PEERCRED``); it
closes whatever else it is sent (a pipe instead of a socket, a socket of another process) and
never ends on bad input.

Supervision is unchanged: the Rust supervisor sends each launch over its own connection
(``SCM_RIGHTS`` for stdio, the lifeline and every passed fd, plus the complete environment and
cwd); the server forks a middle child that forks the worker and exits at once, so the worker
is reparented to the trainer, which the supervisor made a child subreaper. The server reaps
the middle child before it replies with the worker's pid, so the supervisor then holds the
worker's pidfd exactly as for an exec'd child (see ``rust/pycollect-core/src/supervisor/
forkserver.rs``). The worker (see :func:`_become_worker`) takes its own process group, its
fds at their numbers (closing every other), the environment, waits until the trainer is its
parent, arms its parent-death signal, waits for the supervisor's go byte on its lifeline and
runs :func:`pycollect._workers.main.run`.

A server that is not single-threaded when a request comes refuses it; a refusal, a dead
server or no reply makes the supervisor fall back to fork+exec (``python -P -m pycollect.worker``).
"""

from __future__ import annotations

import array
import atexit
import contextlib
import json
import logging
import os
import select
import signal
import socket
import stat
import struct
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pycollect._workers import contract

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
_READY_TIMEOUT_S = 60.0  # its imports (torch): seconds, more on a busy machine
_ACK_TIMEOUT_S = 5.0  # a server in its loop answers in microseconds; this is for a busy machine
_SLICE_S = 0.1  # the trainer's waits: Ctrl-C, a stopped or dead server are seen this often
_REPARENT_TIMEOUT_S = 10.0  # the middle child exits right after its fork
_GO_TIMEOUT_S = 120.0  # the supervisor writes the go byte right after it got the pid
_MAX_REQUEST = 1 << 20  # bytes: the environment is the bulk of a request
_MAX_FDS = 64
_STOP_TIMEOUT_S = 2.0
_UCRED = struct.Struct("iII")  # struct ucred: pid, uid, gid

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
                # main thread lives as long as the trainer. The server watches the trainer's
                # pidfd in any case.
                _ENV_PDEATHSIG: "1" if threading.current_thread() is threading.main_thread() else "0",
                **contract.path_env(),
                "OMP_NUM_THREADS": "1",
                "MKL_NUM_THREADS": "1",
            }
        )
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-P", "-m", "pycollect.worker", "--fork-server"],
                env=env,
                cwd="/",  # it must not keep the trainer's directory busy; workers get theirs per request
                stdin=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                process_group=0,  # Ctrl-C in the terminal is the trainer's; we leave with it
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.control = ours
        self.owner = os.getpid()
        self.lock = threading.Lock()  # one exchange on the control socket at a time
        self.ready = False
        self._sequence = 0

    def alive(self) -> bool:
        return self.process.poll() is None

    def stopped(self) -> bool:
        """Whether it is stopped (SIGSTOP, a debugger): it cannot answer until someone resumes it."""
        try:
            with open(f"/proc/{self.process.pid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        return state in (b"T", b"t")

    def stop(self) -> None:
        """Close the control socket (the server exits on end of file) and reap the server."""
        self.control.close()
        try:
            self.process.wait(timeout=_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """Kill it (SIGKILL ends a stopped process too) and reap it."""
        self.control.close()
        with contextlib.suppress(OSError):
            self.process.kill()
        self.process.wait()

    def _await(self, wanted: Callable[[bytes], bool], timeout_s: float) -> tuple[str, bytes]:
        """Read the server's messages until one is ``wanted``; call with :attr:`lock` held.

        Returns ``("ok", message)``, or ``("gone" | "stopped" | "timeout", b"")``. The wait is
        cut into short slices: a signal handler (Ctrl-C's ``KeyboardInterrupt``) runs between
        them, and a server that dies or is stopped is noticed within one.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            if select.select([self.control], [], [], _SLICE_S)[0]:
                try:
                    message = self.control.recv(4096)
                except OSError:
                    return "gone", b""
                if not message:
                    return "gone", b""
                if message == b"ready":
                    self.ready = True
                if wanted(message):
                    return "ok", message
                continue
            if not self.alive():
                return "gone", b""
            if self.stopped():
                return "stopped", b""
            if time.monotonic() >= deadline:
                return "timeout", b""

    def wait_ready(self, timeout_s: float) -> str:
        """Wait until the server has done its imports (it then says ``ready`` once): ``"ok"`` or why not."""
        with self.lock:
            if self.ready:
                return "ok"
            return self._await(lambda message: message == b"ready", timeout_s)[0]

    def connect(self, timeout_s: float) -> tuple[int | None, str]:
        """A new connection for one supervisor (the caller closes it), or None and why not.

        The server acknowledges every connection it takes; no acknowledgement within
        ``timeout_s`` means it does not answer.
        """
        with self.lock:
            self._sequence += 1
            tag = b"conn %d" % self._sequence
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                # DONTWAIT: a stopped server's full queue must not block us.
                socket.send_fds(self.control, [tag], [theirs.fileno()], socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL)
            except OSError as exc:
                ours.close()
                return None, f"unreachable ({exc})"
            finally:
                theirs.close()
            try:
                status, reply = self._await(lambda message: message.startswith(tag + b" "), timeout_s)
            except BaseException:  # Ctrl-C
                ours.close()
                raise
            if reply == tag + b" ok":
                return ours.detach(), ""
            ours.close()
            if status == "ok":
                return None, f"refused the connection ({reply[len(tag) + 1 :].decode(errors='replace')})"
            if status == "timeout":
                return None, f"did not answer in {timeout_s:g} s"
            return None, "stopped" if status == "stopped" else "exited"


_server: _Server | None = None
_lock = threading.Lock()
_in_server = False  # true in the server and in every process it forks
_at_exit = False


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

    Returns at once: the server does its imports while the caller goes on with its own. This
    is :func:`pycollect.prestart`.
    """
    if enabled():
        _running()


def _running() -> _Server | None:
    """This process's running fork server, started now if there is none (or it has exited)."""
    global _server, _at_exit
    with _lock:
        if (server := _own_server()) is not None and server.alive():
            return server
        if server is not None:
            log.debug("the fork server has exited (status %s); starting another", server.process.returncode)
            server.kill()  # reaps it
        try:
            _server = _Server()
        except OSError as exc:
            log.debug("cannot start the fork server (%s); workers start with fork+exec", exc)
            _server = None
            return None
        if not _at_exit:
            atexit.register(_stop_at_exit)
            _at_exit = True
        return _server


def _stop_at_exit() -> None:
    # At exit the server would see end of file anyway; closing first and waiting reaps it, so
    # that it is not left a zombie of a process that lives on (an embedding program).
    if (server := _own_server()) is not None:
        server.stop()


def _close_in_fork_child() -> None:
    # An os.fork() child of the trainer cannot use the trainer's server (_own_server), and the
    # server must see end of file when the trainer goes, not when the last child does.
    if _server is not None:
        with contextlib.suppress(OSError):
            _server.control.close()


os.register_at_fork(after_in_child=_close_in_fork_child)


def _replace(server: _Server, why: str) -> None:
    """Kill an unusable server and start a fresh one in the background for later collectors."""
    global _server
    log.warning(
        "the fork server (pid %d) %s; it is replaced, and these workers start with fork+exec", server.process.pid, why
    )
    with _lock:
        if _server is server:
            _server = None
    server.kill()
    start()


def connect() -> int | None:
    """A connection to the fork server for one supervisor, or None (then fork+exec).

    Starts the server if this process has none running (the first collector with workers)
    and waits for its imports. None when the server is turned off, cannot start, does not
    finish its imports in time, or does not answer (it is then replaced, see the module
    docs).
    """
    if not enabled():
        return None
    server = _running()
    if server is None:
        return None
    status = server.wait_ready(_READY_TIMEOUT_S)
    if status == "timeout":
        log.warning("the fork server is not ready after %g s; these workers start with fork+exec", _READY_TIMEOUT_S)
        return None  # still importing: later collectors will find it ready
    if status != "ok":
        _replace(server, "exited before it was ready" if status == "gone" else "is stopped")
        return None
    fd, why = server.connect(_ACK_TIMEOUT_S)
    if fd is None:
        _replace(server, why)
    return fd


def wait_ready(timeout_s: float = 60.0) -> bool:
    """Wait until this process's fork server has done its imports; False if it is not running.

    Collectors do this themselves; it is for benchmarks and tests that want a warm server.
    """
    server = _own_server()
    return server is not None and server.wait_ready(timeout_s) == "ok"


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
    # Worker modules (see serve.serve and rollouts.RolloutWork); importing them touches no CUDA.
    import pycollect._rollout.actions
    import pycollect._rollout.runner
    import pycollect._rollout.seeding
    import pycollect._workers.main
    import pycollect._workers.rollouts
    import pycollect._workers.serve
    import pycollect._workers.spec
    import pycollect._workers.steps
    import pycollect.weights.scheme  # noqa: F401


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


@dataclass
class _Message:
    """One message received on a unix socket, with what the kernel says about its sender."""

    data: bytes
    fds: list[int] = field(default_factory=list)
    sender: tuple[int, int] | None = None  # (pid, uid), from SCM_CREDENTIALS
    truncated: bool = False
    eof: bool = False  # the other end is closed (an empty message still carries credentials)

    def close_fds(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def _receive(sock: socket.socket, size: int, max_fds: int) -> _Message:
    """Receive one message; its descriptors are close-on-exec and the caller's to close."""
    space = socket.CMSG_SPACE(max_fds * 4) + socket.CMSG_SPACE(_UCRED.size)
    data, ancillary, flags, _ = sock.recvmsg(size, space, socket.MSG_CMSG_CLOEXEC)
    message = _Message(data, truncated=bool(flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC)))
    for level, kind, payload in ancillary:
        if level != socket.SOL_SOCKET:
            continue
        if kind == socket.SCM_RIGHTS:
            fds = array.array("i")
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
            message.fds.extend(fds)
        elif kind == socket.SCM_CREDENTIALS and len(payload) >= _UCRED.size:
            pid, uid, _ = _UCRED.unpack_from(payload)
            message.sender = (pid, uid)
    message.eof = not data and not ancillary
    return message


def _accept(fd: int, trainer: int) -> socket.socket | str:
    """The connection behind a received descriptor, or why it is refused (the caller closes ``fd`` then)."""
    if not stat.S_ISSOCK(os.fstat(fd).st_mode):
        return "not a socket"
    sock = socket.socket(fileno=os.dup(fd))
    try:
        if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_SEQPACKET:
            sock.close()
            return "not a unix SOCK_SEQPACKET socket"
        pid, uid, _ = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
        if (pid, uid) != (trainer, os.getuid()):
            sock.close()
            return f"made by pid {pid}, uid {uid}, not by the trainer"
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)  # before the ack, so before any request
    except BaseException:
        sock.close()
        raise
    os.set_inheritable(sock.fileno(), False)
    return sock


class _Loop:
    """The server's event loop: the control socket, one connection per supervisor, the trainer's pidfd."""

    def __init__(self, control: socket.socket, trainer: int, trainer_fd: int | None) -> None:
        self.control = control
        self.trainer = trainer
        self.trainer_fd = trainer_fd
        self.me = (trainer, os.getuid())
        self.conns: dict[int, socket.socket] = {}

    def run(self) -> int:
        watched = [self.control.fileno()] + ([self.trainer_fd] if self.trainer_fd is not None else [])
        # Without a pidfd (an old kernel) the trainer's pid is checked once a second instead.
        timeout = None if self.trainer_fd is not None else 1.0
        while True:
            readable, _, _ = select.select([*watched, *self.conns], [], [], timeout)
            if self.trainer_fd is None and os.getppid() != self.trainer:
                return 0
            for fd in readable:
                if fd == self.trainer_fd:
                    return 0  # the trainer has exited
                if fd == self.control.fileno():
                    if not self._on_control():
                        return 0
                elif fd in self.conns:
                    self._on_request(fd)

    def _on_control(self) -> bool:
        """Handle one message on the control socket; False at end of file (the trainer is gone)."""
        try:
            message = _receive(self.control, 64, 4)
        except OSError:
            return False
        if message.eof:
            return False
        try:
            if message.sender != self.me:
                return True  # not the trainer (a forked child of it): no reply, it would reach the trainer
            parts = message.data.split(b" ")
            if len(parts) != 2 or parts[0] != b"conn" or not parts[1].isdigit():
                return True  # nothing to answer
            try:
                if message.truncated or len(message.fds) != 1:
                    reply = b"refused: expected one descriptor"
                else:
                    accepted = _accept(message.fds[0], self.trainer)
                    if isinstance(accepted, str):
                        reply = b"refused: " + accepted.encode()
                    else:
                        self.conns[accepted.fileno()] = accepted
                        reply = b"ok"
            except Exception as exc:  # bad input must not end the server, and the trainer waits for an answer
                reply = f"refused: {type(exc).__name__}: {exc}".encode()
            with contextlib.suppress(OSError):
                self.control.send(message.data + b" " + reply)
        finally:
            message.close_fds()  # a connection taken is a duplicate
        return True

    def _on_request(self, fd: int) -> None:
        """Handle one request of a supervisor (one worker to fork)."""
        conn = self.conns[fd]
        try:
            message = _receive(conn, _MAX_REQUEST, _MAX_FDS)
        except OSError:
            message = _Message(b"", eof=True)
        if message.eof:  # that supervisor is done
            conn.close()
            del self.conns[fd]
            return
        try:
            if message.sender != self.me:
                return  # not the trainer's supervisor: dropped without a reply
            if message.truncated:
                reply = b"error: request too large"
            else:
                reply = _spawn(message.data, message.fds, self.trainer, [self.control, *self.conns.values()])
        except Exception as exc:  # a bad request must not end the server
            reply = f"error: {type(exc).__name__}: {exc}".encode()
        finally:
            message.close_fds()
        with contextlib.suppress(OSError):
            conn.send(reply)


def serve() -> int:
    """Run the fork server (``python -m pycollect.worker --fork-server``); returns its exit status."""
    global _in_server
    _in_server = True
    _set_comm(COMM_SERVER)
    contract.restore_user_env()
    if contract.ENV_SYS_PATH in os.environ:
        sys.path[:] = json.loads(os.environ.pop(contract.ENV_SYS_PATH))
    trainer = int(os.environ.pop(_ENV_PARENT))
    if os.environ.pop(_ENV_PDEATHSIG, None) == "1":
        from pycollect._native import _core

        _core.set_parent_death_signal(signal.SIGKILL)
    try:
        # Readable once the trainer has exited, whichever of its threads started us.
        trainer_fd: int | None = os.pidfd_open(trainer)
    except ProcessLookupError:
        return 0
    except OSError:
        trainer_fd = None
    if os.getppid() != trainer:
        return 0  # the trainer is already gone (the pid may be another process's now)
    control = socket.socket(fileno=int(os.environ.pop(_ENV_CONTROL_FD)))
    os.set_inheritable(control.fileno(), False)
    control.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    try:
        _preload()
    except Exception:
        traceback.print_exc()
        return 1
    with contextlib.suppress(OSError):
        control.send(b"ready")
    return _Loop(control, trainer, trainer_fd).run()


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
        from pycollect._native import _core

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
        from pycollect._workers.main import run

        status = run()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        with contextlib.suppress(BaseException):
            traceback.print_exc()
    finally:
        os._exit(status)
