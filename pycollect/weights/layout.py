"""Policy weights as one flat byte buffer, the form the shared-memory weights store carries.

The trainer packs a module's ``state_dict`` into bytes at fixed offsets; each worker unpacks
the bytes into its own copy of the module. Both sides derive the same :class:`WeightsLayout`
from the module, so only the bytes travel.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

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
    """The offsets of every tensor of a module's state dict in a flat buffer."""

    entries: tuple[WeightEntry, ...]
    nbytes: int

    @staticmethod
    def from_module(module: torch.nn.Module) -> WeightsLayout:
        """Lay out ``module.state_dict()`` (parameters and buffers), 64-byte aligned."""
        entries, offset = [], _HEADER
        for name, tensor in module.state_dict().items():
            nbytes = tensor.numel() * tensor.element_size()
            entries.append(WeightEntry(name, tuple(tensor.shape), tensor.dtype, offset, nbytes))
            offset += -(-nbytes // _ALIGN) * _ALIGN
        return WeightsLayout(tuple(entries), offset)

    def pack(self, module: torch.nn.Module, out: np.ndarray, version: int) -> memoryview:
        """Copy the module's current weights and their ``version`` into ``out`` (uint8).

        Returns:
            The used bytes of ``out``.
        """
        state = module.state_dict()
        out[:8].view(np.int64)[0] = version
        flat = torch.from_numpy(out)
        for entry in self.entries:
            tensor = state[entry.name].detach()
            if entry.nbytes:
                source = tensor.to("cpu").contiguous().reshape(-1).view(torch.uint8)
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
                if not entry.nbytes:
                    continue
                raw = flat[entry.offset : entry.offset + entry.nbytes]
                state[entry.name].copy_(raw.view(entry.dtype).reshape(entry.shape))
        return int(data[:8].view(np.int64)[0])
