"""Reshaping batches as TorchRL's collectors can: one row per trajectory, stacked workers, marked rollout ends."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tensordict import TensorDictBase

from pycollect._keys import MASK, NEXT_OBS_PREFIX, TRAJ_IDS, Key

__all__ = ["mark_rollout_ends", "split_trajectories", "stack_workers"]


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


def mark_rollout_ends(batch: TensorDictBase, done_groups: Sequence[Key] = ()) -> None:
    """``set_truncated``: the last step of every row is truncated (and done) unless it terminated.

    ``done_groups``: where the env's own done flags sit (:attr:`~pycollect.envs.EnvSpecs.done_groups`,
    per-agent flags), marked the same way.
    """
    last = (slice(None),) * (batch.batch_dims - 1) + (-1,)  # the time dimension is the batch's last
    for group in ((), *done_groups):
        terminated = batch.get((*NEXT_OBS_PREFIX, *group, "terminated"))[last]
        batch.get((*NEXT_OBS_PREFIX, *group, "truncated"))[last] |= ~terminated
        batch.get((*NEXT_OBS_PREFIX, *group, "done"))[last] = True


def stack_workers(batch: TensorDictBase, num_workers: int) -> TensorDictBase:
    """``cat_results="stack"``: ``[W * K, T]`` as ``[W, K, T]`` (a view), as TorchRL stacks workers."""
    rows, steps = batch.batch_size
    stacked = batch.reshape(num_workers, rows // num_workers, steps)
    stacked.names = [None, None, "time"]
    return stacked
