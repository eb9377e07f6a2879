"""The ``cpu`` device placement policy, the default: every worker on the CPU, CUDA hidden."""

from __future__ import annotations

from collections.abc import Sequence

from pycollect.devices.placement import DevicePolicy, Placement
from pycollect.hookspecs import hookimpl

__all__ = ["CpuPolicy"]


class CpuPolicy(DevicePolicy):
    """Every worker steps, acts and stores on the CPU and never creates a CUDA context.

    One CUDA context costs a few hundred MB of GPU memory per process; for the small
    policies of most environment-bound workloads the CPU is also faster per step.
    """

    name = "cpu"

    def place(self, worker: int, num_workers: int, devices: Sequence[str]) -> Placement:
        """The CPU for everything, CUDA hidden."""
        return Placement()


@hookimpl
def register_device_policy() -> type[DevicePolicy]:
    """Register :class:`CpuPolicy`."""
    return CpuPolicy
