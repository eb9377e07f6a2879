"""Small helpers for error messages that must fit on one line (the CLI prints them so)."""

from __future__ import annotations

__all__ = ["first_line"]


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message, or ``"(no message)"``."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else "(no message)"
