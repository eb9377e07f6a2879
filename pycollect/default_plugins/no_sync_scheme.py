"""The ``no_sync`` weight-sync scheme: workers keep the weights they started with."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING

from pycollect.exceptions import PyCollectWarning
from pycollect.hookspecs import hookimpl
from pycollect.weights.scheme import ReceiverContext, SenderContext, WeightReceiver, WeightSender, WeightSyncScheme

if TYPE_CHECKING:
    import torch

__all__ = ["NoSyncScheme"]


class NoSyncScheme(WeightSyncScheme):
    """Weights never change after the workers start (they run the policy as it was pickled).

    For frozen policies (evaluation, a fixed expert) it saves the weights store's memory.
    ``update_policy_weights_()`` still bumps the collector's version but warns, once, that
    the workers do not see it; frames keep recording the version they ran, 0.
    """

    name = "no_sync"

    def sender(self, context: SenderContext) -> WeightSender:
        """A sender that publishes nothing."""
        return _Sender()


class _Sender(WeightSender):
    def __init__(self) -> None:
        self._warned = False

    def receiver(self) -> WeightReceiver:
        return _Receiver()

    def send(self, state: Mapping[str, torch.Tensor], version: int, *, timeout_s: float) -> None:
        if not self._warned:
            self._warned = True
            warnings.warn(
                "weight_sync='no_sync': the workers keep the weights they started with, so this "
                "update does not reach them; use weight_sync='shared_memory' to update them",
                PyCollectWarning,
                stacklevel=4,
            )


class _Receiver(WeightReceiver):
    def attach(self, context: ReceiverContext) -> None:
        pass

    def receive(self, module: torch.nn.Module) -> int | None:
        return None


@hookimpl
def register_scheme() -> type[WeightSyncScheme]:
    """Register :class:`NoSyncScheme`."""
    return NoSyncScheme
