"""The env-backend interface: how pycollect turns an env spec into environments."""

from __future__ import annotations

import abc
import importlib
import inspect
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from pycollect.envs import state as env_state
from pycollect.envs.specs import EnvSpecs, specs_from_spaces
from pycollect.exceptions import UnknownEnvError

if TYPE_CHECKING:
    import torch

    from pycollect.envs.device import DeviceBatchedEnv

__all__ = ["EnvBackend", "GymLikeEnv", "import_factory", "keyword_parameters"]


@runtime_checkable
class GymLikeEnv(Protocol):
    """What pycollect needs from an environment: gymnasium's ``Env`` API."""

    observation_space: Any
    action_space: Any

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Start an episode; return the first observation and an info dict."""

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        """Advance one step; return (observation, reward, terminated, truncated, info)."""

    def close(self) -> None:
        """Release the environment's resources."""


class EnvBackend(abc.ABC):
    """Builds environments from a target and reports their specs.

    A backend is chosen by the prefix of an env spec (``"gymnasium:CartPole-v1"`` picks the
    backend named ``"gymnasium"`` with target ``"CartPole-v1"``). :meth:`check` runs in the
    trainer before any environment or worker exists; :meth:`make` runs wherever environments
    step (the trainer in-process, or each worker process), so a backend must be importable
    there and carry no unpicklable state.
    """

    name: ClassVar[str]
    """The spec prefix that selects this backend."""

    def check(self, target: Any, env_kwargs: Mapping[str, Any]) -> None:  # noqa: B027 - optional hook
        """Validate ``target`` cheaply, before anything is built.

        Raises:
            UnknownEnvError: ``target`` names no environment this backend can build.
        """

    @abc.abstractmethod
    def make(self, target: Any, env_kwargs: Mapping[str, Any]) -> GymLikeEnv:
        """Build one environment.

        Args:
            target: What follows the backend prefix in the env spec, or the object passed.
            env_kwargs: Keyword arguments for the environment's constructor.
        """

    batched: ClassVar[bool] = False
    """Whether :meth:`make_batched` builds the envs: one batched env of ``envs_per_worker`` sub-envs per worker."""

    def make_batched(self, target: Any, env_kwargs: Mapping[str, Any], num_envs: int) -> Any:
        """Build one batched env of ``num_envs`` sub-envs (a backend whose :attr:`batched` is true).

        Returns:
            A :class:`~pycollect.envs.batched.BatchedEnv`, a gymnasium ``VectorEnv`` or an EnvPool env.
        """
        raise NotImplementedError(f"env backend {self.name!r} builds single envs")

    device_env: ClassVar[bool] = False
    """Whether :meth:`make_device` builds device envs, which ``engine="device"`` steps (``pycollect.envs.device``)."""

    def make_device(
        self, target: Any, env_kwargs: Mapping[str, Any], num_envs: int, device: torch.device | None
    ) -> DeviceBatchedEnv:
        """Build one device env of ``num_envs`` sub-envs (a backend whose :attr:`device_env` is true).

        Optional: a backend of simulators that step on an accelerator (a JAX or CUDA simulator)
        implements it and sets :attr:`device_env`; ``engine="device"`` then calls it once, in the
        trainer, and steps the env there. A backend may build both kinds (:meth:`make` or
        :meth:`make_batched` for the other engines, with numpy on the host).

        Args:
            target: What follows the backend prefix in the env spec, or the object passed.
            env_kwargs: Keyword arguments for the environment's constructor.
            num_envs: The sub-envs to build (the collector's ``envs_per_worker``).
            device: Where the env's tensors must live: the collector's ``env_device``, else its
                ``device``; ``None``: the backend's choice (a JAX backend: JAX's default device).

        Returns:
            A :class:`~pycollect.envs.DeviceBatchedEnv` of ``num_envs`` sub-envs.
        """
        raise NotImplementedError(f"env backend {self.name!r} builds no device envs")

    def specs(self, env: GymLikeEnv) -> EnvSpecs:
        """Report the fields of a built environment (from its gymnasium spaces by default)."""
        return specs_from_spaces(env.observation_space, env.action_space)

    def adopt(self, env: Any) -> GymLikeEnv | None:
        """Step an env that a factory (the ``callable`` backend) built and pycollect cannot step as it is.

        A factory may return an env of another library (``pycollect-torchrl`` adopts TorchRL
        ``EnvBase`` s). Where a backend that overrides this method is registered, the trainer
        puts it in the ``callable`` backend's :class:`~pycollect.envs.source.EnvSource`, which
        offers it what the factory returns when that is not a gymnasium-style env. Runs wherever
        envs are built; :meth:`adopted` and :meth:`specs` then describe the result.

        Returns:
            A gymnasium-style env stepping ``env``, or ``None``: not this backend's kind.

        Raises:
            ConfigError: ``env`` is this backend's kind but cannot be stepped (the message says why).
        """
        return None

    def adopted(self, env: GymLikeEnv) -> bool:
        """Whether ``env`` is what this backend's :meth:`adopt` returned (its :meth:`specs` describe it)."""
        return False

    def snapshot_refusal(self, env: Any) -> str | None:
        """Why a built env's state cannot be saved, naming the part that cannot; ``None`` if it can.

        Checkpoints with env states and crash replay ask it first, when they are switched on, so
        that an env that cannot be snapshot is a named error at construction, never silently
        less. The default is :func:`pycollect.envs.state.snapshot_refusal` (gymnasium's wrappers
        and envs, ALE, MuJoCo, and any env implementing
        :class:`~pycollect.envs.state.SnapshotEnv`). A backend whose envs are saved otherwise
        overrides it with :meth:`get_state` and :meth:`set_state`.
        """
        return env_state.snapshot_refusal(env)

    def get_state(self, env: Any) -> Any:
        """A snapshot of a built env: everything its future depends on, picklable.

        Restored by :meth:`set_state` into this env, or into another built by this backend from
        the same target and kwargs (in another process too), the env returns the same
        observations, rewards, flags and infos for the same actions, random draws included. The
        default is :func:`pycollect.envs.state.get_env_state`.

        Raises:
            EnvStateError: The env cannot be snapshot (see :meth:`snapshot_refusal`).
        """
        return env_state.get_env_state(env)

    def set_state(self, env: Any, state: Any) -> None:
        """Restore a snapshot from :meth:`get_state` into a built env (whatever it did before).

        The default is :func:`pycollect.envs.state.set_env_state`.

        Raises:
            EnvStateError: ``state`` does not fit ``env`` (another env, another format: the
                message names both), or the env cannot be snapshot; ``env`` is left as it was.
        """
        env_state.set_env_state(env, state)


