"""Argument checks shared by the public constructors; each error names the bad value."""

from __future__ import annotations

from typing import Any

from pycollect.exceptions import ConfigError

__all__ = ["non_negative_int", "optional_positive_int", "positive_int", "seed_arg", "total_frames_arg"]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def positive_int(name: str, value: Any) -> int:
    """Return ``value`` if it is an int > 0, else raise :class:`ConfigError` naming it."""
    if not _is_int(value) or value <= 0:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def non_negative_int(name: str, value: Any) -> int:
    """Return ``value`` if it is an int >= 0, else raise :class:`ConfigError` naming it."""
    if not _is_int(value) or value < 0:
        raise ConfigError(f"{name} must be a non-negative integer, got {value!r}")
    return int(value)


def optional_positive_int(name: str, value: Any) -> int | None:
    """Like :func:`positive_int`, but ``None`` passes through."""
    return None if value is None else positive_int(name, value)


def total_frames_arg(value: Any) -> int:
    """``total_frames``: a positive int, or -1 for an endless collector."""
    if _is_int(value) and (value == -1 or value > 0):
        return int(value)
    raise ConfigError(f"total_frames must be a positive integer or -1 (endless), got {value!r}")


def seed_arg(value: Any) -> int | None:
    """``seed``: ``None`` or a non-negative int."""
    if value is None:
        return None
    return non_negative_int("seed", value)


def positive_seconds(name: str, value: Any) -> float:
    """A duration in seconds: a finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < float("inf"):
        raise ConfigError(f"{name} must be a positive number of seconds, got {value!r}")
    return float(value)
