"""Extension point: device placement policies.

A device placement policy decides, for each worker process, where its environments live,
where it runs its copy of the policy, where its rollouts are delivered, and whether it may
touch CUDA at all. Write one by subclassing :class:`DevicePolicy`; make it known with the
``register_device_policy()`` hook (:mod:`pycollect.hookspecs`). The built-in policies live
in :mod:`pycollect.default_plugins` and register the same way; they are exported from
:mod:`pycollect`:

* :class:`CpuPolicy` (``"cpu"``, the default): every worker on the CPU, CUDA hidden.
* :class:`RoundRobinPolicy` (``"round_robin"``): worker ``i`` on ``cuda:(i % n)``, or the
  CPU where there is no CUDA device.
* :class:`ExplicitPolicy` (``"explicit"``, only as an instance): a device per worker.

Modules:
    placement: the interface (:class:`DevicePolicy`, :class:`Placement`) and
        :func:`available_devices`.
"""

from __future__ import annotations

from pycollect._lazy import lazy_exports
from pycollect.devices.placement import DevicePolicy, Placement, available_devices

__all__ = ["DevicePolicy", "Placement", "available_devices"]

# The built-in policies are implementations of this interface: they live (and are exported) in
# pycollect.default_plugins and pycollect, never here (interfaces do not import implementations).
_MOVED = {name: "pycollect" for name in ("CpuPolicy", "ExplicitPolicy", "RoundRobinPolicy")}
__getattr__, __dir__ = lazy_exports(__name__, {}, globals(), moved=_MOVED)
