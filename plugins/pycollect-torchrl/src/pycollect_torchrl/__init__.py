"""pycollect-torchrl: TorchRL environments in pycollect's workers, and a ``ParallelEnv`` on them.

Installed, it registers the ``torchrl`` env backend through the ``pycollect`` entry-point
group: ``pycollect.Collector(make_env, ...)`` and ``pycollect.make_vec(make_env, n)`` step the
unbatched TorchRL ``EnvBase`` s ``make_env`` returns (a function, an ``EnvCreator``, an env
class with ``env_kwargs``, or ``env="torchrl:package.module:make_env"``), and
``pycollect.torchrl.ParallelEnv`` (this package's :class:`~pycollect_torchrl.parallel.ParallelEnv`)
is a TorchRL ``ParallelEnv`` running on pycollect's workers. Importing this package imports
neither torch nor TorchRL; building the first env does.
"""

from __future__ import annotations

from typing import Any

from pycollect import hookimpl
from pycollect_torchrl.backend import TorchRLBackend, is_torchrl_env

__all__ = ["ParallelEnv", "TorchRLBackend", "is_torchrl_env", "register_env_backend"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "ParallelEnv":  # imports TorchRL: only on first use
        from pycollect_torchrl.parallel import ParallelEnv

        return ParallelEnv
    raise AttributeError(f"module 'pycollect_torchrl' has no attribute {name!r}")


@hookimpl
def register_env_backend() -> type[TorchRLBackend]:
    """Contribute the ``torchrl`` env backend (pycollect's ``register_env_backend`` hook)."""
    return TorchRLBackend
