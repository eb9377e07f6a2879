"""The ``callable`` env backend: a picklable factory returning a gymnasium-style env."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from pycollect.envs.backend import EnvBackend, GymLikeEnv
from pycollect.exceptions import UnknownEnvError
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
        _resolve(target)

    def make(self, target: Any, env_kwargs: Mapping[str, Any]) -> GymLikeEnv:
        """``factory(**env_kwargs)``."""
        env: GymLikeEnv = _resolve(target)(**dict(env_kwargs))
        return env


def _resolve(target: Any) -> Callable[..., Any]:
    if isinstance(target, str):
        module_name, sep, attr = target.partition(":")
        if not sep or not module_name or not attr:
            raise UnknownEnvError(f"callable env target {target!r} must be an import path 'package.module:function'")
        try:
            obj: Any = importlib.import_module(module_name)
            for part in attr.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError) as exc:
            raise UnknownEnvError(f"cannot import env factory {target!r}: {exc}") from None
        target = obj
    if not callable(target):
        raise UnknownEnvError(f"env factory {target!r} is not callable")
    factory: Callable[..., Any] = target
    return factory


@hookimpl
def register_env_backend() -> type[EnvBackend]:
    """Register :class:`CallableBackend`."""
    return CallableBackend
