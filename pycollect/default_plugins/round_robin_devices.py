"""The ``round_robin`` device placement policy: worker ``i`` on GPU ``i % n``."""

from __future__ import annotations

from collections.abc import Sequence

from pycollect.devices.placement import DevicePolicy, Placement
from pycollect.hookspecs import hookimpl

__all__ = ["RoundRobinPolicy"]


class RoundRobinPolicy(DevicePolicy):
    """Spread the workers over this machine's CUDA devices, one after the other.

    With ``n`` CUDA devices, worker ``i`` runs its policy on ``cuda:(i % n)`` and its
    rollouts are delivered there (``storing_device``), with CUDA allowed. Environments stay on
    the CPU. On a machine without CUDA every worker is placed as by the ``cpu`` policy: on the
    CPU, with CUDA hidden, so the same script runs on a laptop and on a GPU node.
    """

    name = "round_robin"

    def place(self, worker: int, num_workers: int, devices: Sequence[str]) -> Placement:
        """``cuda:(worker % n)`` for policy and storing, or the CPU when there is no CUDA device."""
        gpus = [device for device in devices if device.startswith("cuda")]
        if not gpus:
            return Placement()
        device = gpus[worker % len(gpus)]
        return Placement(policy_device=device, storing_device=device, cuda=True)


@hookimpl
def register_device_policy() -> type[DevicePolicy]:
    """Register :class:`RoundRobinPolicy`."""
    return RoundRobinPolicy
