"""Running a call that may never return (a stuck simulator, a dead socket) under a deadline.

A daemon thread runs the call; the caller waits for it at most the deadline, then goes on. A
call that is still running is left to finish, or to end with the interpreter: a thread cannot be
stopped, but a trainer must not hang because an env does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["within"]


def within(call: Callable[[], object], timeout_s: float, *, name: str) -> bool:
    """Run ``call()`` in a daemon thread named ``name``; whether it returned within ``timeout_s``.

    Raises:
        BaseException: What ``call()`` raised, if it returned (raised) within the deadline.
    """
    done = threading.Event()
    failed: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # handed to the caller below
            failed.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, name=name, daemon=True).start()
    if not done.wait(timeout_s):
        return False
    if failed:
        raise failed[0]
    return True
