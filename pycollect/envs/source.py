"""Env backends: the registry and the resolution of a user's ``env`` argument."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pycollect.default_plugins.callable_backend import CallableBackend
from pycollect.default_plugins.gymnasium_backend import GymnasiumBackend
from pycollect.envs.backend import EnvBackend, GymLikeEnv
from pycollect.envs.specs import EnvSpecs
from pycollect.exceptions import ConfigError, UnknownBackendError

__all__ = ["EnvBackend", "EnvSource", "GymLikeEnv", "backend_names", "get_backend", "resolve_env"]

_BACKENDS: dict[str, type[EnvBackend]] = {
    GymnasiumBackend.name: GymnasiumBackend,
    CallableBackend.name: CallableBackend,
}


def backend_names() -> list[str]:
    """The names (spec prefixes) of every registered env backend, sorted."""
    return sorted(_BACKENDS)


def get_backend(name: str) -> EnvBackend:
    """Instantiate the env backend registered as ``name``.

    Raises:
        UnknownBackendError: No backend has that name; the message lists the known ones.
    """
    try:
        return _BACKENDS[name]()
    except KeyError:
        raise UnknownBackendError(
            f"unknown env backend {name!r}; known backends: {', '.join(backend_names())}. "
            "For gymnasium's 'module:EnvId' form write 'gymnasium:module:EnvId'"
        ) from None


@dataclass(frozen=True)
class EnvSource:
    """A resolved env argument: which backend builds it, from what, with which kwargs.

    It is small and picklable (given a picklable target), so it can be sent to workers.
    """

    backend: str
    target: Any
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)

    def make(self) -> GymLikeEnv:
        """Build one environment through the backend."""
        return get_backend(self.backend).make(self.target, self.env_kwargs)

    def specs(self, env: GymLikeEnv) -> EnvSpecs:
        """Report the fields of an environment this source built."""
        return get_backend(self.backend).specs(env)

    def describe(self) -> str:
        """A short human-readable name, e.g. ``gymnasium:CartPole-v1``."""
        target = self.target
        if not isinstance(target, str):
            target = getattr(target, "__qualname__", None) or type(target).__name__
        return f"{self.backend}:{target}"


def resolve_env(env: str | Callable[..., Any], env_kwargs: Mapping[str, Any] | None = None) -> EnvSource:
    """Resolve and check a user's ``env`` argument, building nothing.

    Args:
        env: ``"<backend>:<target>"``, a bare gymnasium id such as ``"CartPole-v1"``, or a
            factory callable (the ``callable`` backend).
        env_kwargs: Keyword arguments for the environment constructor.

    Raises:
        UnknownBackendError: The prefix names no backend.
        UnknownEnvError: The backend does not know the target.
        ConfigError: ``env`` or ``env_kwargs`` has the wrong type.
    """
    if env_kwargs is None:
        env_kwargs = {}
    if not isinstance(env_kwargs, Mapping):
        raise ConfigError(f"env_kwargs must be a mapping, got {type(env_kwargs).__name__}: {env_kwargs!r}")
    target: Any
    if isinstance(env, str):
        prefix, sep, rest = env.partition(":")
        backend, target = (prefix, rest) if sep else (GymnasiumBackend.name, env)
    elif callable(env):
        backend, target = CallableBackend.name, env
    else:
        raise ConfigError(f"env must be an env id string or a factory callable, got {env!r}")
    get_backend(backend).check(target, env_kwargs)
    return EnvSource(backend, target, dict(env_kwargs))
