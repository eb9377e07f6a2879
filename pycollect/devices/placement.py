"""The device placement interface: which devices each worker process uses.

Before any worker starts, the trainer asks the collector's :class:`DevicePolicy` where each
worker goes, given the devices of this machine; the answer, a :class:`Placement`, travels to
the worker in its start-up spec. A worker whose placement does not allow CUDA starts with CUDA
hidden (``CUDA_VISIBLE_DEVICES=""``), so it never creates a CUDA context; otherwise it runs
its copy of the policy on ``policy_device``. This module imports neither torch nor the native
module, so workers with a random policy stay torch-free.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

__all__ = ["DevicePolicy", "Placement", "available_devices"]


@dataclass(frozen=True)
class Placement:
    """Where one worker keeps its environments, runs its policy and delivers its rollouts.

    Devices are written as torch names (``"cpu"``, ``"cuda:0"``), numbered as in the trainer.

    Attributes:
        env_device: Where the environments' data lives. Gymnasium-style environments step
            on the CPU, which is all the built-in env backends support.
        policy_device: Where the worker runs its copy of the policy.
        storing_device: Where the trainer delivers this worker's rollouts, unless the
            collector was given ``storing_device`` explicitly.
        cuda: Whether the worker may touch CUDA at all. ``False`` starts it with CUDA hidden.
    """

    env_device: str = "cpu"
    policy_device: str = "cpu"
    storing_device: str = "cpu"
    cuda: bool = False

    def devices(self) -> tuple[str, str, str]:
        """``(env_device, policy_device, storing_device)``."""
        return (self.env_device, self.policy_device, self.storing_device)


class DevicePolicy(abc.ABC):
    """Decides the :class:`Placement` of every worker.

    Subclasses set :attr:`name` and implement :meth:`place`. A policy selected by name is
    built with no arguments, so give every option of ``__init__`` a default.
    """

    name: ClassVar[str]
    """The name users select the policy by (``device_policy="<name>"``)."""

    @abc.abstractmethod
    def place(self, worker: int, num_workers: int, devices: Sequence[str]) -> Placement:
        """The placement of worker ``worker`` of ``num_workers``.

        Args:
            worker: The worker's index, ``0 <= worker < num_workers``.
            num_workers: How many workers the collector starts.
            devices: The devices of this machine, ``"cpu"`` first, then ``"cuda:0"``, ...

        Returns:
            Devices taken from ``devices``; a CUDA device needs ``cuda=True``.
        """


def available_devices() -> list[str]:
    """The devices of this machine: ``"cpu"``, then every CUDA device torch can see."""
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return ["cpu", *(f"cuda:{index}" for index in range(count))]
