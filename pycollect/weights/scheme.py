"""The weight-sync scheme interface: how policy weights travel from the trainer to workers.

A scheme has two halves. The trainer's half, a :class:`WeightSender`, is built once, after the
collector's shared-memory segment exists and before any worker starts; ``update_policy_weights_()``
calls its :meth:`~WeightSender.send` with the policy's state dict and a version number. The
workers' half, a :class:`WeightReceiver`, is made by the sender, pickled into every worker and
attached there; between two rollouts (never in the middle of one) the worker calls
:meth:`~WeightReceiver.receive`, which copies newer weights into the worker's own policy module
and returns their version. Every frame a worker collects records the version it was collected
with (``policy_version`` in the batch).

A scheme class is registered with the ``register_scheme()`` hook and selected by name
(``Collector(..., weight_sync="shared_memory")``, built with no arguments) or passed as an
instance configured by the user. This module imports neither torch nor the native module.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import torch

    from pycollect.weights.layout import WeightsLayout

__all__ = ["ReceiverContext", "SenderContext", "WeightReceiver", "WeightSender", "WeightSyncScheme"]


@dataclass(frozen=True)
class SenderContext:
    """What the trainer's half of a scheme is built with.

    Attributes:
        layout: Where each tensor of the policy's state dict sits in a packed flat buffer.
        num_workers: How many worker processes will receive the weights.
        segment: The collector's shared-memory segment (``pycollect._core.Segment``); its
            weights store has :meth:`WeightSyncScheme.store_bytes` bytes per buffer.
    """

    layout: WeightsLayout
    num_workers: int
    segment: Any


@dataclass(frozen=True)
class ReceiverContext:
    """What a worker's half of a scheme is attached with, inside the worker process.

    Attributes:
        layout: The same layout the sender was built with.
        worker: The worker's index.
        generation: The worker's generation (1 for the first start, +1 per restart).
        segment: The collector's shared-memory segment, attached in this worker.
    """

    layout: WeightsLayout
    worker: int
    generation: int
    segment: Any


class WeightReceiver(abc.ABC):
    """The workers' half of a scheme: pickled into every worker, attached there once."""

    @abc.abstractmethod
    def attach(self, context: ReceiverContext) -> None:
        """Connect to whatever the sender publishes into; called before the first rollout."""

    @abc.abstractmethod
    def receive(self, module: torch.nn.Module) -> int | None:
        """Apply the newest weights, if newer than those applied last, onto ``module`` in place.

        Called between rollouts only. A worker that starts (or restarts) calls it before its
        first rollout, so it starts from the latest published version.

        Returns:
            The version of the weights now in ``module``, or ``None`` if nothing new arrived.
        """

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what :meth:`attach` took; called when the worker stops."""


class WeightSender(abc.ABC):
    """The trainer's half of a scheme."""

    @abc.abstractmethod
    def receiver(self) -> WeightReceiver:
        """The workers' half, pickled into every worker before it starts."""

    @abc.abstractmethod
    def send(self, state: Mapping[str, torch.Tensor], version: int, *, timeout_s: float) -> None:
        """Make ``state`` (a policy state dict) the weights every worker picks up next.

        Args:
            state: The policy's state dict, laid out as the sender's layout says.
            version: The collector's policy version; workers stamp it on every frame they
                collect with these weights.
            timeout_s: The longest this call may block (e.g. waiting for a free buffer).

        Raises:
            TransportError: The weights could not be published within ``timeout_s``.
        """

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what the sender holds; called when the collector shuts down."""


class WeightSyncScheme(abc.ABC):
    """A way of moving policy weights from the trainer to every worker process.

    Subclasses set :attr:`name` and implement :meth:`sender`. A scheme selected by name is
    built with no arguments, so give every option of ``__init__`` a default.
    """

    name: ClassVar[str]
    """The name users select the scheme by (``weight_sync="<name>"``)."""

    def store_bytes(self, layout: WeightsLayout) -> int:
        """Bytes per buffer this scheme needs in the collector's shared-memory weights store.

        The default, 0, means the scheme does not use the segment's weights store.
        """
        return 0

    def store_buffers(self, num_workers: int) -> int:
        """How many buffers the weights store has (at least 3, at most 255).

        A writer needs a buffer that is neither the latest nor pinned by a reader, so a
        scheme whose workers each hold a pin for long wants ``num_workers + 2``. The default
        is 3, enough for readers that pin only while they copy.
        """
        return 3

    @abc.abstractmethod
    def sender(self, context: SenderContext) -> WeightSender:
        """Build the trainer's half; called once, before any worker starts."""
