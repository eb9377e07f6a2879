"""Rollout arrays as a caller-owned ``TensorDict`` batch: memory, zeroing and wrapping.

Both engines build their batches here: in-process rollouts are written straight into arrays
from :func:`allocate`; worker rollouts are copied (or viewed) out of shared memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from pycollect._batch.recycle import RecycledMemory
from pycollect._keys import Key
from pycollect._rollout.fields import NEVER_WRITTEN
from pycollect.envs.specs import Field

__all__ = ["allocate", "nested_tensors", "to_tensordict"]


def allocate(fields: tuple[Field, ...], rows: int, steps: int, memory: RecycledMemory) -> dict[Key, np.ndarray]:
    """Arrays of shape ``[rows, steps, *shape]`` for every field, for a caller-owned batch.

    They come from ``memory`` (reused once a previous batch is released). Only the fields a
    rollout never writes are zeroed: :meth:`~pycollect._rollout.runner.EnvRunner.rollout` writes
    every element of the others, and so does a copy out of shared memory.
    """
    arrays = memory.arrays([((rows, steps, *field.shape), field.dtype) for field in fields])
    out = {field.key: array for field, array in zip(fields, arrays, strict=True)}
    for key in NEVER_WRITTEN:
        if key in out:
            out[key][...] = False
    return out


def to_tensordict(arrays: Mapping[Key, np.ndarray], device: torch.device | None = None) -> TensorDict:
    """Wrap rollout arrays (without copying them) in a ``[K, T]`` TensorDict.

    The last batch dimension is named ``"time"``, as TorchRL's collectors name it. With a
    ``device`` other than the CPU the data is copied there.
    """
    first = next(iter(arrays.values()))
    # Built from one nested dict: a ``set`` per key costs twice as much, for every batch.
    td = _unchecked(nested_tensors(arrays), torch.Size(first.shape[:2]))
    if device is not None and device.type != "cpu":
        td = td.to(device)
    return td


def nested_tensors(arrays: Mapping[Key, np.ndarray]) -> dict[str, Any]:
    """The arrays as tensors (no copy) in nested dicts, one level per key part."""
    nested: dict[str, Any] = {}
    for key, array in arrays.items():
        level = nested
        for part in key[:-1]:
            level = level.setdefault(part, {})
        level[key[-1]] = torch.from_numpy(array)
    return nested


def _unchecked(nested: dict[str, Any], batch_size: torch.Size) -> TensorDict:
    """``TensorDict(nested, batch_size, names=[None, "time"])``, without its per-leaf checks.

    The public constructor validates every leaf's device and shape, which took a third of the
    in-process loop's time per batch for small envs; these arrays are ours and fit by
    construction. ``_new_unsafe`` is tensordict's own constructor for that (the version range in
    ``pyproject.toml`` holds it; ``tests/test_batch.py`` compares its result with the public one).
    """
    for name, value in nested.items():
        if isinstance(value, dict):
            nested[name] = _unchecked(value, batch_size)
    return TensorDict._new_unsafe(nested, batch_size=batch_size, names=[None, "time"])