def import_factory(target: Any, backend: str, what: str = "env factory") -> Callable[..., Any]:
    """The factory a backend's target names: the target itself, or what ``"package.module:name"`` imports.

    For backends whose targets are factories (the built-in ``callable`` backend, plugins'
    backends such as ``torchrl``).

    Args:
        target: A callable, or an import path string ``"package.module:name"`` (``name`` may be
            dotted: ``"pkg.mod:Class.create"``).
        backend: The backend's name, for messages.
        what: What the factory is, for messages (``"env factory"``, ``"TorchRL env factory"``).

    Raises:
        UnknownEnvError: The path is malformed or cannot be imported, or the target is not callable.
    """
    if isinstance(target, str):
        module_name, sep, attr = target.partition(":")
        if not sep or not module_name or not attr:
            raise UnknownEnvError(f"{backend} env target {target!r} must be an import path 'package.module:function'")
        try:
            obj: Any = importlib.import_module(module_name)
            for part in attr.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError) as exc:
            raise UnknownEnvError(f"cannot import {what} {target!r}: {exc}") from None
        target = obj
    if not callable(target):
        raise UnknownEnvError(f"{what} {target!r} is not callable")
    factory: Callable[..., Any] = target
    return factory


def keyword_parameters(function: Callable[..., Any] | None) -> list[str] | None:
    """The names ``function`` takes as keyword arguments, to check a backend's ``env_kwargs`` against.

    Returns:
        The names, in order; ``None`` when they cannot be known (no function, no signature) or
        when it takes ``**kwargs`` (any name goes).
    """
    if function is None:
        return None
    try:
        params = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in params if p.kind in keyword]
