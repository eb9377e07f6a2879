"""What a config knows of an engine: :class:`EngineTraits`, the base of every engine factory.

:class:`~pycollect.config.CollectorConfig` holds an engine (a name, or an
:class:`~pycollect.engines.EngineFactory` instance) and reads two of its attributes
(``replicas``, ``policy_in_trainer``, ``snapshots_envs``); the engine interface takes a ``CollectorConfig`` in turn.
So that the config, a low floor, names nothing above it, the attributes it reads live here, in a
leaf below it, and :class:`~pycollect.engines.EngineFactory` derives from this class.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = ["EngineTraits"]


class EngineTraits:
    """The class attributes of an engine factory (documented on :class:`~pycollect.engines.EngineFactory`)."""

    name: ClassVar[str] = ""
    replicas: int = 1
    default_weight_sync: ClassVar[str] = "shared_memory"
    policy_in_trainer: ClassVar[bool] = False
    snapshots_envs: ClassVar[bool] = False
