"""Moving a policy call's inputs to the policy's device and its outputs back to the host.

On the CPU (and on devices other than CUDA) this is what one would write: observations become
tensors without a copy, outputs are copied with ``.cpu()``.

On CUDA every policy call pays two transfers, and done naively (``.to("cuda")`` on a pageable
tensor, ``.cpu()`` on each output) each is synchronous and goes through a pinned buffer that
CUDA keeps for itself. :class:`CudaTransfer` stages the inputs in page-locked ("pinned") host
buffers of its own, kept from call to call, and copies them with ``non_blocking=True``; the
outputs come back into pinned buffers the same way, and one CUDA event says when all of them
have arrived. Everything runs on a stream of the transfer's own, so two runners in two threads
(the central engine's groups) copy and compute at the same time instead of queueing on the
default stream.

Reusing the pinned buffers is safe because every call ends by waiting for its event: by then
the copies out of the input buffers (queued before the policy ran on the same stream) are done,
and the caller copies the outputs out of their buffers before the next call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch

from pycollect._keys import Key

__all__ = ["CudaTransfer", "HostTransfer", "transfer_for"]


class HostTransfer:
    """Inputs become tensors on ``device`` with ``.to()``; outputs come back as they are (the caller copies them)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """The context a policy call runs in: nothing to set up here."""
        yield

    def to_device(self, arrays: Mapping[Key, np.ndarray]) -> dict[Key, torch.Tensor]:
        """One tensor on ``device`` per array (no copy on the CPU)."""
        return {key: torch.from_numpy(np.asarray(array)).to(self.device) for key, array in arrays.items()}

    def to_host(self, outputs: Mapping[Key, Any]) -> dict[Key, Any]:
        """The outputs unchanged: a CPU tensor is already where batches are assembled."""
        return dict(outputs)


class CudaTransfer(HostTransfer):
    """Pinned host buffers, ``non_blocking`` copies and a stream of its own, for a policy on a CUDA device.

    The stream and the buffers are made at the first call, in the thread and the process that
    calls the policy (a CUDA stream is not made before CUDA is needed).

    Args:
        device: The CUDA device the policy runs on.
    """

    def __init__(self, device: torch.device) -> None:
        super().__init__(device)
        self._stream: Any = None
        # Each input's pinned buffer with a numpy view of it, made at the first call that needs them.
        self._inputs: dict[Key, tuple[torch.Tensor, np.ndarray]] = {}
        self._outputs: dict[Key, torch.Tensor] = {}

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Run the policy call on this transfer's stream.

        The stream first waits for the device's current stream, where the trainer loads new
        weights (``load_state_dict``): a call never reads weights whose copy is still queued.
        """
        if self._stream is None:
            self._stream = torch.cuda.Stream(self.device)  # type: ignore[no-untyped-call]
        self._stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self._stream):
            yield

    def to_device(self, arrays: Mapping[Key, np.ndarray]) -> dict[Key, torch.Tensor]:
        """Each array copied into its pinned buffer, then to the device without blocking."""
        out = {}
        for key, array in arrays.items():
            array = np.asarray(array)
            entry = self._inputs.get(key)
            if entry is None or entry[1].shape != array.shape or entry[1].dtype != array.dtype:
                pinned = _pinned_empty(array.shape, torch.from_numpy(np.empty(0, array.dtype)).dtype)
                entry = self._inputs[key] = (pinned, pinned.numpy())
            staged, view = entry
            np.copyto(view, array)
            out[key] = staged.to(self.device, non_blocking=True)
        return out

    def to_host(self, outputs: Mapping[Key, Any]) -> dict[Key, Any]:
        """The outputs on the device copied into pinned buffers; returns once all have arrived.

        The returned tensors are those buffers, overwritten by the next call: copy out of them
        first. Outputs elsewhere (numpy arrays, CPU tensors) are returned as they are.
        """
        host = dict(outputs)
        copied = False
        for key, value in outputs.items():
            if isinstance(value, torch.Tensor) and value.device.type == self.device.type:
                staged = self._outputs.get(key)
                if staged is None or staged.shape != value.shape or staged.dtype != value.dtype:
                    staged = self._outputs[key] = _pinned_empty(tuple(value.shape), value.dtype)
                staged.copy_(value.detach(), non_blocking=True)
                host[key] = staged
                copied = True
        if copied:
            event = torch.cuda.Event()  # type: ignore[no-untyped-call]
            event.record(self._stream)
            event.synchronize()
        return host


def transfer_for(device: torch.device) -> HostTransfer:
    """The transfer for a policy on ``device``: :class:`CudaTransfer` for CUDA, :class:`HostTransfer` otherwise."""
    return CudaTransfer(device) if device.type == "cuda" else HostTransfer(device)


def _pinned_empty(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A page-locked host tensor (needs CUDA)."""
    return torch.empty(shape, dtype=dtype, pin_memory=True)
