"""The ``callable`` env backend: a picklable factory returning a gymnasium-style env."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from pycollect.envs.backend import EnvBackend, GymLikeEnv
from pycollect.exceptions import ConfigError, UnknownEnvError

__all__ = ["CallableBackend"]

_REQUIRED = ("reset", "step", "observation_space", "action_space")


class CallableBackend(EnvBackend):
    """Builds environments by calling a factory: ``factory(**env_kwargs)``.

    The target is the factory itself (any callable; it must be picklable with cloudpickle to
    reach worker processes) or an import path string ``"package.module:function"``.
    """

    name = "callable"

    def check(self, target: Any, env_kwargs: Mapping[str, Any]) -> None:
        _resolve(target)

    def make(self, target: Any, env_kwargs: Mapping[str, Any]) -> GymLikeEnv:
        factory = _resolve(target)
        env: GymLikeEnv = factory(**dict(env_kwargs))
        missing = [name for name in _REQUIRED if not hasattr(env, name)]
        if missing:
            raise ConfigError(
                f"env factory {_name(factory)} returned {type(env).__name__}, which lacks "
                f"{', '.join(missing)}: it must return a gymnasium-style env"
            )
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


def _name(factory: Callable[..., Any]) -> str:
    return getattr(factory, "__qualname__", None) or repr(factory)
