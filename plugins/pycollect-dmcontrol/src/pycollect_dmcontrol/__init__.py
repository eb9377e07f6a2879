"""pycollect-dmcontrol: DeepMind Control Suite tasks as a pycollect env backend.

Installed, it registers the ``dm_control`` backend through the ``pycollect`` entry-point
group, so that ``Collector("dm_control:cheetah-run", ...)`` collects from
``dm_control.suite.load("cheetah", "run")``. Importing this package does not import
dm_control (or MuJoCo); building the first environment does.
"""

from __future__ import annotations

from pycollect import hookimpl
from pycollect_dmcontrol.backend import DMControlBackend, split_target
from pycollect_dmcontrol.env import DMControlEnv

__all__ = ["DMControlBackend", "DMControlEnv", "register_env_backend", "split_target"]
__version__ = "0.1.0"


@hookimpl
def register_env_backend() -> type[DMControlBackend]:
    """Contribute the ``dm_control`` env backend (pycollect's ``register_env_backend`` hook)."""
    return DMControlBackend
