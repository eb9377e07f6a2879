"""Policy weights as one flat byte buffer, the form a shared-memory weights store carries.

The weights of a module are its parameters and its buffers, named as in its ``state_dict``
(``"0.weight"``), the set ``TensorDict.from_module`` collects: non-persistent buffers
included, a tied parameter once. The trainer packs them into bytes at fixed offsets; each
worker either copies the bytes into its own copy of the module, in place
(:meth:`WeightsLayout.unpack`), or makes the module's parameters views of them
(:meth:`WeightsLayout.share`). Both sides derive the same :class:`WeightsLayout` from the
module, so only the bytes travel.
"""

from __future__ import annotations

import gc
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch

from pycollect.exceptions import PolicyError

__all__ = ["WeightEntry", "WeightsLayout", "module_weights"]

# How many strong references a storage has (torch's own check that nothing but a graph's
# tensors still uses a storage, in torch/_inductor/cudagraph_trees.py).
_use_count = torch._C._storage_Use_Count

_ALIGN = 64
_HEADER = 64  # bytes before the first tensor: the policy version (int64), then padding


def module_weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The weights a scheme carries: every parameter, then every buffer, by state-dict name."""
    weights: dict[str, torch.Tensor] = dict(module.named_parameters())
    weights.update(module.named_buffers())
    return weights


@dataclass(frozen=True)
class WeightEntry:
    """Where one tensor of the weights lives in the flat buffer.

    Attributes:
        name: Its state-dict name.
        shape: Its shape.
        dtype: Its dtype.
        offset: Its first byte in the flat buffer (64-byte aligned).
        nbytes: Its size in bytes.
        parameter: Whether it is a parameter (else a buffer, which a forward may write).
    """

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    offset: int
    nbytes: int
    parameter: bool = True


@dataclass(frozen=True)
class WeightsLayout:
    """The offsets of every tensor of a module's weights in a flat buffer.

    Attributes:
        entries: One entry per tensor, parameters first, in module order.
        nbytes: The size of a packed buffer, header included.
    """

    entries: tuple[WeightEntry, ...]
    nbytes: int

    @staticmethod
    def from_state_dict(state: Mapping[str, torch.Tensor], parameters: frozenset[str] | None = None) -> WeightsLayout:
        """Lay out named tensors, every one 64-byte aligned.

        Args:
            state: The tensors, by name.
            parameters: Which names are parameters (``None``: all of them).
        """
        entries, offset = [], _HEADER
        for name, tensor in state.items():
            nbytes = tensor.numel() * tensor.element_size()
            is_parameter = parameters is None or name in parameters
            entries.append(WeightEntry(name, tuple(tensor.shape), tensor.dtype, offset, nbytes, is_parameter))
            offset += -(-nbytes // _ALIGN) * _ALIGN
        return WeightsLayout(tuple(entries), offset)

    @staticmethod
    def from_module(module: torch.nn.Module) -> WeightsLayout:
        """Lay out :func:`module_weights` of ``module``."""
        parameters = frozenset(name for name, _ in module.named_parameters())
        return WeightsLayout.from_state_dict(module_weights(module), parameters)

    def check(
        self, state: Mapping[str, torch.Tensor], *, policy: str = "the policy the workers run", dtypes: bool = True
    ) -> None:
        """Refuse weights that do not have exactly this layout's names and shapes (and dtypes).

        Args:
            state: The weights, by name.
            policy: Whose weights this layout describes, for the message.
            dtypes: Refuse another dtype too (a flat buffer needs it; ``load_state_dict`` casts).

        Raises:
            PolicyError: Naming the first name that is missing, extra, or of another shape or dtype.
        """
        where = f"the weights do not match {policy}"
        if len(state) != len(self.entries) or any(entry.name not in state for entry in self.entries):
            missing = [entry.name for entry in self.entries if entry.name not in state]
            known = {entry.name for entry in self.entries}
            extra = [name for name in state if name not in known]
            what = f"lack {missing[0]!r}" if missing else f"have the unexpected entry {extra[0]!r}"
            raise PolicyError(f"{where}: they {what}")
        for entry in self.entries:
            tensor = state[entry.name]
            if tuple(tensor.shape) != entry.shape or (dtypes and tensor.dtype != entry.dtype):
                raise PolicyError(
                    f"{where}: {entry.name!r} is {tuple(tensor.shape)} {tensor.dtype}, not {entry.shape} {entry.dtype}"
                )

    def pack(self, state: Mapping[str, torch.Tensor], out: np.ndarray, version: int) -> memoryview:
        """Copy ``state`` and its ``version`` into ``out`` (uint8, at least :attr:`nbytes`).

        Each tensor is copied once, straight from wherever it lives (a CUDA tensor included)
        to its place in ``out``.

        Returns:
            The used bytes of ``out``.
        """
        out[:8].view(np.int64)[0] = version
        targets = self._tensors(torch.from_numpy(out))
        with torch.no_grad():
            for entry, target in zip(self.entries, targets, strict=True):
                if target is not None:
                    target.copy_(state[entry.name].detach())
        return out[: self.nbytes].data

    def unpack(self, data: np.ndarray, module: torch.nn.Module) -> int:
        """Copy the weights in the flat bytes ``data`` into ``module``'s own tensors, in place.

        Returns:
            The policy version they were packed with.
        """
        weights = module_weights(module)
        with torch.no_grad():
            for entry, source in zip(self.entries, self._tensors(_readonly_tensor(data)), strict=True):
                if source is not None:
                    weights[entry.name].copy_(source)
        return _version(data)

    def share(self, data: np.ndarray, module: torch.nn.Module) -> int:
        """Make ``module``'s parameters views of the flat bytes ``data``; copy its buffers.

        No parameter bytes are copied: each parameter keeps its identity and is pointed at its
        place in ``data`` (``parameter.data = view``; each gets a storage of its own), which
        must stay valid (pinned) for as long as the module is used. Buffers are copied into
        the module's own, because a forward pass may write them (batch-norm statistics) and
        ``data`` is shared with other readers. Every parameter must be on the CPU.

        A tensor that shares a parameter's storage but is not the parameter (``w.detach()``,
        ``w.t()``, a slice, ``w.numpy()``, kept by the policy or a compiled graph) stays on
        the old storage when the parameter is pointed at ``data``: it would act with the old
        weights. So once every parameter points at ``data``, the storages they left must be
        referenced by nothing else.

        Returns:
            The policy version they were packed with.

        Raises:
            PolicyError: Something besides the parameter itself still references the storage a
                parameter left, naming the parameter (the module then already points at
                ``data``; the caller must not act with it).
        """
        weights = module_weights(module)
        # Nothing is changed until every view exists: a failure here leaves the module as it was.
        sources = self._own_storages(data)
        left: dict[int, tuple[torch.UntypedStorage, list[str]]] = {}  # storage -> the parameters that left it
        with torch.no_grad():
            for entry, source in zip(self.entries, sources, strict=True):
                if source is None:
                    continue
                tensor = weights[entry.name]
                if entry.parameter:
                    storage = tensor.untyped_storage()
                    left.setdefault(storage._cdata, (storage, []))[1].append(entry.name)
                    tensor.data = source
                else:
                    tensor.copy_(source)
        _refuse_kept_storages(left)
        return _version(data)

    def _own_storages(self, data: np.ndarray) -> list[torch.Tensor | None]:
        """Every entry's tensor as a view of ``data``, each on a storage of its own.

        One storage per tensor lets :func:`_refuse_kept_storages` tell which parameter
        something else still references.
        """
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            return [
                torch.from_numpy(data[entry.offset : entry.offset + entry.nbytes]).view(entry.dtype).view(entry.shape)
                if entry.nbytes
                else None
                for entry in self.entries
            ]

    def _tensors(self, flat: torch.Tensor) -> list[torch.Tensor | None]:
        """Every entry's tensor as a view of ``flat`` (uint8); ``None`` for an empty one."""
        return [
            flat[entry.offset : entry.offset + entry.nbytes].view(entry.dtype).view(entry.shape)
            if entry.nbytes
            else None
            for entry in self.entries
        ]


