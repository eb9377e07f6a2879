"""A digest of policy weights: what the trainer published and what a worker applied, compared.

Both sides hash the same tensors (:func:`~pycollect.weights.layout.module_weights`: every
parameter, then every buffer, by state-dict name) as one stream of their bytes with XXH3-64,
natively and without the GIL: a few milliseconds for the weights of a large CNN, once per
publish in the trainer and once per update in each worker. Equal digests mean the worker acts
with the very bytes published; the workers engine checks them with every batch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from pycollect._native import _core

if TYPE_CHECKING:
    import torch

__all__ = ["weights_digest"]


def weights_digest(weights: Mapping[str, torch.Tensor]) -> int:
    """XXH3-64 of the tensors' bytes, in the mapping's order (on the CPU; a device's are copied)."""
    parts = []
    for tensor in weights.values():
        data = tensor.detach()
        if data.device.type != "cpu":
            data = data.cpu()
        parts.append(data.contiguous().reshape(-1).view(dtype=_byte_dtype()).numpy())
    return int(_core.weights_digest(parts))


def _byte_dtype() -> torch.dtype:
    import torch

    return torch.uint8
