"""Memory for caller-owned batches, reused once the caller has let go of it.

Every owned batch needs fresh memory, and fresh memory costs page faults and zeroing in the
kernel: for 84x84x4 observations that was most of the trainer's time. So batch arrays are
carved out of a few large buffers, and a buffer is handed out again only when nothing but
this pool refers to it any more. In CPython every array, tensor or memoryview that shares a
buffer's memory holds a reference to it (numpy views keep their base, ``torch.from_numpy``
keeps the array), so the reference count says exactly when the caller is done.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable

import numpy as np

__all__ = ["RecycledMemory"]

_ALIGN = 64


class RecycledMemory:
    """Hands out uint8 buffers of one size, reusing those the caller has released.

    Args:
        keep: How many buffers to keep for reuse; beyond that, buffers are not kept (a
            caller that holds on to many batches simply gets fresh memory each time).
        empty: Makes a fresh uint8 buffer of a number of bytes (default ``np.empty``; page-locked
            host memory for batches bound for a GPU, :func:`pycollect._batch.device.pinned_empty`).
    """

    def __init__(self, keep: int = 4, empty: Callable[[int], np.ndarray] | None = None) -> None:
        self.keep = keep
        self._empty = empty or (lambda nbytes: np.empty(nbytes, np.uint8))
        self._buffers: list[np.ndarray] = []

    def buffer(self, nbytes: int) -> np.ndarray:
        """A uint8 buffer of ``nbytes`` whose contents are undefined."""
        for index in range(len(self._buffers)):
            # Referenced by the list and by getrefcount's argument only: nobody else holds it.
            if self._buffers[index].nbytes == nbytes and sys.getrefcount(self._buffers[index]) == 2:
                return self._buffers[index]
        fresh = self._empty(nbytes)
        if len(self._buffers) < self.keep:
            self._buffers.append(fresh)
        return fresh

    def arrays(self, layout: list[tuple[tuple[int, ...], np.dtype]]) -> list[np.ndarray]:
        """Arrays of the given shapes and dtypes, all views of one buffer."""
        offsets, total = [], 0
        for shape, dtype in layout:
            offsets.append(total)
            total += -(-math.prod(shape) * dtype.itemsize // _ALIGN) * _ALIGN
        memory = self.buffer(total)
        # One constructor call per array: this runs for every batch, and slicing, viewing and
        # reshaping cost three times as much.
        return [
            np.ndarray(shape, dtype, buffer=memory, offset=offset)
            for (shape, dtype), offset in zip(layout, offsets, strict=True)
        ]
