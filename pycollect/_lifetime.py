"""What ends a process's collectors when the process itself ends, is told to, or forks.

"Collectors" here are every owner of worker processes: ``Collector`` and the worker backend of
a vector env (``make_vec``, ``SB3VecEnv``); each has ``shutdown()`` and ``_forget()``.

* Interpreter exit: every live collector shuts down (atexit), so workers are reaped in order.
* SIGTERM (what ``docker stop``, SLURM and Kubernetes send): by default it kills a Python
  process on the spot, skipping that order, so environments never get their ``close()``. Once a
  collector exists, SIGTERM instead shuts every live collector down (shutdown flag, grace,
  SIGTERM and SIGKILL to each worker's process group, reap), then goes on to the handler that
  was installed before, or, if that was the default, raises ``SystemExit(128 + SIGTERM)`` in
  the main thread, as Ctrl-C raises ``KeyboardInterrupt``. A handler installed later replaces
  this one and must shut collectors down itself (or call the one it replaced).
* ``os.fork()``: the child gets copies of the parent's collectors but owns none of their
  workers; it forgets them, so that neither its exit nor its garbage collection touches the
  parent's workers (the native handles also refuse to act outside the process that made them),
  and SIGTERM gets back the handling it had before pycollect's.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import threading
import weakref
from types import FrameType
from typing import Any, Protocol

__all__ = ["Closable", "track", "untrack"]


class Closable(Protocol):
    """What ends with the process: shut down at exit and on SIGTERM, forgotten by a fork child."""

    def shutdown(self) -> None:
        """Stop its workers; a second call does nothing."""

    def _forget(self) -> None: ...


_LIVE: weakref.WeakSet[Any] = weakref.WeakSet()
_previous_sigterm: Any = None
_installed_in: int | None = None  # the pid whose SIGTERM handler is ours


def track(collector: Closable) -> None:
    """Make ``collector`` end with the process; install the SIGTERM handling on first use."""
    _LIVE.add(collector)
    _install_sigterm_handler()


def untrack(collector: Closable) -> None:
    """Forget ``collector`` (it shut down)."""
    _LIVE.discard(collector)


def _shutdown_all() -> None:
    for collector in list(_LIVE):
        collector.shutdown()


atexit.register(_shutdown_all)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    for collector in list(_LIVE):  # a checkpoint first, while the workers still run (checkpoint_dir)
        before = getattr(collector, "_before_termination", None)
        if before is not None:
            with contextlib.suppress(Exception):  # stopping the workers comes first
                before()
    _shutdown_all()
    previous = _previous_sigterm
    if callable(previous):
        previous(signum, frame)
    else:
        raise SystemExit(128 + signum)


def _install_sigterm_handler() -> None:
    global _previous_sigterm, _installed_in
    if _installed_in == os.getpid() or threading.current_thread() is not threading.main_thread():
        return  # done already, or not possible: signal handlers belong to the main thread
    current = signal.getsignal(signal.SIGTERM)
    if current is _on_sigterm:  # inherited through a fork: the chain is already in place
        _installed_in = os.getpid()
        return
    if current is signal.SIG_IGN:
        return  # the program chose to ignore SIGTERM; respect that
    _previous_sigterm = current if callable(current) else None
    signal.signal(signal.SIGTERM, _on_sigterm)
    _installed_in = os.getpid()


def _forget_after_fork() -> None:
    """In a forked child: forget the parent's collectors and give SIGTERM back its previous handling.

    The child (a multiprocessing or TorchRL worker, say) owns no collector, so a SIGTERM must do
    to it what it would without pycollect, not raise ``SystemExit`` wherever the child is. A
    collector the child makes installs the handling again.
    """
    global _installed_in
    for collector in list(_LIVE):
        collector._forget()
    _LIVE.clear()
    if _installed_in is not None and signal.getsignal(signal.SIGTERM) is _on_sigterm:
        with contextlib.suppress(ValueError):  # forked from a thread other than the main one: none to restore
            signal.signal(signal.SIGTERM, _previous_sigterm or signal.SIG_DFL)
    _installed_in = None


os.register_at_fork(after_in_child=_forget_after_fork)
