"""Delivering batches on a CUDA ``storing_device``: page-locked staging and asynchronous copies.

A batch bound for a GPU is first assembled in page-locked ("pinned") host memory, from which
the copy to the device is a DMA transfer that does not block the trainer
(``non_blocking=True``); from ordinary pageable memory CUDA would stage it through a pinned
buffer of its own, synchronously. The copy is queued on the device's current stream, so
whatever the trainer does with the batch on that stream runs after it. The host staging
memory is recycled, so it must not be reused while a copy out of it may still run:
:class:`DeviceCopier` keeps each staged batch, with a CUDA event recorded after its copy,
until :meth:`~DeviceCopier.settle` has waited for the event.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from pycollect._batch.recycle import RecycledMemory

__all__ = ["DeviceCopier", "pinned_empty", "staging_memory"]


def pinned_empty(nbytes: int) -> np.ndarray:
    """A page-locked uint8 host buffer of ``nbytes`` (needs CUDA), as a numpy array."""
    return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True).numpy()


def staging_memory(device: torch.device) -> RecycledMemory:
    """Recycled host memory for batches delivered on ``device``: pinned for CUDA, plain otherwise."""
    return RecycledMemory(empty=pinned_empty) if device.type == "cuda" else RecycledMemory()


class DeviceCopier:
    """Copies host batches to CUDA devices without blocking, keeping their staging memory until done."""

    def __init__(self) -> None:
        self._pending: list[tuple[Any, TensorDict]] = []

    def copy(self, host: TensorDict, device: torch.device) -> TensorDict:
        """``host`` on ``device``, by a ``non_blocking=True`` copy queued on the device's current stream.

        ``host`` is kept (so its recycled memory is not handed out again) until :meth:`settle`.
        """
        out = host.to(device, non_blocking=True)
        event = torch.cuda.Event()  # type: ignore[no-untyped-call]
        event.record(torch.cuda.current_stream(device))
        self._pending.append((event, host))
        return out

    def settle(self) -> None:
        """Wait for every queued copy to finish, and let go of the host batches they read."""
        for event, _ in self._pending:
            event.synchronize()
        self._pending.clear()

    @property
    def pending(self) -> int:
        """Copies queued and not yet settled."""
        return len(self._pending)
