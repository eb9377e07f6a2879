"""Extension point: weight-sync schemes.

A weight-sync scheme moves policy weights from the trainer to every worker process, with a
version number that workers stamp on every frame. Write one by subclassing
:class:`WeightSyncScheme` (its trainer half is a :class:`WeightSender`, its worker half a
:class:`WeightReceiver`); make it known with the ``register_scheme()`` hook
(:mod:`pycollect.hookspecs`). The built-in ``shared_memory`` (the default with workers),
``no_sync`` and ``torch_distributed`` schemes live in :mod:`pycollect.default_plugins` and
register the same way; their classes are exported here too, to configure them
(``SharedMemoryScheme(mode="view")``, ``TorchDistributedScheme(timeout_s=30)``).

Modules:
    scheme: the interface (:class:`WeightSyncScheme`, :class:`WeightSender`,
        :class:`WeightReceiver` and the contexts they are built with).
    layout: :class:`WeightsLayout`, a state dict as one flat byte buffer (imports torch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pycollect._lazy import lazy_exports
from pycollect.weights.scheme import ReceiverContext, SenderContext, WeightReceiver, WeightSender, WeightSyncScheme

if TYPE_CHECKING:
    from pycollect.default_plugins.no_sync_scheme import NoSyncScheme
    from pycollect.default_plugins.shared_memory_scheme import SharedMemoryScheme
    from pycollect.default_plugins.torch_distributed_scheme import TorchDistributedScheme

# The built-in schemes import this package themselves: imported on first use.
_LAZY = {
    "NoSyncScheme": "pycollect.default_plugins.no_sync_scheme",
    "SharedMemoryScheme": "pycollect.default_plugins.shared_memory_scheme",
    "TorchDistributedScheme": "pycollect.default_plugins.torch_distributed_scheme",
}
__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())

__all__ = [
    "NoSyncScheme",
    "ReceiverContext",
    "SenderContext",
    "SharedMemoryScheme",
    "TorchDistributedScheme",
    "WeightReceiver",
    "WeightSender",
    "WeightSyncScheme",
]
