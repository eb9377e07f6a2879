"""Checkpoint files: written whole or not at all, the last few kept, the newest found again.

A checkpoint is a collector's :meth:`~pycollect.Collector.state_dict`, saved with
``torch.save`` as ``checkpoint-<batches>.pt`` in the checkpoint directory. It is written to a
temporary file in that directory, flushed to disk (``fsync``), then renamed over its final
name, and the directory is synced: a crash or a SIGKILL at any moment leaves the previous
checkpoints and either the whole new one or none of it. It is read back with
``torch.load(weights_only=True)``: tensors, numbers, strings, bytes and containers only, so a
checkpoint cannot run code.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from pycollect.exceptions import ConfigError

__all__ = ["latest_checkpoint", "load_checkpoint", "save_checkpoint"]

_NAME = re.compile(r"^checkpoint-(\d+)\.pt$")


def _checkpoints(directory: Path) -> list[tuple[int, Path]]:
    found = []
    for path in directory.iterdir():
        match = _NAME.match(path.name)
        if match:
            found.append((int(match.group(1)), path))
    return sorted(found)


def save_checkpoint(state: Mapping[str, Any], directory: str | os.PathLike[str], batches: int, keep: int) -> Path:
    """Write ``state`` as ``checkpoint-<batches>.pt`` in ``directory``, atomically; keep the newest ``keep``.

    Returns:
        The checkpoint's path.
    """
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / f"checkpoint-{batches:09d}.pt"
    partial = folder / f".{final.name}.{os.getpid()}.partial"
    with open(partial, "wb") as file:
        torch.save(dict(state), file)
        file.flush()
        os.fsync(file.fileno())
    os.replace(partial, final)
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)  # the rename itself reaches the disk
    finally:
        os.close(descriptor)
    for _, old in _checkpoints(folder)[:-keep]:
        old.unlink(missing_ok=True)
    return final


def latest_checkpoint(directory: str | os.PathLike[str]) -> Path | None:
    """The newest checkpoint in ``directory`` (``None``: none, or no such directory)."""
    folder = Path(directory)
    if not folder.is_dir():
        return None
    found = _checkpoints(folder)
    return found[-1][1] if found else None


def load_checkpoint(source: str | os.PathLike[str]) -> dict[str, Any]:
    """The state dict in a checkpoint file, or in the newest checkpoint of a directory.

    Raises:
        ConfigError: No checkpoint there, or a file that is not a whole checkpoint (truncated,
            another program's), naming the file.
    """
    path = Path(source)
    if path.is_dir():
        newest = latest_checkpoint(path)
        if newest is None:
            raise ConfigError(f"no checkpoint in {str(path)!r} (files named checkpoint-<batches>.pt)")
        path = newest
    if not path.is_file():
        raise ConfigError(f"no checkpoint file {str(path)!r}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise ConfigError(
            f"{str(path)!r} is not a whole pycollect checkpoint (truncated, or another program's): "
            f"{type(exc).__name__}: {exc}"
        ) from None
    if not isinstance(state, dict):
        raise ConfigError(f"{str(path)!r} holds a {type(state).__name__}, not a pycollect state_dict")
    return state
