"""Counting finished episodes and their returns from the batches themselves.

Working from batch data (trajectory ids, rewards, done flags) gives the same answer whether
the environments stepped in this process or in workers, in sync or async mode.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from pycollect._keys import NEXT_DONE, REWARD, TRAJ_IDS

__all__ = ["EpisodeRecord"]

_FORGET_AFTER = 1000  # batches after which an unfinished trajectory is forgotten (cut by a reset)


@dataclass
class EpisodeRecord:
    """Finished episodes so far: how many, their returns and lengths.

    Attributes:
        count: Episodes finished.
        return_sum: Sum of their undiscounted returns.
        length_sum: Sum of their lengths in steps.
        recent_returns: Returns of the last 100 episodes, oldest first.
    """

    count: int = 0
    return_sum: float = 0.0
    length_sum: int = 0
    recent_returns: list[float] = field(default_factory=list)
    _open: dict[int, tuple[float, int, int]] = field(default_factory=dict, repr=False)
    _batches: int = field(default=0, repr=False)

    @property
    def mean_return(self) -> float:
        """Mean return over every finished episode (NaN before the first)."""
        return self.return_sum / self.count if self.count else float("nan")

    def update(self, batch: TensorDictBase) -> None:
        """Account for one ``[N, T]`` batch (before any trajectory split).

        A trajectory is a run of equal ids along a row (an id changes only where an episode
        starts), so the runs are found with one comparison per frame instead of a sort; only
        the runs that touch a row's ends meet trajectories of other batches. The frames are
        handled by numpy, the few runs as Python lists: a numpy call on a handful of values
        costs more than a Python loop over them.
        """
        traj_ids = batch.get(TRAJ_IDS)
        steps = traj_ids.shape[-1]
        ids = _host(traj_ids).reshape(-1, steps)
        starts = np.empty(ids.shape, bool)
        starts[:, 0] = True
        np.not_equal(ids[:, 1:], ids[:, :-1], out=starts[:, 1:])
        starts = starts.reshape(-1)
        run = np.cumsum(starts)  # each frame's run, counted from 1
        run -= 1
        first = np.flatnonzero(starts)  # each run's first frame (flat)
        rewards = _host(batch.get(REWARD)).reshape(-1)  # float32, summed in float64 by bincount
        sums = np.bincount(run, weights=rewards, minlength=first.size).tolist()
        lengths = np.bincount(run, minlength=first.size).tolist()
        finished = set(run[_host(batch.get(NEXT_DONE)).reshape(-1)].tolist())
        run_ids = ids.reshape(-1)[first].tolist()
        self._batches += 1
        open_runs, ended = self._open, []
        for n, (traj, frame) in enumerate(zip(run_ids, first.tolist(), strict=True)):
            if frame % steps == 0 and traj in open_runs:  # at a row's start: it goes on from earlier
                before, before_steps, _ = open_runs.pop(traj)
                sums[n] += before
                lengths[n] += before_steps
            if n in finished:
                ended.append((traj, n))
            else:  # at most one per row, at its end
                open_runs[traj] = (sums[n], lengths[n], self._batches)
        ended.sort()  # in id order, as before
        returns = [sums[n] for _, n in ended]
        self.count += len(returns)
        self.length_sum += sum(lengths[n] for _, n in ended)
        for total in returns:  # one at a time: the same sum, to the last bit, as adding them as they finish
            self.return_sum += total
        self.recent_returns.extend(returns)
        del self.recent_returns[:-100]
        if self._batches % 100 == 0:
            stale = self._batches - _FORGET_AFTER
            self._open = {k: v for k, v in self._open.items() if v[2] > stale}


def _host(tensor: torch.Tensor) -> Any:
    """``tensor``'s values as numpy: a view on the CPU, a copy from a device (3 small arrays a batch)."""
    return tensor.numpy() if tensor.device.type == "cpu" else tensor.cpu().numpy()
