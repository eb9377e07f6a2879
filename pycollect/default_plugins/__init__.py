"""pycollect's own plugins, registered through the same plugin manager as third-party ones.

Each module here is one plugin with ``@hookimpl`` functions, exactly as an installed package
would write it; :mod:`pycollect.plugins` registers them (in this order) before it loads any
entry point, so a third-party plugin can never take one of their names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pycollect._lazy import lazy_exports

if TYPE_CHECKING:
    from pycollect.default_plugins.builtin_engines import Central, Device, InProcess, Workers
    from pycollect.default_plugins.cpu_devices import CpuPolicy
    from pycollect.default_plugins.explicit_devices import ExplicitPolicy
    from pycollect.default_plugins.inference_runners import CompileRunner, PlainRunner
    from pycollect.default_plugins.no_sync_scheme import NoSyncScheme
    from pycollect.default_plugins.round_robin_devices import RoundRobinPolicy
    from pycollect.default_plugins.shared_memory_scheme import SharedMemoryScheme
    from pycollect.default_plugins.torch_distributed_scheme import TorchDistributedScheme

__all__ = [
    "BUILTIN_CLASSES",
    "DEFAULT_PLUGINS",
    "Central",
    "CompileRunner",
    "CpuPolicy",
    "Device",
    "ExplicitPolicy",
    "InProcess",
    "NoSyncScheme",
    "PlainRunner",
    "RoundRobinPolicy",
    "SharedMemoryScheme",
    "TorchDistributedScheme",
    "Workers",
]

DEFAULT_PLUGINS = (
    "pycollect.default_plugins.gymnasium_backend",
    "pycollect.default_plugins.callable_backend",
    "pycollect.default_plugins.batched_backends",
    "pycollect.default_plugins.shared_memory_scheme",
    "pycollect.default_plugins.no_sync_scheme",
    "pycollect.default_plugins.torch_distributed_scheme",
    "pycollect.default_plugins.cpu_devices",
    "pycollect.default_plugins.round_robin_devices",
    "pycollect.default_plugins.explicit_devices",
    "pycollect.default_plugins.builtin_engines",
    "pycollect.default_plugins.inference_runners",
    "pycollect.default_plugins.step_backends",
)
"""Import paths of the built-in plugin modules."""

BUILTIN_CLASSES = {
    "CpuPolicy": "pycollect.default_plugins.cpu_devices",
    "ExplicitPolicy": "pycollect.default_plugins.explicit_devices",
    "RoundRobinPolicy": "pycollect.default_plugins.round_robin_devices",
    "NoSyncScheme": "pycollect.default_plugins.no_sync_scheme",
    "SharedMemoryScheme": "pycollect.default_plugins.shared_memory_scheme",
    "TorchDistributedScheme": "pycollect.default_plugins.torch_distributed_scheme",
    "Central": "pycollect.default_plugins.builtin_engines",
    "Device": "pycollect.default_plugins.builtin_engines",
    "InProcess": "pycollect.default_plugins.builtin_engines",
    "Workers": "pycollect.default_plugins.builtin_engines",
    "PlainRunner": "pycollect.default_plugins.inference_runners",
    "CompileRunner": "pycollect.default_plugins.inference_runners",
}
"""The built-in plugins' classes, by name, and the module of each (imported on first use, so
that the plugin manager can read :data:`DEFAULT_PLUGINS` without importing them)."""

__getattr__, __dir__ = lazy_exports(__name__, BUILTIN_CLASSES, globals())
