"""The engines behind a :class:`~pycollect.Collector` (internal).

Modules:
    base: the :class:`~.base.Engine` interface and the rollout plan both engines share.
    inprocess: steps the environments in the trainer (``num_workers=0``).
    workers: supervised worker processes and the shared-memory transport (``num_workers>=1``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pycollect._engines.base import Engine
    from pycollect.config import CollectorConfig
    from pycollect.envs.source import EnvSource

__all__ = ["start"]


def start(config: CollectorConfig, env_source: EnvSource, policy: Any, weights_module: Any) -> Engine:
    """Build the engine ``config`` asks for; nothing is left running if this raises.

    ``weights_module`` is the module whose weights move to workers (``None``: none).
    """
    if config.num_workers:
        from pycollect._engines.workers.pool import WorkerPool

        return WorkerPool.start(config, env_source, policy, weights_module)
    from pycollect._engines.inprocess import InProcessEngine

    return InProcessEngine.start(config, env_source, policy, weights_module)
