"""The ``shared_memory`` weight-sync scheme, the default with worker processes.

The weights travel through the versioned weights store of the collector's shared-memory
segment: a few buffers, a ``latest`` word and one pin per worker, so the trainer never writes
a buffer a worker reads, and a worker never sees a half-written set (see
``rust/pycollect-core/src/weights.rs``).

- **Trainer**: ``send`` reserves a buffer no worker pins, copies each tensor of the policy
  straight into it (one copy of the weight bytes, no staging buffer) and publishes it. The
  buffers are written with zeros when the sender is made, so a publish never page-faults.
- **Workers**, between rollouts, when the version moved:

  - ``mode="copy"`` (the default): the worker pins the latest buffer only while it copies it
    into its own policy, once, in place: every tensor keeps its storage, so whatever the
    policy made from its parameters (``w.t()``, ``w.detach()``, a compiled graph) sees the
    new weights, and what a forward writes into a parameter stays in that worker until the
    next update. Three buffers suffice whatever the number of workers; a publish waits (at
    most the collector's ``weight_sync_timeout_s``) only if readers pin every spare buffer at
    once.
  - ``mode="view"``: the worker pins the latest buffer and makes its policy's parameters
    views of it (``param.data = view``), so no parameter byte is copied in the worker. It
    holds that pin while it acts with those weights and moves it at the next update; with
    one pin per worker and ``num_workers + 2`` buffers a publish never waits. Buffers
    (batch-norm statistics) are copied, because a forward may write them; a worker whose
    policy is not on the CPU copies everything (once, from the pinned buffer). The contract:
    the policy never writes its parameters, and nothing but the parameters keeps their
    storage. Both are enforced, loudly: the weights buffers are mapped read-only in the
    worker, so a write kills it with SIGSEGV and a ``PolicyError`` naming the parameter in
    its error text (and on stderr, with Python's faulthandler traceback); and each update
    checks that the storage the parameters leave is referenced by nothing else (else a
    ``PolicyError`` naming the parameter), so no frame is stamped with weights the policy did
    not act with.
"""

from __future__ import annotations

import contextlib
import faulthandler
import mmap
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

_MODES = ("copy", "view")
_PAGE = 4096  # the segment aligns the weights buffers to 4 KiB (rust/pycollect-core/src/layout.rs)


class SharedMemoryScheme(WeightSyncScheme):
    """Weights through the versioned buffers of the collector's shared-memory segment.

    Args:
        mode: ``"copy"`` (the default): each worker copies the published bytes once into its
            own policy, in place (3 buffers of shared memory). ``"view"``: workers' parameters
            become read-only views of the published bytes (no copy in the worker,
            ``num_workers + 2`` buffers); for policies that never write their parameters and
            keep no tensor sharing their storage (a worker that does is stopped with a
            ``PolicyError`` naming the parameter).

    Raises:
        ConfigError: An unknown ``mode``; ``"view"`` on a machine whose memory pages are larger
            than the 4 KiB the buffers are aligned to (they could not be mapped read-only).
    """

    name = "shared_memory"

    def __init__(self, mode: Literal["copy", "view"] = "copy") -> None:
        if mode not in _MODES:
            raise ConfigError(f"SharedMemoryScheme mode must be one of {_MODES}, got {mode!r}")
        if mode == "view" and mmap.PAGESIZE > _PAGE:
            raise ConfigError(
                f"SharedMemoryScheme(mode='view') maps the weights read-only in workers, which needs memory "
                f"pages of at most {_PAGE} bytes; this machine's are {mmap.PAGESIZE}: use mode='copy'"
            )
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
        if self._mode == "view":
            # A policy that writes a parameter would write the weights every worker shares:
            # make that a crash that names the parameter, and (faulthandler) where it happened.
            if not faulthandler.is_enabled():
                # Without a usable stderr the error text still names the parameter.
                with contextlib.suppress(RuntimeError, ValueError, OSError):
                    faulthandler.enable()
            self._reader.protect(*_write_messages(self.layout, context.worker))

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


def _write_messages(layout: WeightsLayout, worker: int) -> tuple[list[tuple[int, int, str]], str]:
    """What a write into the read-only weights says, per tensor's bytes and elsewhere."""
    fix = (
        "with SharedMemoryScheme(mode='view') a worker's parameters are read-only views of the weights every "
        "worker shares. Write no parameter in forward, or use SharedMemoryScheme(mode='copy') (the default), "
        "where each worker writes only its own copy, until the next update"
    )
    head = f"pycollect.exceptions.PolicyError: worker {worker} was stopped (SIGSEGV): the policy wrote"
    entries = [
        (
            entry.offset,
            entry.offset + entry.nbytes,
            f"{head} in place into its {'parameter' if entry.parameter else 'buffer'} {entry.name!r}; {fix}",
        )
        for entry in layout.entries
        if entry.nbytes
    ]
    return entries, f"{head} into the shared weights' header; {fix}"


def _on_cpu(module: torch.nn.Module) -> bool:
    return all(parameter.device.type == "cpu" for parameter in module.parameters())


@hookimpl
def register_scheme() -> type[WeightSyncScheme]:
    """Register :class:`SharedMemoryScheme`."""
    return SharedMemoryScheme
