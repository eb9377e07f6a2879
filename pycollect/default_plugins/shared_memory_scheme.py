"""The ``shared_memory`` weight-sync scheme, the default with worker processes.

The trainer packs the policy's state dict into a private flat buffer and publishes it into the
versioned weights store of the collector's shared-memory segment: at least three buffers and
a ``latest`` word, so a writer never overwrites a buffer a reader is copying from, and a reader
never sees a half-written set. Between rollouts each worker checks the store's version and,
when it moved, copies the latest buffer out and into its own policy module.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from pycollect.hookspecs import hookimpl
from pycollect.weights.scheme import ReceiverContext, SenderContext, WeightReceiver, WeightSender, WeightSyncScheme

if TYPE_CHECKING:
    import torch

    from pycollect.weights.layout import WeightsLayout

__all__ = ["SharedMemoryScheme"]


class SharedMemoryScheme(WeightSyncScheme):
    """Weights through the versioned buffers of the collector's shared-memory segment."""

    name = "shared_memory"

    def store_bytes(self, layout: WeightsLayout) -> int:
        """One packed state dict per buffer."""
        return layout.nbytes

    def sender(self, context: SenderContext) -> WeightSender:
        """The trainer's writer into the segment's weights store."""
        return _Sender(context.layout, context.segment.weights_writer())


class _Sender(WeightSender):
    def __init__(self, layout: WeightsLayout, writer: Any) -> None:
        self.layout = layout
        self._writer = writer
        self._packed = np.empty(layout.nbytes, np.uint8)

    def receiver(self) -> WeightReceiver:
        return _Receiver(self.layout)

    def send(self, state: Mapping[str, torch.Tensor], version: int, *, timeout_s: float) -> None:
        self._writer.publish(self.layout.pack(state, self._packed, version), timeout_s=timeout_s)


class _Receiver(WeightReceiver):
    def __init__(self, layout: WeightsLayout) -> None:
        self.layout = layout
        self._reader: Any = None
        self._seen = 0  # the store's own version, to notice new weights cheaply
        self._buffer = np.empty(0, np.uint8)  # sized in attach(): nothing big is pickled

    def attach(self, context: ReceiverContext) -> None:
        self._reader = context.segment.weights_reader(context.worker)
        self._buffer = np.empty(self.layout.nbytes, np.uint8)

    def receive(self, module: torch.nn.Module) -> int | None:
        if self._reader.latest_version <= self._seen:
            return None
        got = self._reader.read_into(self._buffer)
        if got is None:
            return None
        self._seen = got[0]
        return self.layout.unpack(self._buffer, module)


@hookimpl
def register_scheme() -> type[WeightSyncScheme]:
    """Register :class:`SharedMemoryScheme`."""
    return SharedMemoryScheme
