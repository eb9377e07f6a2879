"""pycollect: fast, crash-safe reinforcement-learning data collection for PyTorch.

The front door is :class:`Collector`; batches come out as TorchRL-compatible ``TensorDict``
objects. Errors derive from :class:`PyCollectError`.
"""

from __future__ import annotations

from pycollect._backends import EnvBackend, GymLikeEnv, backend_names
from pycollect._collector import Collector
from pycollect._core import __version__
from pycollect._episodes import EpisodeRecord
from pycollect._errors import (
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
from pycollect._seeding import env_seeds
from pycollect._specs import EnvSpecs, FieldSpec, specs_from_spaces

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
