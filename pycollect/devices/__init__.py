"""Extension point: device placement policies.

A device placement policy decides, for each worker process, where its environments live,
where it runs its copy of the policy, where its rollouts are delivered, and whether it may
touch CUDA at all. Write one by subclassing :class:`DevicePolicy`; make it known with the
``register_device_policy()`` hook (:mod:`pycollect.hookspecs`). The built-in policies live
in :mod:`pycollect.default_plugins` and register the same way; they are exported here:

* :class:`CpuPolicy` (``"cpu"``, the default): every worker on the CPU, CUDA hidden.
* :class:`RoundRobinPolicy` (``"round_robin"``): worker ``i`` on ``cuda:(i % n)``, or the
  CPU where there is no CUDA device.
* :class:`ExplicitPolicy` (``"explicit"``, only as an instance): a device per worker.

Modules:
    placement: the interface (:class:`DevicePolicy`, :class:`Placement`) and
        :func:`available_devices`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pycollect._lazy import lazy_exports
from pycollect.devices.placement import DevicePolicy, Placement, available_devices

if TYPE_CHECKING:
    from pycollect.default_plugins.cpu_devices import CpuPolicy
    from pycollect.default_plugins.explicit_devices import ExplicitPolicy
    from pycollect.default_plugins.round_robin_devices import RoundRobinPolicy

__all__ = ["CpuPolicy", "DevicePolicy", "ExplicitPolicy", "Placement", "RoundRobinPolicy", "available_devices"]

# The built-in policies are plugin modules that import this package: imported on first use.
_BUILTINS = {
    "CpuPolicy": "pycollect.default_plugins.cpu_devices",
    "ExplicitPolicy": "pycollect.default_plugins.explicit_devices",
    "RoundRobinPolicy": "pycollect.default_plugins.round_robin_devices",
}

__getattr__, __dir__ = lazy_exports(__name__, _BUILTINS, globals())
