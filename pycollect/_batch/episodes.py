"""Counting finished episodes and their returns from the batches themselves.

Working from batch data (trajectory ids, rewards, done flags) gives the same answer whether
the environments stepped in this process or in workers, in sync or async mode.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
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
        """Account for one ``[N, T]`` batch (before any trajectory split)."""
        ids = batch.get(TRAJ_IDS).reshape(-1).numpy()
        rewards = batch.get(REWARD).reshape(-1).to(dtype=batch.get(REWARD).dtype).numpy().astype(np.float64)
        done = batch.get(NEXT_DONE).reshape(-1).numpy()
        unique, inverse = np.unique(ids, return_inverse=True)
        sums = np.bincount(inverse, weights=rewards, minlength=unique.size)
        lengths = np.bincount(inverse, minlength=unique.size)
        finished = np.zeros(unique.size, bool)
        finished[inverse[done]] = True
        self._batches += 1
        for traj, total, steps, ended in zip(unique.tolist(), sums.tolist(), lengths.tolist(), finished, strict=True):
            before, before_steps, _ = self._open.pop(traj, (0.0, 0, 0))
            total, steps = total + before, steps + before_steps
            if ended:
                self.count += 1
                self.return_sum += total
                self.length_sum += steps
                self.recent_returns.append(total)
            else:
                self._open[traj] = (total, steps, self._batches)
        del self.recent_returns[:-100]
        if self._batches % 100 == 0:
            stale = self._batches - _FORGET_AFTER
            self._open = {k: v for k, v in self._open.items() if v[2] > stale}
