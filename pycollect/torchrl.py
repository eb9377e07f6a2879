"""``pycollect.torchrl``: TorchRL's ``ParallelEnv`` on pycollect's workers.

``pycollect.torchrl.ParallelEnv(num_workers, create_env_fn, create_env_kwargs=None, ...)`` is a
TorchRL ``EnvBase`` with the signature and batch semantics of ``torchrl.envs.ParallelEnv``
(docs/torchrl.md). It lives in the ``pycollect-torchrl`` plugin, which depends on TorchRL;
this module only names it, so ``import pycollect`` never imports TorchRL.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ParallelEnv"]  # noqa: F822 - resolved by __getattr__, from the plugin

_MISSING = (
    "pycollect.torchrl.ParallelEnv comes with the pycollect-torchrl plugin, which is not installed: "
    "pip install pycollect-torchrl"
)


def __getattr__(name: str) -> Any:
    if name != "ParallelEnv":
        raise AttributeError(f"module 'pycollect.torchrl' has no attribute {name!r}")
    try:
        from pycollect_torchrl.parallel import ParallelEnv
    except ModuleNotFoundError as exc:
        if exc.name is not None and exc.name.split(".")[0] == "pycollect_torchrl":
            raise ImportError(_MISSING, name="pycollect_torchrl") from None
        raise
    return ParallelEnv
