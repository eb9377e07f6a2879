"""The built-in engines, ``inprocess`` and ``workers``, registered as any plugin's would be."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pycollect.engines.base import Engine, EngineFactory
from pycollect.exceptions import ConfigError
from pycollect.hookspecs import hookimpl

if TYPE_CHECKING:
    from pycollect.config import CollectorConfig
    from pycollect.envs.source import EnvSource

__all__ = ["InProcess", "Workers"]


class InProcess(EngineFactory):
    """The environments step in the trainer process (``num_workers=0``)."""

    name = "inprocess"

    def check(self, config: CollectorConfig) -> None:
        """Refuse workers: this engine has none."""
        if config.num_workers:
            raise ConfigError(
                f"engine='inprocess' steps the environments in this process; got num_workers={config.num_workers}"
            )

    def start(self, config: CollectorConfig, env_source: EnvSource, policy: Any, weights_module: Any) -> Engine:
        """Build the environments here."""
        from pycollect._engines.inprocess import InProcessEngine

        return InProcessEngine.start(config, env_source, policy, weights_module)


class Workers(EngineFactory):
    """Supervised worker processes, batches through shared memory (``num_workers >= 1``)."""

    name = "workers"

    def check(self, config: CollectorConfig) -> None:
        """Require at least one worker."""
        if not config.num_workers:
            raise ConfigError("engine='workers' needs num_workers >= 1")

    def start(self, config: CollectorConfig, env_source: EnvSource, policy: Any, weights_module: Any) -> Engine:
        """Check everything, then start the workers."""
        from pycollect._engines.workers.pool import WorkerPool

        return WorkerPool.start(config, env_source, policy, weights_module)


@hookimpl
def register_engine() -> Sequence[type[EngineFactory]]:
    """Register :class:`InProcess` and :class:`Workers`."""
    return [InProcess, Workers]
