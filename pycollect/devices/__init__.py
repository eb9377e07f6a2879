"""Extension point: device placement policies.

A device placement policy decides, for each worker process, where its environments live,
where it runs its copy of the policy, where its rollouts are delivered, and whether it may
touch CUDA at all. Write one by subclassing :class:`DevicePolicy`; make it known with the
``register_device_policy()`` hook (:mod:`pycollect.hookspecs`). The built-in ``cpu`` policy
(the default) lives in :mod:`pycollect.default_plugins` and registers the same way.

Modules:
    placement: the interface (:class:`DevicePolicy`, :class:`Placement`) and
        :func:`available_devices`.
"""

from __future__ import annotations

from pycollect.devices.placement import DevicePolicy, Placement, available_devices

__all__ = ["DevicePolicy", "Placement", "available_devices"]
