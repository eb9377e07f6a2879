"""Checking that what a collector would allocate fits this machine, before it allocates anything.

A shared-memory segment is a memfd: it has no size limit of its own, and its pages are
populated when it is created, so one sized for ``frames_per_batch=10**13`` ends with the
kernel's OOM killer rather than an error. Both engines compute what they need from the rollout
fields first and compare it with the memory this process can still take; the collector's
``check_resources=False`` skips the check for those who know better.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

from pycollect.config import CollectorConfig
from pycollect.envs.specs import Field
from pycollect.exceptions import ConfigError

__all__ = [
    "BATCHES_HELD",
    "FIXED_FRAME_BYTES",
    "available_memory",
    "batch_bytes",
    "check_fits",
    "check_fits_before_env",
    "format_bytes",
]

BATCHES_HELD = 2
"""Owned batches a collector may need at once: the one being filled and one the caller holds."""


def format_bytes(count: float) -> str:
    """``1.2 PiB``, ``350.0 MiB``: binary units, one decimal."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(count) < 1024 or unit == "PiB":
            return f"{count:.1f} {unit}" if unit != "B" else f"{int(count)} B"
        count /= 1024
    raise AssertionError("unreachable")


def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_available() -> int | None:
    """What this process's cgroup (v2) still allows, if it sets a memory limit."""
    try:
        entries = Path("/proc/self/cgroup").read_text().splitlines()
        path = next(line.split("::", 1)[1] for line in entries if line.startswith("0::"))
        group = Path("/sys/fs/cgroup") / path.lstrip("/")
        limit = (group / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return max(int(limit) - int((group / "memory.current").read_text()), 0)
    except (OSError, ValueError, StopIteration):
        return None


def available_memory() -> int:
    """Bytes this process can still take: ``MemAvailable``, or less if its cgroup limits it."""
    known = [value for value in (_meminfo_available(), _cgroup_available()) if value is not None]
    return min(known) if known else 1 << 62  # no way to tell: do not refuse


def batch_bytes(fields: Iterable[Field], rows: int, steps: int) -> int:
    """Bytes of one ``[rows, steps]`` batch of ``fields``."""
    return sum(rows * steps * math.prod(field.shape) * field.dtype.itemsize for field in fields)


def check_fits(what: str, needed: int, config: CollectorConfig) -> None:
    """Raise :class:`ConfigError` if ``needed`` bytes (for ``what``) exceed the available memory.

    Raises:
        ConfigError: Saying how much was asked for, how much there is, and what to change.
    """
    if not config.check_resources:
        return
    available = available_memory()
    if needed <= available:
        return
    raise ConfigError(
        f"{what} would take {format_bytes(needed)}, but only {format_bytes(available)} of memory is available "
        f"(frames_per_batch={config.frames_per_batch}, envs_per_worker={config.envs_per_worker}, "
        f"num_workers={config.num_workers}); lower frames_per_batch, or pass check_resources=False "
        "if you know the memory will be there"
    )


FIXED_FRAME_BYTES = 4 + 6 + 8 + 8
"""Bytes per frame of the fields every rollout has whatever the env: the reward (float32), six
done flags (bool), the trajectory id and the policy version (int64). The env's observations and
actions, and the policy's outputs, come on top."""


def check_fits_before_env(config: CollectorConfig, what: str, frames: int) -> None:
    """Refuse, before any env is built, ``frames`` frames whose env-independent fields alone cannot fit.

    The full check (:func:`~pycollect._engines.resources.check_fits` on every field) needs the
    env's specs, so it runs after the probe env is built; this one catches the absurd sizes
    (``frames_per_batch=10**13``) before, as the collector promises.

    Raises:
        ConfigError: Saying how much was asked for, how much there is, and what to change.
    """
    if not config.check_resources:
        return
    needed, available = frames * FIXED_FRAME_BYTES, available_memory()
    if needed > available:
        raise ConfigError(
            f"{what} would take at least {format_bytes(needed)} (the fields every env has alone), but only "
            f"{format_bytes(available)} of memory is available (frames_per_batch={config.frames_per_batch}, "
            f"envs_per_worker={config.envs_per_worker}, num_workers={config.num_workers}); lower "
            "frames_per_batch, or pass check_resources=False if you know the memory will be there"
        )
