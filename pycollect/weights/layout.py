"""Policy weights as one flat byte buffer, the form a shared-memory weights store carries.

The trainer packs a module's ``state_dict`` (parameters and buffers) into bytes at fixed
offsets; each worker unpacks the bytes into its own copy of the module. Both sides derive the
same :class:`WeightsLayout` from the module, so only the bytes travel.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch

from pycollect.exceptions import PolicyError

__all__ = ["WeightEntry", "WeightsLayout"]

_ALIGN = 64
_HEADER = 64  # bytes before the first tensor: the policy version (int64), then padding


@dataclass(frozen=True)
class WeightEntry:
    """Where one tensor of the state dict lives in the flat buffer."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    offset: int
    nbytes: int


@dataclass(frozen=True)
class WeightsLayout:
    """The offsets of every tensor of a module's state dict in a flat buffer.

    Attributes:
        entries: One entry per state-dict tensor, in state-dict order.
        nbytes: The size of a packed buffer, header included.
    """

    entries: tuple[WeightEntry, ...]
    nbytes: int

    @staticmethod
    def from_state_dict(state: Mapping[str, torch.Tensor]) -> WeightsLayout:
        """Lay out a state dict (parameters and buffers), every tensor 64-byte aligned."""
        entries, offset = [], _HEADER
        for name, tensor in state.items():
            nbytes = tensor.numel() * tensor.element_size()
            entries.append(WeightEntry(name, tuple(tensor.shape), tensor.dtype, offset, nbytes))
            offset += -(-nbytes // _ALIGN) * _ALIGN
        return WeightsLayout(tuple(entries), offset)

    @staticmethod
    def from_module(module: torch.nn.Module) -> WeightsLayout:
        """Lay out ``module.state_dict()``."""
        return WeightsLayout.from_state_dict(module.state_dict())

    def check(self, state: Mapping[str, torch.Tensor]) -> None:
        """Refuse a state dict that does not have exactly this layout's keys, shapes and dtypes.

        Raises:
            PolicyError: Naming the first key that is missing, extra, or of another shape or dtype.
        """
        if len(state) != len(self.entries) or any(entry.name not in state for entry in self.entries):
            missing = [entry.name for entry in self.entries if entry.name not in state]
            known = {entry.name for entry in self.entries}
            extra = [name for name in state if name not in known]
            what = f"lacks {missing[0]!r}" if missing else f"has the unexpected key {extra[0]!r}"
            raise PolicyError(f"the weights do not match the policy the workers run: the state dict {what}")
        for entry in self.entries:
            tensor = state[entry.name]
            if tuple(tensor.shape) != entry.shape or tensor.dtype != entry.dtype:
                raise PolicyError(
                    f"the weights do not match the policy the workers run: {entry.name!r} is "
                    f"{tuple(tensor.shape)} {tensor.dtype}, the workers' is {entry.shape} {entry.dtype}"
                )

    def pack(self, state: Mapping[str, torch.Tensor], out: np.ndarray, version: int) -> memoryview:
        """Copy ``state`` and its ``version`` into ``out`` (uint8, at least :attr:`nbytes`).

        Returns:
            The used bytes of ``out``.
        """
        out[:8].view(np.int64)[0] = version
        flat = torch.from_numpy(out)
        for entry in self.entries:
            if entry.nbytes:
                source = state[entry.name].detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)
                flat[entry.offset : entry.offset + entry.nbytes].copy_(source)
        return out[: self.nbytes].data

    def unpack(self, data: np.ndarray, module: torch.nn.Module) -> int:
        """Copy weights from the flat bytes ``data`` into ``module``'s tensors, in place.

        Returns:
            The policy version they were packed with.
        """
        state = module.state_dict()
        flat = torch.from_numpy(data)
        with torch.no_grad():
            for entry in self.entries:
                if entry.nbytes:
                    raw = flat[entry.offset : entry.offset + entry.nbytes]
                    state[entry.name].copy_(raw.view(entry.dtype).reshape(entry.shape))
        return int(data[:8].view(np.int64)[0])
