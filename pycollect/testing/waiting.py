"""Waiting for a condition under a deadline: what tests do instead of sleeping."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["wait_until"]

T = TypeVar("T")


def wait_until(condition: Callable[[], T], *, timeout_s: float, what: str, poll_s: float = 0.01) -> T:
    """Call ``condition`` until it returns something truthy, and return that.

    Args:
        condition: Checked repeatedly; must be cheap.
        timeout_s: The deadline. It bounds a hang, it is not a promise about speed: choose it
            generously (tens of seconds for anything that starts processes).
        what: What is being waited for, for the error message.
        poll_s: The pause between checks.

    Raises:
        TimeoutError: ``condition`` stayed falsy until the deadline.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(poll_s)
