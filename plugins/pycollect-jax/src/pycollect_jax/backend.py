"""The ``gymnax`` env backend: ``"gymnax:<id>"``, one :class:`~pycollect_jax.env.GymnaxBatchedEnv` per worker.

The backend is batched: each worker (or an in-process collector, or a ``make_vec`` worker)
builds one gymnax env of ``envs_per_worker`` sub-envs, stepped by one jitted, vmapped call. It
builds device envs too: ``engine="device"`` gets one :class:`~pycollect_jax.device.GymnaxDeviceEnv`
of ``envs_per_worker`` sub-envs in the trainer, stepped with torch tensors that share JAX's memory.
gymnax (and with it JAX) is imported when an id is first checked, not when pycollect loads this
plugin: a trainer that collects from another backend never imports JAX.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from pycollect.envs import EnvBackend, GymLikeEnv
from pycollect.envs.backend import keyword_parameters
from pycollect.exceptions import ConfigError, EnvCreationError, PyCollectError, UnknownEnvError
from pycollect_jax.device import GymnaxDeviceEnv
from pycollect_jax.env import GymnaxBatchedEnv, configure_jax

if TYPE_CHECKING:
    from types import ModuleType

    import torch

__all__ = ["PARAMS", "RESERVED", "GymnaxBackend", "known_ids", "split_kwargs"]

PARAMS = "params"
"""The ``env_kwargs`` key whose mapping replaces fields of the env's ``EnvParams`` (``params.replace(...)``)."""

RESERVED = ("num_envs", "seed")
"""``env_kwargs`` keys the backend refuses: pycollect sets the sub-env count and the seeds itself."""


def _gymnax() -> ModuleType:
    configure_jax()  # in a worker: before JAX is first imported there
    import gymnax

    module: ModuleType = gymnax
    return module


def known_ids() -> list[str]:
    """Every id ``gymnax.make`` builds: ``gymnax.registered_envs``, runtime registrations included."""
    return list(_gymnax().registered_envs)


def _check_id(target: Any) -> str:
    if not isinstance(target, str) or not target:
        raise UnknownEnvError(f"gymnax env id must be a non-empty string such as 'CartPole-v1', got {target!r}")
    ids = known_ids()
    if target not in ids:
        raise UnknownEnvError(f"unknown gymnax env id {target!r}; gymnax has: {', '.join(ids)}")
    return target


def _factory(env_id: str) -> Callable[..., Any] | None:
    """The callable ``gymnax.make(env_id)`` calls (for its signature), where gymnax's registry shows it."""
    registry = getattr(getattr(_gymnax(), "registration", None), "_registry", None)
    factory = registry.get(env_id) if isinstance(registry, Mapping) else None
    return factory if callable(factory) else None


