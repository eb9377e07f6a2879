"""The ``gymnasium`` env backend: any registered gymnasium id, kwargs passed through."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import gymnasium as gym

from pycollect.envs.backend import EnvBackend, GymLikeEnv
from pycollect.exceptions import UnknownEnvError
from pycollect.hookspecs import hookimpl

__all__ = ["GymnasiumBackend"]


class GymnasiumBackend(EnvBackend):
    """Builds environments with :func:`gymnasium.make`.

    Targets are registered ids such as ``"CartPole-v1"`` or gymnasium's ``"module:EnvId"``
    form, which imports ``module`` first so that it can register its environments. A bare id
    without a backend prefix (``env="CartPole-v1"``) also selects this backend.
    """

    name = "gymnasium"

    def check(self, target: Any, env_kwargs: Mapping[str, Any]) -> None:
        """Look the id up in gymnasium's registry (no environment is built)."""
        if not isinstance(target, str) or not target:
            raise UnknownEnvError(f"gymnasium env id must be a non-empty string, got {target!r}")
        env_id = _import_module_prefix(target)
        try:
            gym.spec(env_id)
        except gym.error.Error as exc:
            raise UnknownEnvError(f"unknown gymnasium env id {target!r}: {exc}") from None

    def make(self, target: Any, env_kwargs: Mapping[str, Any]) -> GymLikeEnv:
        """``gymnasium.make(target, **env_kwargs)``."""
        env_id = _import_module_prefix(target)
        try:
            return gym.make(env_id, **dict(env_kwargs))
        except gym.error.Error as exc:
            raise UnknownEnvError(f"cannot make gymnasium env {target!r}: {exc}") from None


def _import_module_prefix(target: str) -> str:
    """Import ``module`` for a ``"module:EnvId"`` target and return ``EnvId``."""
    if ":" not in target:
        return target
    module, env_id = target.split(":", 1)
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise UnknownEnvError(
            f"gymnasium env {target!r}: cannot import module {module!r} that should register it ({exc})"
        ) from None
    return env_id


@hookimpl
def register_env_backend() -> type[EnvBackend]:
    """Register :class:`GymnasiumBackend`."""
    return GymnasiumBackend
