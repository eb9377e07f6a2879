"""Trajectory ids: one new id after each episode's end, step after step, envs in order.

:func:`hand_out_ids` writes a rollout's ids from its episode ends, for a collector's runner
(after each rollout) and for the central engine's :class:`TrajectoryIds` (after each round, per
worker, as that worker's runner would); ``traj_id_start`` in :mod:`pycollect._rollout.seeding`
numbers each worker's ids.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from pycollect._rollout.seeding import traj_id_start

__all__ = ["TrajectoryIds", "hand_out_ids"]


def hand_out_ids(block: np.ndarray, ended: np.ndarray, current: np.ndarray, next_id: int, stride: int) -> int:
    """Write ``block``'s ``[K, T]`` trajectory ids from the ``[T, K]`` episode ends ``ended``; the next id.

    Each env keeps its id in ``current`` up to the end of its episode; from the step after it
    the env has a new id, handed out step after step, envs in order (``next_id``, then
    ``next_id + stride``...). ``current`` becomes each env's id after the last step.

    Ids only grow, so an env's id at a step is the largest of its current one and those handed
    out at its earlier ends: a running maximum along the row, with no per-end Python (about a
    hundred ends a CartPole rollout of 16 envs).
    """
    steps = block.shape[1]
    t, j = np.nonzero(ended)  # step after step, envs in order: the order ids are handed out
    marks = np.zeros((block.shape[0], steps + 1), np.int64)  # ids are never negative
    marks[:, 0] = current
    marks[j, t + 1] = next_id + stride * np.arange(t.size)
    np.maximum.accumulate(marks, axis=1, out=marks)
    block[...] = marks[:, :steps]
    current[...] = marks[:, steps]
    return next_id + stride * t.size


class TrajectoryIds:
    """Trajectory ids per worker, handed out as that worker's own runner would hand them out.

    Worker ``w`` of the ``workers`` engine numbers its trajectories from ``traj_id_start(w, N,
    generation)`` with stride ``N``: its ``K`` envs in order at a reset of every env, then, step
    after step, each env whose episode ended, in env order. The central engine's groups step a
    worker's envs in turns, so the ids are handed out here, after a round, from the round's done
    flags; a restart (a new generation, recorded by the runners) starts that worker's count again.

    Args:
        num_workers: ``N``.
        envs_per_worker: ``K``.
    """

    def __init__(self, num_workers: int, envs_per_worker: int) -> None:
        self._w, self._k = num_workers, envs_per_worker
        self._next = [traj_id_start(w, num_workers, 1) for w in range(num_workers)]
        self._generations = [1] * num_workers
        self._current = np.zeros((num_workers, envs_per_worker), np.int64)

    def start(self) -> None:
        """Every env starts a trajectory (every env was reset), in env order within each worker."""
        for w in range(self._w):
            self._current[w] = self._next[w] + self._w * np.arange(self._k)
            self._next[w] += self._w * self._k

    def write(self, traj_ids: np.ndarray, done: np.ndarray, cuts: Iterable[tuple[int, int, int]]) -> None:
        """Write a round's ``[N * K, T]`` trajectory ids from its ``[N * K, T, ...]`` done flags.

        ``cuts``: ``(step, worker, generation)`` where a worker restart cut envs of a group.
        """
        k = self._k
        restarted: dict[int, dict[int, int]] = {}
        for t, w, generation in cuts:
            restarted.setdefault(w, {})[t] = generation
        for w in range(self._w):
            block = traj_ids[w * k : (w + 1) * k]
            ended = np.asarray(done[w * k : (w + 1) * k].reshape(k, block.shape[1], -1).any(-1))
            if w in restarted:
                self._write_with_restarts(w, block, ended, restarted[w])
            else:
                self._write(w, block, ended)

    def _write(self, w: int, block: np.ndarray, ended: np.ndarray) -> None:
        """Worker ``w``'s ids, no restart among them: one new id per episode end, step after step, envs in order."""
        self._next[w] = hand_out_ids(block, ended.T, self._current[w], self._next[w], self._w)

    def _write_with_restarts(self, w: int, block: np.ndarray, ended: np.ndarray, restarted: Mapping[int, int]) -> None:
        """Worker ``w``'s ids, a restart (a new generation) among them: end by end, the count started again at each."""
        block[...] = self._current[w][:, None]
        for t, j in zip(*np.nonzero(ended.T), strict=True):
            generation = restarted.get(int(t))
            if generation is not None and generation > self._generations[w]:
                self._generations[w] = generation
                self._next[w] = traj_id_start(w, self._w, generation)
            self._current[w, j] = self._next[w]
            self._next[w] += self._w
            block[j, t + 1 :] = self._current[w, j]

    def state(self) -> dict[str, Any]:
        """The counters, to continue the numbering after :meth:`load_state`."""
        return {"next": list(self._next), "generations": list(self._generations), "current": self._current.tolist()}

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state` (one of another shape is ignored)."""
        current = np.asarray(state.get("current", ()), np.int64)
        if current.shape != self._current.shape:
            return
        self._next = [int(n) for n in state["next"]]
        self._generations = [int(g) for g in state["generations"]]
        self._current = current
