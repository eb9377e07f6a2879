"""The engines behind a :class:`~pycollect.Collector` (internal).

Modules:
    base: the :class:`~.base.Engine` and :class:`~.base.EngineFactory` interfaces and the rollout
        plan every engine shares (public as :mod:`pycollect.engines`).
    inprocess: steps the environments in the trainer (``num_workers=0``).
    workers: supervised worker processes and the shared-memory transport (``num_workers>=1``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pycollect._engines.base import Engine, EngineFactory
    from pycollect.config import CollectorConfig
    from pycollect.envs.source import EnvSource

__all__ = ["default_factory", "start"]


def start(config: CollectorConfig, env_source: EnvSource, policy: Any, weights_module: Any) -> Engine:
    """Build the engine ``config`` asks for; nothing is left running if this raises.

    ``config.engine`` (an :class:`~.base.EngineFactory`, resolved by the config) if set, else
    the built-in one for ``num_workers``. ``weights_module`` is the module whose weights move
    to workers (``None``: none).
    """
    factory = config.engine_factory or default_factory(config)
    return factory.start(config, env_source, policy, weights_module)


def default_factory(config: CollectorConfig) -> EngineFactory:
    """The built-in engine for ``num_workers``: ``workers`` for 1 or more, ``inprocess`` for 0."""
    from pycollect.default_plugins.builtin_engines import InProcess, Workers

    return Workers() if config.num_workers else InProcess()
