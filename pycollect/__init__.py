"""pycollect: fast, crash-safe reinforcement-learning data collection for PyTorch.

The front door is :class:`Collector`; batches come out as TorchRL-compatible ``TensorDict``
objects. For a loop that steps its envs itself, :func:`make_vec` returns a gymnasium vector env
(:mod:`pycollect.vector`). Errors derive from :class:`PyCollectError`.

Extension points, each a subpackage with its interface, extended through pluggy hooks
(:mod:`pycollect.hookspecs`, mark implementations with :data:`hookimpl`) and managed by
:mod:`pycollect.plugins`:

* :mod:`pycollect.envs`: env backends (:class:`EnvBackend`);
* :mod:`pycollect.weights`: weight-sync schemes (:class:`WeightSyncScheme`);
* :mod:`pycollect.devices`: device placement policies (:class:`DevicePolicy`);
* :mod:`pycollect.engines`: engines, what runs the environments (``EngineFactory``).

The built-in plugins (:mod:`pycollect.default_plugins`) register through the same hooks; their
classes are exported here to configure them (:class:`SharedMemoryScheme`,
:class:`ExplicitPolicy`...).

:mod:`pycollect.testing` has conformance checkers and test environments for plugin authors.

Importing pycollect starts no process; :func:`prestart` starts the fork server (what forks
worker processes) early, so that its imports overlap yours.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

try:
    from pycollect._core import __version__
except ModuleNotFoundError as error:
    if error.name != f"{__name__}._core":
        raise
    # A source tree (a clone's pycollect/, first on sys.path in the clone's root) has no native
    # module unless installed in editable mode: switch to an installed pycollect with the same
    # Python files, or raise an ImportError that says what to do (pycollect._source_tree).
    from pycollect import _source_tree

    _source_tree.use_installed_package(sys.modules[__name__])
    del _source_tree
    from pycollect._core import __version__
from pycollect._lazy import lazy_exports
from pycollect.exceptions import (
    ActionError,
    AttachError,
    BufferExportError,
    CollectorClosedError,
    ConfigError,
    ConformanceError,
    EnvCreationError,
    EnvOutputError,
    EnvStateError,
    LayoutMismatchError,
    PluginError,
    PolicyError,
    PyCollectError,
    PyCollectWarning,
    SupervisorError,
    TransportError,
    UnknownBackendError,
    UnknownDevicePolicyError,
    UnknownEngineError,
    UnknownEnvError,
    UnknownInferenceRunnerError,
    UnknownSchemeError,
    UnsupportedSpaceError,
    VectorEnvClosedError,
    WeightsMismatchError,
    WorkerCrashedError,
    WorkerStoppedError,
)
from pycollect.hookspecs import hookimpl

if TYPE_CHECKING:
    from pycollect._batch.episodes import EpisodeRecord
    from pycollect._rollout.seeding import env_seeds
    from pycollect._workers._prestart import prestart
    from pycollect.collector import Collector, CollectorStats
    from pycollect.config import CollectorConfig, SupervisionConfig, VectorConfig
    from pycollect.default_plugins import (
        CpuPolicy,
        ExplicitPolicy,
        NoSyncScheme,
        RoundRobinPolicy,
        SharedMemoryScheme,
        TorchDistributedScheme,
    )
    from pycollect.devices import DevicePolicy, Placement
    from pycollect.envs import EnvBackend, EnvSpecs, Field, FieldSpec, GymLikeEnv, specs_from_spaces
    from pycollect.vector import make_vec
    from pycollect.weights import WeightSyncScheme

# Imported on first use: a worker process imports this package too, and one with a random
# policy should not pay for importing torch and tensordict.
_LAZY = {
    "Collector": "pycollect.collector",
    "CollectorStats": "pycollect.collector",
    "CollectorConfig": "pycollect.config",
    "SupervisionConfig": "pycollect.config",
    "VectorConfig": "pycollect.config",
    "DevicePolicy": "pycollect.devices",
    "Placement": "pycollect.devices",
    "EnvBackend": "pycollect.envs",
    "EnvSpecs": "pycollect.envs",
    "Field": "pycollect.envs",
    "FieldSpec": "pycollect.envs",
    "GymLikeEnv": "pycollect.envs",
    "specs_from_spaces": "pycollect.envs",
    "WeightSyncScheme": "pycollect.weights",
    "EpisodeRecord": "pycollect._batch.episodes",
    "env_seeds": "pycollect._rollout.seeding",
    "prestart": "pycollect._workers._prestart",
    "make_vec": "pycollect.vector",
    # The built-in plugins' classes, to configure them (SharedMemoryScheme(mode="view")).
    **{name: "pycollect.default_plugins" for name in ("CpuPolicy", "ExplicitPolicy", "RoundRobinPolicy")},
    **{name: "pycollect.default_plugins" for name in ("NoSyncScheme", "SharedMemoryScheme", "TorchDistributedScheme")},
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())

# pycollect logs (what happens to workers: ``pycollect.workers``) and leaves handlers to the
# application, as libraries should: without this one, Python's last-resort handler would print
# warnings on the stderr of an application that configured no logging.
logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = [
    "ActionError",
    "AttachError",
    "BufferExportError",
    "Collector",
    "CollectorClosedError",
    "CollectorConfig",
    "CollectorStats",
    "ConfigError",
    "ConformanceError",
    "CpuPolicy",
    "DevicePolicy",
    "EnvBackend",
    "EnvCreationError",
    "EnvOutputError",
    "EnvSpecs",
    "EnvStateError",
    "EpisodeRecord",
    "ExplicitPolicy",
    "Field",
    "FieldSpec",
    "GymLikeEnv",
    "LayoutMismatchError",
    "NoSyncScheme",
    "Placement",
    "PluginError",
    "PolicyError",
    "PyCollectError",
    "PyCollectWarning",
    "RoundRobinPolicy",
    "SharedMemoryScheme",
    "SupervisionConfig",
    "SupervisorError",
    "TorchDistributedScheme",
    "TransportError",
    "UnknownBackendError",
    "UnknownDevicePolicyError",
    "UnknownEngineError",
    "UnknownEnvError",
    "UnknownInferenceRunnerError",
    "UnknownSchemeError",
    "UnsupportedSpaceError",
    "VectorConfig",
    "VectorEnvClosedError",
    "WeightSyncScheme",
    "WeightsMismatchError",
    "WorkerCrashedError",
    "WorkerStoppedError",
    "__version__",
    "env_seeds",
    "hookimpl",
    "make_vec",
    "prestart",
    "specs_from_spaces",
]
