"""Each observation is written once: the ``observation`` key is rebuilt from ``("next", "observation")``.

A rollout of ``T`` steps holds two observation arrays per leaf, as TorchRL's collectors
deliver them: ``observation[:, t]``, what the policy saw at step ``t``, and ``("next",
"observation")[:, t]``, what step ``t`` returned. They hold the same frames one step apart,
except where an episode ended at step ``t``: there ``("next", "observation")[:, t]`` is the
terminal observation and ``observation[:, t + 1]`` the reset one.

So the stepping loop (:class:`~pycollect._rollout.runner.EnvRunner`) writes every frame once,
into ``("next", "observation")``, and writes into ``observation`` only what the shift cannot
give: its first step and the reset observations. Whoever takes the rollout (the in-process
engine, or the trainer copying a worker's rollout out of shared memory) fills in the rest
with :func:`fill_observations`, one pass over memory per array. numpy only: workers import it.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from pycollect._keys import NEXT_OBS_PREFIX, Key

__all__ = ["fill_observations", "observation_pairs"]


def observation_pairs(keys: Iterable[Key]) -> list[tuple[Key, Key]]:
    """``(key, ("next", *key))`` for every observation leaf key."""
    return [(key, (*NEXT_OBS_PREFIX, *key)) for key in keys]


def fill_observations(
    observation: np.ndarray, next_observation: np.ndarray, done: np.ndarray, out: np.ndarray | None = None
) -> None:
    """Complete ``observation`` from the step-shifted ``next_observation``, keeping the reset frames.

    Args:
        observation: ``[K, T, *shape]`` as the runner wrote it: step 0 of every row, and step
            ``t + 1`` of every row whose episode ended at step ``t``; the rest is undefined.
        next_observation: ``[K, T, *shape]``, every step written.
        done: ``[K, T, 1]`` (or ``[K, T]``), the rollout's ``("next", "done")``.
        out: Where the complete observations go (``[K, T, *shape]``); ``None``: in place, into
            ``observation``. ``out`` may be ``observation`` itself.
    """
    ends = np.nonzero(done.reshape(done.shape[0], done.shape[1])[:, :-1])  # episodes that ended before the last step
    rows, starts = ends[0], ends[1] + 1
    if out is None or out is observation:
        resets = observation[rows, starts]  # a copy (fancy indexing), taken before the shift overwrites them
        observation[:, 1:] = next_observation[:, :-1]
        observation[rows, starts] = resets
        return
    out[:, 0] = observation[:, 0]
    out[:, 1:] = next_observation[:, :-1]
    out[rows, starts] = observation[rows, starts]
