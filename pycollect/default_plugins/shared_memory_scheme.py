"""The ``shared_memory`` weight-sync scheme, the default with worker processes.

The weights travel through the versioned weights store of the collector's shared-memory
segment: a few buffers, a ``latest`` word and one pin per worker, so the trainer never writes
a buffer a worker reads, and a worker never sees a half-written set (see
``rust/pycollect-core/src/weights.rs``).

- **Trainer**: ``send`` reserves a buffer no worker pins, copies each tensor of the policy
  straight into it (one copy of the weight bytes, no staging buffer) and publishes it. The
  buffers are written with zeros when the sender is made, so a publish never page-faults.
- **Workers**, between rollouts, when the version moved:

  - ``mode="view"`` (the default): the worker pins the latest buffer and makes its policy's
    parameters views of it, so no parameter byte is copied in the worker at all. It holds that
    pin while it acts with those weights and moves it at the next update. With one pin per
    worker and ``num_workers + 2`` buffers, the trainer always finds a free buffer: a publish
    never waits. Buffers (batch-norm statistics) are copied, because a forward may write them;
    a worker whose policy is not on the CPU copies everything (once, from the pinned buffer).
  - ``mode="copy"``: the worker pins the latest buffer only while it copies it into its own
    policy, once. Three buffers suffice whatever the number of workers (less shared memory
    with many workers); a publish waits (at most the collector's ``weight_sync_timeout_s``)
    only if readers pin every spare buffer at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from pycollect.config import MAX_WEIGHT_BUFFERS, WEIGHT_BUFFERS
from pycollect.exceptions import ConfigError
from pycollect.hookspecs import hookimpl
from pycollect.weights.scheme import ReceiverContext, SenderContext, WeightReceiver, WeightSender, WeightSyncScheme

if TYPE_CHECKING:
    import torch

    from pycollect.weights.layout import WeightsLayout

__all__ = ["SharedMemoryScheme"]

_MODES = ("view", "copy")


class SharedMemoryScheme(WeightSyncScheme):
    """Weights through the versioned buffers of the collector's shared-memory segment.

    Args:
        mode: ``"view"``: workers use the published bytes in place (no copy in the worker,
            ``num_workers + 2`` buffers of shared memory); ``"copy"``: workers copy them once
            into their own policy (3 buffers).

    Raises:
        ConfigError: An unknown ``mode``.
    """

    name = "shared_memory"

    def __init__(self, mode: Literal["view", "copy"] = "view") -> None:
        if mode not in _MODES:
            raise ConfigError(f"SharedMemoryScheme mode must be one of {_MODES}, got {mode!r}")
        self.mode = mode

    def __repr__(self) -> str:
        return f"SharedMemoryScheme(mode={self.mode!r})"

    def store_bytes(self, layout: WeightsLayout) -> int:
        """One packed set of weights per buffer."""
        return layout.nbytes

    def store_buffers(self, num_workers: int) -> int:
        """``num_workers + 2`` in view mode (every worker may pin one), else 3.

        Raises:
            ConfigError: More workers than view mode can give a buffer each.
        """
        if self.mode == "copy":
            return WEIGHT_BUFFERS
        if num_workers + 2 > MAX_WEIGHT_BUFFERS:
            raise ConfigError(
                f"weight_sync=SharedMemoryScheme(mode='view') needs num_workers + 2 weights buffers, at most "
                f"{MAX_WEIGHT_BUFFERS}: num_workers={num_workers} is too many; use SharedMemoryScheme(mode='copy')"
            )
        return max(WEIGHT_BUFFERS, num_workers + 2)

    def sender(self, context: SenderContext) -> WeightSender:
        """The trainer's writer into the segment's weights store (its buffers pre-faulted)."""
        writer = context.segment.weights_writer()
        writer.populate()
        return _Sender(context.layout, writer, self.mode)


class _Sender(WeightSender):
    def __init__(self, layout: WeightsLayout, writer: Any, mode: str) -> None:
        self.layout = layout
        self._writer = writer
        self._mode = mode

    def receiver(self) -> WeightReceiver:
        return _Receiver(self.layout, self._mode)

    def send(self, state: Mapping[str, torch.Tensor], version: int, *, timeout_s: float) -> None:
        view = self._writer.reserve(self.layout.nbytes, timeout_s=timeout_s)
        try:
            self.layout.pack(state, np.asarray(view), version)
        except BaseException:
            self._writer.abandon()
            raise
        del view  # nothing writes the buffer once it is published
        self._writer.commit()


class _Receiver(WeightReceiver):
    def __init__(self, layout: WeightsLayout, mode: str) -> None:
        self.layout = layout
        self._mode = mode
        self._reader: Any = None
        self._seen = 0  # the store's own version, to notice new weights cheaply

    def attach(self, context: ReceiverContext) -> None:
        self._reader = context.segment.weights_reader(context.worker)

    def receive(self, module: torch.nn.Module) -> int | None:
        reader = self._reader
        if reader.latest_version <= self._seen:
            return None
        pinned = reader.pin_latest()  # moves this worker's pin from the weights it used so far
        if pinned is None:
            return None
        self._seen, view = pinned
        data = np.asarray(view)
        if self._mode == "view" and _on_cpu(module):
            return self.layout.share(data, module)  # keeps the pin: the parameters are the buffer
        try:
            return self.layout.unpack(data, module)
        finally:
            reader.unpin()

    def close(self) -> None:
        if self._reader is not None:
            self._reader.unpin()


def _on_cpu(module: torch.nn.Module) -> bool:
    return all(parameter.device.type == "cpu" for parameter in module.parameters())


@hookimpl
def register_scheme() -> type[WeightSyncScheme]:
    """Register :class:`SharedMemoryScheme`."""
    return SharedMemoryScheme
