"""The batch format: which fields a rollout has, and how arrays become a ``TensorDict``.

A rollout of ``T`` steps over ``K`` environments is a set of arrays of shape
``[K, T, *field_shape]``, one per field, keyed as in TorchRL's collectors. The same field list
sizes the in-process buffers and (with worker processes) the shared-memory slots.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from pycollect._batch.recycle import RecycledMemory
from pycollect._rollout.actions import PolicyOutput
from pycollect._rollout.keys import (
    ACTION,
    DONE,
    MASK,
    NEXT_DONE,
    NEXT_OBS_PREFIX,
    NEXT_TERMINATED,
    NEXT_TRUNCATED,
    POLICY_VERSION,
    REWARD,
    TERMINATED,
    TRAJ_IDS,
    TRUNCATED,
    Key,
)
from pycollect.envs.specs import EnvSpecs

__all__ = ["BatchField", "allocate", "batch_fields", "split_trajectories", "to_tensordict"]

_FLAG = (1,)  # TorchRL keeps rewards and done flags with a trailing singleton dimension


@dataclass(frozen=True)
class BatchField:
    """One array of a rollout: ``[K, T, *shape]`` values of ``dtype`` under ``key``."""

    key: Key
    shape: tuple[int, ...]
    dtype: np.dtype[Any]


def batch_fields(specs: EnvSpecs, outputs: tuple[PolicyOutput, ...] = ()) -> tuple[BatchField, ...]:
    """Every field of a rollout, in a fixed order.

    Args:
        specs: The environment's observation and action fields.
        outputs: Extra policy outputs to keep (e.g. a log-probability).
    """
    fields = [BatchField(spec.key, spec.shape, spec.dtype) for spec in specs.observation]
    fields += [BatchField((*NEXT_OBS_PREFIX, *spec.key), spec.shape, spec.dtype) for spec in specs.observation]
    fields.append(BatchField(ACTION, specs.action.shape, specs.action.dtype))
    fields.append(BatchField(REWARD, _FLAG, np.dtype(np.float32)))
    for key in (DONE, TERMINATED, TRUNCATED, NEXT_DONE, NEXT_TERMINATED, NEXT_TRUNCATED):
        fields.append(BatchField(key, _FLAG, np.dtype(np.bool_)))
    fields.append(BatchField(TRAJ_IDS, (), np.dtype(np.int64)))
    fields.append(BatchField(POLICY_VERSION, (), np.dtype(np.int64)))
    taken = {field.key for field in fields}
    for output in outputs:
        if output.key in taken:
            continue  # e.g. a policy that echoes "done": the environment's value wins
        fields.append(BatchField(output.key, output.shape, output.dtype))
    return tuple(fields)


_NEVER_WRITTEN = (DONE, TERMINATED, TRUNCATED)  # root flags: always False with auto-reset


def allocate(fields: tuple[BatchField, ...], rows: int, steps: int, memory: RecycledMemory) -> dict[Key, np.ndarray]:
    """Arrays of shape ``[rows, steps, *shape]`` for every field, for a caller-owned batch.

    They come from ``memory`` (reused once a previous batch is released). Only the fields a
    rollout never writes are zeroed: :meth:`~pycollect._rollout.runner.EnvRunner.rollout` writes
    every element of the others, and so does a copy out of shared memory.
    """
    arrays = memory.arrays([((rows, steps, *field.shape), field.dtype) for field in fields])
    out = {field.key: array for field, array in zip(fields, arrays, strict=True)}
    for key in _NEVER_WRITTEN:
        if key in out:
            out[key][...] = False
    return out


def to_tensordict(arrays: Mapping[Key, np.ndarray], device: torch.device | None = None) -> TensorDict:
    """Wrap rollout arrays (without copying them) in a ``[K, T]`` TensorDict.

    The last batch dimension is named ``"time"``, as TorchRL's collectors name it. With a
    ``device`` other than the CPU the data is copied there.
    """
    first = next(iter(arrays.values()))
    td = TensorDict(batch_size=list(first.shape[:2]), names=[None, "time"])
    for key, array in arrays.items():
        td.set(key, torch.from_numpy(array))
    if device is not None and device.type != "cpu":
        td = td.to(device)
    return td


def split_trajectories(batch: TensorDictBase) -> TensorDictBase:
    """Cut a ``[K, T]`` batch into one row per trajectory, as TorchRL's ``split_trajs`` does.

    Returns:
        A ``[n_traj, T_max]`` TensorDict, rows ordered by trajectory id, zero-padded at the
        end, with a boolean ``("collector", "mask")`` that is True on real steps.
    """
    traj_ids = batch.get(TRAJ_IDS)
    flat = batch.reshape(-1)
    flat_ids = traj_ids.reshape(-1)
    unique_ids, inverse, counts = torch.unique(flat_ids, sorted=True, return_inverse=True, return_counts=True)
    n_traj, t_max = unique_ids.numel(), int(counts.max())
    # Position of each step inside its trajectory: steps of one trajectory are contiguous in
    # time within one env row, so a stable sort by trajectory keeps them in time order.
    order = torch.sort(inverse, stable=True).indices
    starts = torch.cumsum(counts, 0) - counts
    position = torch.empty_like(order)
    position[order] = torch.arange(order.numel()) - torch.repeat_interleave(starts, counts)
    index = torch.zeros(n_traj, t_max, dtype=torch.long)
    mask = torch.zeros(n_traj, t_max, dtype=torch.bool)
    index[inverse, position] = torch.arange(flat_ids.numel())
    mask[inverse, position] = True
    out = flat[index.reshape(-1)].reshape(n_traj, t_max)

    def pad(value: torch.Tensor) -> torch.Tensor:
        keep = mask.reshape(n_traj, t_max, *([1] * (value.ndim - 2)))
        return torch.where(keep, value, torch.zeros((), dtype=value.dtype, device=value.device))

    out = out.apply(pad)
    out.set(MASK, mask.to(out.device) if out.device is not None else mask)
    out.names = [None, "time"]
    return out
