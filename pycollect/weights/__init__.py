"""Extension point: weight-sync schemes.

A weight-sync scheme moves policy weights from the trainer to every worker process, with a
version number that workers stamp on every frame. Write one by subclassing
:class:`WeightSyncScheme` (its trainer half is a :class:`WeightSender`, its worker half a
:class:`WeightReceiver`); make it known with the ``register_scheme()`` hook
(:mod:`pycollect.hookspecs`). The built-in ``shared_memory`` (the default with workers),
``no_sync`` and ``torch_distributed`` schemes live in :mod:`pycollect.default_plugins` and
register the same way; their classes are exported from :mod:`pycollect`, to configure them
(``pycollect.SharedMemoryScheme(mode="view")``, ``pycollect.TorchDistributedScheme(timeout_s=30)``).

Modules:
    scheme: the interface (:class:`WeightSyncScheme`, :class:`WeightSender`,
        :class:`WeightReceiver` and the contexts they are built with).
    layout: :class:`WeightsLayout`, a state dict as one flat byte buffer (imports torch).
"""

from __future__ import annotations

from pycollect._lazy import lazy_exports
from pycollect.weights.scheme import ReceiverContext, SenderContext, WeightReceiver, WeightSender, WeightSyncScheme

# The built-in schemes are implementations of this interface: they live (and are exported) in
# pycollect.default_plugins and pycollect, never here (interfaces do not import implementations).
_MOVED = {name: "pycollect" for name in ("NoSyncScheme", "SharedMemoryScheme", "TorchDistributedScheme")}
__getattr__, __dir__ = lazy_exports(__name__, {}, globals(), moved=_MOVED)

__all__ = [
    "ReceiverContext",
    "SenderContext",
    "WeightReceiver",
    "WeightSender",
    "WeightSyncScheme",
]