def _readonly_tensor(data: np.ndarray) -> torch.Tensor:
    """``data`` as a uint8 tensor even when it is read-only (a pinned view of shared memory).

    Torch has no read-only tensors and warns about them; the tensors made from it are only
    read (and parameters made of them are never written by a forward pass).
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(data)


def _refuse_kept_storages(left: dict[int, tuple[torch.UntypedStorage, list[str]]]) -> None:
    """Raise if anything but ``left``'s own handle still references a storage parameters left.

    Each value holds the storage's Python object (one reference) and the names of the
    parameters that used it. Garbage in reference cycles is collected once before an error.
    """

    def kept() -> list[str]:
        return [name for cdata, (_, names) in left.items() if _use_count(cdata) > 1 for name in names]

    names = kept()
    if names:
        gc.collect()
        names = kept()
    if names:
        which = ", ".join(repr(name) for name in names)
        raise PolicyError(
            f"the policy keeps a reference to the storage of its parameter {which} besides the parameter "
            "itself (a tensor made from it with .detach(), .t(), a slice or view, or .numpy(), kept in an "
            "attribute, a closure or a compiled graph). With SharedMemoryScheme(mode='view') new weights are "
            "not written into that storage: the parameter is pointed at the shared buffer of the new version, "
            "so what the policy kept would go on acting with the old weights while its frames are stamped "
            "with the new version. Make such tensors anew in each forward call, or use SharedMemoryScheme(mode='copy') "
            "(the default), which writes new weights into the parameters' own storage"
        )


def _version(data: np.ndarray) -> int:
    return int(data[:8].view(np.int64)[0])
