"""The episode record against its previous version, bit for bit.

``EpisodeRecord.update`` was rewritten for speed (issue 41: run indices from ``np.repeat``
instead of a cumsum, lengths from the runs' first frames, sorts that are stable only where ids
repeat, open trajectories looked up in id order). ``_PreviousRecord`` is the update as it was;
both read the same random batches and must agree on every statistic and on the table of open
trajectories, to the last bit of every float.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
import torch
from tensordict import TensorDict, TensorDictBase

from pycollect._batch import episodes
from pycollect._batch.episodes import EpisodeRecord
from pycollect._keys import NEXT_DONE, REWARD, TRAJ_IDS


class _PreviousRecord(EpisodeRecord):
    """``EpisodeRecord.update`` before issue 41 (cumsum over every frame, stable argsorts)."""

    def update(self, batch: TensorDictBase) -> None:
        traj_ids = batch.get(TRAJ_IDS)
        steps = traj_ids.shape[-1]
        ids = traj_ids.numpy().reshape(-1, steps)
        starts = np.empty(ids.shape, bool)
        starts[:, 0] = True
        np.not_equal(ids[:, 1:], ids[:, :-1], out=starts[:, 1:])
        starts = starts.reshape(-1)
        run = np.cumsum(starts)
        run -= 1
        first = np.flatnonzero(starts)
        rewards = batch.get(REWARD).numpy().reshape(-1)
        sums = np.bincount(run, weights=rewards, minlength=first.size)
        lengths = np.bincount(run, minlength=first.size)
        finished = np.zeros(first.size, bool)
        finished[run[batch.get(NEXT_DONE).numpy().reshape(-1)]] = True
        run_ids = ids.reshape(-1)[first]
        self._batches += 1
        keep = np.ones(self._open_ids.size, bool)
        if self._open_ids.size:
            at_start = np.flatnonzero(first % steps == 0)
            where = np.searchsorted(self._open_ids, run_ids[at_start])
            where[where == self._open_ids.size] = 0
            going_on = self._open_ids[where] == run_ids[at_start]
            runs, rows = at_start[going_on], where[going_on]
            sums[runs] += self._open_sums[rows]
            lengths[runs] += self._open_lengths[rows]
            keep[rows] = False
        unfinished = np.flatnonzero(~finished)
        self._set_open_stable(
            np.concatenate((self._open_ids[keep], run_ids[unfinished])),
            np.concatenate((self._open_sums[keep], sums[unfinished])),
            np.concatenate((self._open_lengths[keep], lengths[unfinished])),
            np.concatenate((self._open_seen[keep], np.full(unfinished.size, self._batches, np.int64))),
        )
        ended = np.flatnonzero(finished)
        ended = ended[np.argsort(run_ids[ended], kind="stable")]
        returns = sums[ended]
        self.count += int(returns.size)
        self.length_sum += int(lengths[ended].sum())
        if returns.size:
            self.return_sum = float(np.cumsum(np.concatenate(([self.return_sum], returns)))[-1])
        self.recent_returns.extend(returns[-100:].tolist())
        del self.recent_returns[:-100]
        if self._batches % 100 == 0:
            recent = self._open_seen > self._batches - episodes._FORGET_AFTER
            self._set_open_stable(
                self._open_ids[recent], self._open_sums[recent], self._open_lengths[recent], self._open_seen[recent]
            )

    def _set_open_stable(self, ids: np.ndarray, sums: np.ndarray, lengths: np.ndarray, seen: np.ndarray) -> None:
        order = np.argsort(ids, kind="stable")
        self._open_ids, self._open_sums = ids[order], sums[order]
        self._open_lengths, self._open_seen = lengths[order], seen[order]


def _bits(value: float) -> bytes:
    return struct.pack("<d", value)


def _assert_same(ours: EpisodeRecord, previous: EpisodeRecord) -> None:
    assert (ours.count, ours.length_sum) == (previous.count, previous.length_sum)
    assert _bits(ours.return_sum) == _bits(previous.return_sum)
    assert [_bits(r) for r in ours.recent_returns] == [_bits(r) for r in previous.recent_returns]
    for name in ("_open_ids", "_open_sums", "_open_lengths", "_open_seen"):
        a, b = getattr(ours, name), getattr(previous, name)
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), name  # same order, same bits


def _batches(
    rows: int, steps: int, count: int, *, seed: int, end: float, shuffle_rows: bool = False, stack: bool = False
) -> list[TensorDictBase]:
    """Batches as collectors make them, with the irregular cases a record must survive.

    Per row, runs of one trajectory id; an episode ends with done (probability ``end`` a step)
    and the next frame starts a new id. Sometimes an id changes without done (a reset cut the
    trajectory) or a done comes at a row's last step; episodes go on across batches. Rewards are
    float32 of very different sizes (and signed zeros), so that any change in the order of a
    sum shows in its last bits. With ``shuffle_rows`` the rows come in a new order each batch
    and some envs sit a batch out, as batches of async workers do.
    """
    rng = np.random.default_rng(seed)
    envs = rows + (2 if shuffle_rows else 0)
    current = list(range(envs))
    next_id = envs
    out = []
    for _ in range(count):
        order = rng.permutation(envs)[:rows] if shuffle_rows else np.arange(rows)
        ids = np.empty((rows, steps), np.int64)
        done = np.zeros((rows, steps, 1), bool)
        for r, env in enumerate(order):
            for t in range(steps):
                ids[r, t] = current[env]
                u = rng.random()
                if u < end:  # the episode ends here
                    done[r, t] = True
                    current[env], next_id = next_id, next_id + 1
                elif u < end * 1.1:  # a reset cut the trajectory: a new id without done
                    current[env], next_id = next_id, next_id + 1
        scale = 10.0 ** rng.integers(-6, 7, (rows, steps, 1))
        rewards = (rng.standard_normal((rows, steps, 1)) * scale).astype(np.float32)
        rewards[rng.random((rows, steps, 1)) < 0.05] = -0.0
        arrays = {TRAJ_IDS: ids, REWARD: rewards, NEXT_DONE: done}
        batch_size = [rows, steps]
        if stack:  # cat_results="stack": [N, K, T]
            arrays = {key: value.reshape(2, rows // 2, *value.shape[1:]) for key, value in arrays.items()}
            batch_size = [2, rows // 2, steps]
        out.append(TensorDict({k: torch.from_numpy(v) for k, v in arrays.items()}, batch_size=batch_size))
    return out


@pytest.mark.parametrize(
    ("rows", "steps", "end", "shuffle_rows", "stack"),
    [
        (64, 32, 1 / 20, False, False),  # CartPole-like, the device engine's shape
        (16, 64, 1 / 20, False, False),  # the workers' CPU batch
        (8, 16, 0.3, True, False),  # async-like: rows reordered, some envs missing from a batch
        (4, 9, 0.08, False, True),  # cat_results="stack"
        (1, 3, 0.2, False, False),
        (6, 1, 0.2, True, False),  # one step a row: every run touches both ends of its row
        (5, 40, 0.0, False, False),  # no episode ends: every trajectory stays open
    ],
)
def test_the_record_equals_its_previous_version_bit_for_bit(
    rows: int, steps: int, end: float, shuffle_rows: bool, stack: bool
) -> None:
    ours, previous = EpisodeRecord(), _PreviousRecord()
    for batch in _batches(rows, steps, 40, seed=rows * steps, end=end, shuffle_rows=shuffle_rows, stack=stack):
        ours.update(batch)
        previous.update(batch)
        _assert_same(ours, previous)
    if end:
        assert ours.count > 0


def test_forgotten_trajectories_are_forgotten_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    """Envs that sit out many batches leave open trajectories behind: both records forget the same ones."""
    monkeypatch.setattr(episodes, "_FORGET_AFTER", 30)
    ours, previous = EpisodeRecord(), _PreviousRecord()
    for batch in _batches(4, 8, 250, seed=3, end=0.05, shuffle_rows=True):
        ours.update(batch)
        previous.update(batch)
        _assert_same(ours, previous)


def test_repeated_ids_keep_the_stable_order() -> None:
    """Ids that repeat (recycled, or shared by two rows) are ordered as a stable sort orders them."""
    rng = np.random.default_rng(7)
    ours, previous = EpisodeRecord(), _PreviousRecord()
    for _ in range(30):
        ids = rng.integers(0, 6, (8, 12))  # runs of few ids, the same id in many rows and runs
        done = rng.random((8, 12, 1)) < 0.3
        rewards = rng.standard_normal((8, 12, 1)).astype(np.float32) * np.float32(1e4)
        batch = TensorDict(
            {TRAJ_IDS: torch.from_numpy(ids), REWARD: torch.from_numpy(rewards), NEXT_DONE: torch.from_numpy(done)},
            batch_size=[8, 12],
        )
        ours.update(batch)
        previous.update(batch)
        _assert_same(ours, previous)
    assert ours.count > 0


def test_stable_order_is_numpys_stable_argsort() -> None:
    rng = np.random.default_rng(1)
    for keys in (rng.permutation(1000), rng.integers(0, 50, 1000), np.zeros(0, np.int64), np.array([3])):
        assert np.array_equal(episodes._stable_order(keys), np.argsort(keys, kind="stable"))
