"""Owned batches reuse released memory, and never memory the caller still holds."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pycollect import Collector
from pycollect._batch.recycle import RecycledMemory


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def test_buffers_are_reused_only_when_nothing_refers_to_them() -> None:
    memory = RecycledMemory(keep=2)
    layout = [((4, 3), np.dtype(np.float32)), ((5,), np.dtype(np.int64))]
    first = memory.arrays(layout)
    address = _address(first[0])
    assert _address(memory.arrays(layout)[0]) != address  # `first` is still held
    tensor = torch.from_numpy(first[1])
    view = memoryview(first[0])
    del first
    assert _address(memory.arrays(layout)[0]) != address  # a tensor and a memoryview hold it
    del tensor
    assert _address(memory.arrays(layout)[0]) != address
    del view
    assert _address(memory.arrays(layout)[0]) == address


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_kept_batch_is_never_overwritten(num_workers: int) -> None:
    with Collector("CartPole-v1", frames_per_batch=64, envs_per_worker=4, num_workers=num_workers, seed=0) as collector:
        kept = collector.next_batch()
        snapshot = kept.clone()
        for _ in range(8):
            collector.next_batch()  # dropped at once: its memory is reused
        assert (kept == snapshot).all()
        kept_obs = kept["observation"]
        del kept
        pointers = {collector.next_batch()["observation"].data_ptr() for _ in range(4)}
        assert kept_obs.data_ptr() not in pointers  # a tensor of the old batch still holds it
        assert len(pointers) <= 2  # released batches come back to the same memory
