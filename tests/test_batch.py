"""The trainer's side of a batch: the TensorDict wrapping and the episode record.

Both run once per batch in the trainer and were rewritten for speed (tensordict's unchecked
constructor; trajectory runs found without a sort). These tests hold them to what the plain
versions give, on random batches.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import TensorDict, TensorDictBase

from pycollect._batch.episodes import EpisodeRecord
from pycollect._batch.tensordict import nested_tensors, to_tensordict


def _arrays(rows: int, steps: int) -> dict[tuple[str, ...], np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        ("observation",): rng.standard_normal((rows, steps, 4)).astype(np.float32),
        ("action",): rng.integers(0, 2, (rows, steps)),
        ("next", "observation"): rng.standard_normal((rows, steps, 4)).astype(np.float32),
        ("next", "reward"): rng.standard_normal((rows, steps, 1)).astype(np.float32),
        ("next", "done"): rng.random((rows, steps, 1)) < 0.1,
        ("collector", "traj_ids"): rng.integers(0, 9, (rows, steps)),
        ("policy", "inner", "state"): rng.standard_normal((rows, steps, 2, 3)),
    }


def test_to_tensordict_equals_the_public_constructors_batch_without_copying() -> None:
    arrays = _arrays(3, 5)
    ours = to_tensordict(arrays)
    theirs = TensorDict(nested_tensors(arrays), batch_size=[3, 5], names=[None, "time"])
    assert set(ours.keys(True, True)) == set(theirs.keys(True, True))
    for key in theirs.keys(True, True):
        assert torch.equal(ours.get(key), theirs.get(key)), key
    for key in [(), ("next",), ("policy",), ("policy", "inner")]:
        a, b = (ours.get(key) if key else ours), (theirs.get(key) if key else theirs)
        assert isinstance(a, TensorDictBase) and a.batch_size == b.batch_size and a.names == b.names, key
        assert a.device == b.device and a.is_locked == b.is_locked, key
    assert ours.get(("next", "observation")).data_ptr() == arrays["next", "observation"].ctypes.data  # a view
    ours.set("extra", torch.zeros(3, 5))  # it behaves as any batch: keys can be added
    with pytest.raises(RuntimeError):
        ours.set("wrong", torch.zeros(4, 5))  # and it still checks what is set later


class _PlainRecord(EpisodeRecord):
    """The record as it was first written (a sort by id), to compare with."""

    def __init__(self) -> None:
        super().__init__()
        self._open: dict[int, tuple[float, int, int]] = {}

    def update(self, batch: TensorDictBase) -> None:
        ids = batch.get(("collector", "traj_ids")).reshape(-1).numpy()
        rewards = batch.get(("next", "reward")).reshape(-1).numpy().astype(np.float64)
        done = batch.get(("next", "done")).reshape(-1).numpy()
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


def _episodes(rows: int, steps: int, batches: int, seed: int, stack: bool) -> list[TensorDictBase]:
    """Batches as collectors make them: per row, runs of one trajectory id, ending with done (or not)."""
    rng = np.random.default_rng(seed)
    next_id = rows
    current = list(range(rows))
    out = []
    for _ in range(batches):
        ids = np.empty((rows, steps), np.int64)
        done = np.zeros((rows, steps, 1), bool)
        for r in range(rows):
            for t in range(steps):
                ids[r, t] = current[r]
                if rng.random() < 0.08:  # the episode ends here; the next frame starts a new id
                    done[r, t] = True
                    current[r], next_id = next_id, next_id + 1
        rewards = rng.standard_normal((rows, steps, 1)).astype(np.float32)
        arrays = {("collector", "traj_ids"): ids, ("next", "reward"): rewards, ("next", "done"): done}
        if stack:  # cat_results="stack": [N, K, T]
            arrays = {key: value.reshape(2, rows // 2, *value.shape[1:]) for key, value in arrays.items()}
        batch_size = [2, rows // 2, steps] if stack else [rows, steps]
        out.append(TensorDict({k: torch.from_numpy(v) for k, v in arrays.items()}, batch_size=batch_size))
    return out


@pytest.mark.parametrize(("rows", "steps", "stack"), [(4, 16, False), (1, 3, False), (6, 1, False), (4, 9, True)])
def test_the_episode_record_counts_what_a_sort_by_id_counts(rows: int, steps: int, stack: bool) -> None:
    ours, plain = EpisodeRecord(), _PlainRecord()
    for batch in _episodes(rows, steps, 60, seed=rows * steps, stack=stack):
        ours.update(batch)
        plain.update(batch)
        assert (ours.count, ours.length_sum) == (plain.count, plain.length_sum)
        assert ours.recent_returns == plain.recent_returns
        assert ours.return_sum == plain.return_sum  # to the last bit
        assert ours.open_trajectories() == plain._open
    assert ours.count >= 5  # episodes ended, and some went on across batches
