"""pycollect on Ray: the ``ray`` engine and the ``ray`` weight-sync scheme.

``Collector(env, policy, ..., engine=RayEngine(num_actors=M), num_workers=N)`` runs ``M`` Ray
actors, each with a local pycollect collector of ``N`` supervised workers; batches reach the
trainer through the Ray object store, weights go out through it once per version. See the
package README and pycollect's ``docs/distributed.md``.

Importing this module does not import Ray (``pycollect plugins`` stays fast); the engine
imports it when it starts.
"""

from __future__ import annotations

from collections.abc import Sequence

import pycollect
from pycollect.engines import EngineFactory
from pycollect.weights import WeightSyncScheme
from pycollect_ray.engine import ActorStats, RayEngine, actor_seed
from pycollect_ray.scheme import RayScheme

__all__ = ["ActorStats", "RayEngine", "RayScheme", "actor_seed"]


@pycollect.hookimpl
def register_engine() -> Sequence[type[EngineFactory]]:
    """Register :class:`RayEngine` as ``engine="ray"``."""
    return [RayEngine]


@pycollect.hookimpl
def register_scheme() -> Sequence[type[WeightSyncScheme]]:
    """Register :class:`RayScheme` as ``weight_sync="ray"``."""
    return [RayScheme]
