"""pycollect: fast, crash-safe reinforcement-learning data collection for PyTorch.

The front door is :class:`Collector`; batches come out as TorchRL-compatible ``TensorDict``
objects. Errors derive from :class:`PyCollectError`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from pycollect._core import __version__
from pycollect.exceptions import (
    CollectorClosedError,
    ConfigError,
    LayoutMismatchError,
    PolicyError,
    PyCollectError,
    PyCollectWarning,
    TransportError,
    UnknownBackendError,
    UnknownEnvError,
    UnsupportedSpaceError,
    WorkerCrashedError,
)

if TYPE_CHECKING:
    from pycollect._batch.episodes import EpisodeRecord
    from pycollect._rollout.seeding import env_seeds
    from pycollect.collector import Collector
    from pycollect.envs.source import EnvBackend, GymLikeEnv, backend_names
    from pycollect.envs.specs import EnvSpecs, FieldSpec, specs_from_spaces

# Imported on first use: a worker process imports this package too, and one with a random
# policy should not pay for importing torch and tensordict.
_LAZY = {
    "Collector": "pycollect.collector",
    "EnvBackend": "pycollect.envs.source",
    "GymLikeEnv": "pycollect.envs.source",
    "backend_names": "pycollect.envs.source",
    "EpisodeRecord": "pycollect._batch.episodes",
    "env_seeds": "pycollect._rollout.seeding",
    "EnvSpecs": "pycollect.envs.specs",
    "FieldSpec": "pycollect.envs.specs",
    "specs_from_spaces": "pycollect.envs.specs",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pycollect' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "Collector",
    "CollectorClosedError",
    "ConfigError",
    "EnvBackend",
    "EnvSpecs",
    "EpisodeRecord",
    "FieldSpec",
    "GymLikeEnv",
    "LayoutMismatchError",
    "PolicyError",
    "PyCollectError",
    "PyCollectWarning",
    "TransportError",
    "UnknownBackendError",
    "UnknownEnvError",
    "UnsupportedSpaceError",
    "WorkerCrashedError",
    "__version__",
    "backend_names",
    "env_seeds",
    "specs_from_spaces",
]
