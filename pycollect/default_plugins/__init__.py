"""pycollect's own plugins, registered through the same plugin manager as third-party ones.

Each module here is one plugin with ``@hookimpl`` functions, exactly as an installed package
would write it; :mod:`pycollect.plugins` registers them (in this order) before it loads any
entry point, so a third-party plugin can never take one of their names.
"""

from __future__ import annotations

__all__ = ["DEFAULT_PLUGINS"]

DEFAULT_PLUGINS = (
    "pycollect.default_plugins.gymnasium_backend",
    "pycollect.default_plugins.callable_backend",
    "pycollect.default_plugins.shared_memory_scheme",
    "pycollect.default_plugins.no_sync_scheme",
    "pycollect.default_plugins.torch_distributed_scheme",
    "pycollect.default_plugins.cpu_devices",
    "pycollect.default_plugins.round_robin_devices",
    "pycollect.default_plugins.explicit_devices",
    "pycollect.default_plugins.builtin_engines",
)
"""Import paths of the built-in plugin modules."""
