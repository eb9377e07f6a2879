"""Extension point: weight-sync schemes.

A weight-sync scheme moves policy weights from the trainer to every worker process, with a
version number that workers stamp on every frame. Write one by subclassing
:class:`WeightSyncScheme` (its trainer half is a :class:`WeightSender`, its worker half a
:class:`WeightReceiver`); make it known with the ``register_scheme()`` hook
(:mod:`pycollect.hookspecs`). The built-in ``shared_memory`` (the default with workers) and
``no_sync`` schemes live in :mod:`pycollect.default_plugins` and register the same way.

Modules:
    scheme: the interface (:class:`WeightSyncScheme`, :class:`WeightSender`,
        :class:`WeightReceiver` and the contexts they are built with).
    layout: :class:`WeightsLayout`, a state dict as one flat byte buffer (imports torch).
"""

from __future__ import annotations

from pycollect.weights.scheme import ReceiverContext, SenderContext, WeightReceiver, WeightSender, WeightSyncScheme

__all__ = ["ReceiverContext", "SenderContext", "WeightReceiver", "WeightSender", "WeightSyncScheme"]