def split_kwargs(env_id: str, env_kwargs: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``env_kwargs`` as ``gymnax.make``'s keyword arguments and the ``EnvParams`` fields to replace.

    Args:
        env_id: A gymnax id.
        env_kwargs: The collector's ``env_kwargs``: the env constructor's keyword arguments
            (``{"size": 10}`` for DeepSea-bsuite), and ``"params"``, a mapping of ``EnvParams``
            fields (``{"params": {"max_steps_in_episode": 200}}``).

    Returns:
        ``(make_kwargs, params)``.

    Raises:
        ConfigError: A reserved key (``num_envs``, ``seed``), ``params`` not a mapping of
            strings, or a key the env's constructor does not take (where its signature is known);
            the message lists the accepted ones.
    """
    for key in RESERVED:
        if key in env_kwargs:
            raise ConfigError(
                f"env_kwargs[{key!r}]: the gymnax backend sets it itself (num_envs is envs_per_worker, seeds come "
                "from the collector's seed)"
            )
    params = env_kwargs.get(PARAMS) or {}
    if not isinstance(params, Mapping):
        raise ConfigError(f"env_kwargs['params'] must be a mapping of EnvParams fields, got {params!r}")
    bad = [key for key in params if not isinstance(key, str)]
    if bad:
        raise ConfigError(f"env_kwargs['params'] keys must be EnvParams field names, got {bad[0]!r}")
    make_kwargs = {key: value for key, value in env_kwargs.items() if key != PARAMS}
    accepted = keyword_parameters(_factory(env_id))
    if accepted is not None:
        for key in make_kwargs:
            if key not in accepted:
                raise ConfigError(
                    f"unknown env_kwargs key {key!r} for gymnax:{env_id}; accepted: "
                    f"{', '.join([*accepted, PARAMS])} (the env's constructor arguments, and 'params' for its "
                    "EnvParams fields)"
                )
    return make_kwargs, dict(params)


def _replace(env_id: str, params: Any, fields: Mapping[str, Any]) -> Any:
    """``params`` with ``fields`` replaced (flax ``struct.dataclass``'s ``replace``)."""
    if not fields:
        return params
    names = [field.name for field in dataclasses.fields(params)] if dataclasses.is_dataclass(params) else None
    if names is not None:
        unknown = [key for key in fields if key not in names]
        if unknown:
            raise ConfigError(
                f"env_kwargs['params'] key {unknown[0]!r}: gymnax:{env_id}'s {type(params).__name__} has no such "
                f"field; fields: {', '.join(names)}"
            )
    try:
        return params.replace(**fields)
    except (TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(f"env_kwargs['params']={dict(fields)!r} for gymnax:{env_id}: {exc}") from exc


class GymnaxBackend(EnvBackend):
    """Builds gymnax environments as batched envs: ``"gymnax:CartPole-v1"``.

    The target is any id of ``gymnax.registered_envs`` (``CartPole-v1``, ``Breakout-MinAtar``,
    ``Catch-bsuite``, ``FourRooms-misc``, ... and ids registered with ``gymnax.register``).
    ``env_kwargs`` are the env constructor's keyword arguments (``gymnax.make(id, **kwargs)``),
    plus ``"params"``: ``EnvParams`` fields to replace (``{"params": {"max_steps_in_episode":
    100}}``). Each worker builds one :class:`~pycollect_jax.env.GymnaxBatchedEnv` of
    ``envs_per_worker`` sub-envs; ``engine="device"`` builds one
    :class:`~pycollect_jax.device.GymnaxDeviceEnv` of them in the trainer (:meth:`make_device`).

    The backend holds no state, so it pickles to worker processes as a bare class reference.
    """

    name: ClassVar[str] = "gymnax"
    batched: ClassVar[bool] = True
    device_env: ClassVar[bool] = True

    def check(self, target: Any, env_kwargs: Mapping[str, Any]) -> None:
        """Check the id against gymnax's registry and ``env_kwargs`` against its constructor; nothing is built.

        Raises:
            UnknownEnvError: Not a gymnax id; the message lists gymnax's ids.
            ConfigError: A bad ``env_kwargs`` key (see :func:`split_kwargs`). ``params`` fields
                are checked when the env is built (they are the env's ``EnvParams``).
        """
        split_kwargs(_check_id(target), env_kwargs)

    def make(self, target: Any, env_kwargs: Mapping[str, Any]) -> GymLikeEnv:
        """Not used: this backend builds batched envs (:meth:`make_batched`)."""
        raise NotImplementedError("the gymnax backend builds batched envs")

    def make_batched(self, target: Any, env_kwargs: Mapping[str, Any], num_envs: int) -> GymnaxBatchedEnv:
        """``gymnax.make(target, **env_kwargs)`` as one :class:`GymnaxBatchedEnv` of ``num_envs`` sub-envs.

        Raises:
            UnknownEnvError: See :meth:`check`.
            ConfigError: See :meth:`check`, or a ``params`` key that is no field of the env's ``EnvParams``.
            EnvCreationError: ``gymnax.make`` raised (a bad constructor argument, MNISTBandit-bsuite's
                data that cannot be downloaded, ...), or tracing the env's reset and step did (a
                constructor argument of the wrong type); the message names the env and the error.
        """
        return _build(
            target, env_kwargs, lambda env, params, env_id: GymnaxBatchedEnv(env, params, num_envs, name=env_id)
        )

    def make_device(
        self, target: Any, env_kwargs: Mapping[str, Any], num_envs: int, device: torch.device | None
    ) -> GymnaxDeviceEnv:
        """``gymnax.make(target, **env_kwargs)`` as one :class:`GymnaxDeviceEnv` of ``num_envs`` sub-envs on ``device``.

        What ``engine="device"`` builds, in the trainer: the sub-envs of :meth:`make_batched`'s env,
        stepped with torch tensors that share JAX's memory.

        Args:
            target: The gymnax id.
            env_kwargs: As for :meth:`make_batched`.
            num_envs: The sub-envs (the collector's ``envs_per_worker``).
            device: The collector's ``env_device`` (else ``device``): ``None`` or the CPU for JAX's
                CPU, a CUDA device for JAX's GPU of that ordinal.

        Raises:
            UnknownEnvError: See :meth:`check`.
            ConfigError: See :meth:`make_batched`, or a ``device`` JAX has no counterpart of (a CUDA
                device without a CUDA build of JAX, another kind of device).
            EnvCreationError: See :meth:`make_batched`.
        """
        return _build(
            target,
            env_kwargs,
            lambda env, params, env_id: GymnaxDeviceEnv(env, params, num_envs, device=device, name=env_id),
        )


_Env = TypeVar("_Env")


def _build(target: Any, env_kwargs: Mapping[str, Any], wrap: Callable[[Any, Any, str], _Env]) -> _Env:
    """``gymnax.make(target, **env_kwargs)`` with its ``params`` replaced, as ``wrap(env, params, id)`` builds it."""
    env_id = _check_id(target)
    make_kwargs, fields = split_kwargs(env_id, env_kwargs)
    try:
        env, params = _gymnax().make(env_id, **make_kwargs)
    except Exception as exc:
        raise EnvCreationError(
            f"gymnax.make({env_id!r}) with env_kwargs={dict(env_kwargs)!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    params = _replace(env_id, params, fields)
    try:
        return wrap(env, params, env_id)
    except PyCollectError:
        raise
    except Exception as exc:  # raised where the env's reset and step are traced
        raise EnvCreationError(
            f"gymnax:{env_id} with env_kwargs={dict(env_kwargs)!r}: tracing its reset and step failed: "
            f"{type(exc).__name__}: {_first_line(exc)}"
        ) from exc


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else ""
