"""The interface an inference runner implements (see :mod:`pycollect.inference`)."""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import torch

__all__ = ["InferenceRunner"]


class InferenceRunner(abc.ABC):
    """Makes the callable a collector calls in the policy's place, once per step.

    The collector calls :meth:`prepare` once, where the policy runs (the trainer for the
    ``inprocess`` and ``central`` engines; each worker for ``workers``, which receives the
    runner pickled with the collector's settings), after the policy is on its device and
    before its first call. What :meth:`prepare` returns is then called exactly as the policy
    would be: with one tensor per observation leaf for a plain ``torch.nn.Module``, with the
    observation ``TensorDict`` otherwise, under ``torch.no_grad()`` and the collector's
    exploration type; it must return what the policy returns. The policy's weights are the
    policy's: a runner must not copy them, so that ``update_policy_weights_()`` (which loads
    into the policy's own parameters) reaches the next call.

    Attributes:
        name: The name users select it by (``inference_runner="<name>"``).
    """

    name: ClassVar[str] = ""

    @abc.abstractmethod
    def prepare(self, policy: Callable[..., Any], device: torch.device) -> Callable[..., Any]:
        """The callable to call instead of ``policy`` on ``device``.

        Raises:
            PolicyError: The runner cannot run this policy (say why); raised before any
                worker starts where the runner runs in the trainer.
        """

    def describe(self) -> str:
        """A short description for messages and ``repr``."""
        return self.name or type(self).__qualname__
