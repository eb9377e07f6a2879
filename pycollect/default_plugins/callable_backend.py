"""The ``callable`` env backend: a picklable factory returning a gymnasium-style env."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pycollect.envs.backend import EnvBackend, GymLikeEnv, import_factory
from pycollect.hookspecs import hookimpl

__all__ = ["CallableBackend"]


class CallableBackend(EnvBackend):
    """Builds environments by calling a factory: ``factory(**env_kwargs)``.

    The target is the factory itself (any callable, an env class included; it must be
    picklable with cloudpickle to reach worker processes) or an import path string
    ``"package.module:function"``. Passing a callable as ``env`` selects this backend.
    """

    name = "callable"

    def check(self, target: Any, env_kwargs: Mapping[str, Any]) -> None:
        """Import the factory if the target is a path; check that it is callable."""
        import_factory(target, self.name)

    def make(self, target: Any, env_kwargs: Mapping[str, Any]) -> GymLikeEnv:
        """``factory(**env_kwargs)``."""
        env: GymLikeEnv = import_factory(target, self.name)(**dict(env_kwargs))
        return env


@hookimpl
def register_env_backend() -> type[EnvBackend]:
    """Register :class:`CallableBackend`."""
    return CallableBackend
