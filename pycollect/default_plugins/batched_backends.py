"""The batched env backends: ``gymnasium-vector`` (gymnasium's vector entry points) and ``envpool``.

Each builds one batched env of ``envs_per_worker`` sub-envs per worker (see
:mod:`pycollect.envs.batched`): ``"gymnasium-vector:CartPole-v1"`` is
``gymnasium.make_vec("CartPole-v1", envs_per_worker, vectorization_mode="vector_entry_point")``,
and ``"envpool:Pong-v5"`` is ``envpool.make("Pong-v5", env_type="gymnasium", num_envs=envs_per_worker)``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any

import gymnasium as gym

from pycollect.envs.backend import EnvBackend, GymLikeEnv
from pycollect.envs.batched import EnvPoolAdapter, VectorEnvAdapter
from pycollect.exceptions import ConfigError, UnknownEnvError
from pycollect.hookspecs import hookimpl

__all__ = ["EnvPoolBackend", "GymnasiumVectorBackend"]

_RESERVED = ("num_envs", "vectorization_mode")
_INT32_SEEDS = 2**31 - 1


class GymnasiumVectorBackend(EnvBackend):
    """Builds gymnasium's own batched implementation of an id (its ``vector_entry_point``).

    ``env_kwargs`` go to the vector env's constructor (``gymnasium.make_vec``'s ``vector_kwargs``
    and env kwargs as ``make_vec`` takes them). Only ids with a vector entry point are accepted:
    for the others, ``env="CartPole-v1"`` steps single envs, which is what gymnasium's
    ``vectorization_mode="sync"`` would do.
    """

    name = "gymnasium-vector"
    batched = True

    def check(self, target: Any, env_kwargs: Mapping[str, Any]) -> None:
        """The id is registered and has a vector entry point; no env is built."""
        if not isinstance(target, str) or not target:
            raise UnknownEnvError(f"gymnasium-vector env id must be a non-empty string, got {target!r}")
        try:
            spec = gym.spec(target)
        except gym.error.Error as exc:
            raise UnknownEnvError(f"unknown gymnasium env id {target!r}: {exc}") from None
        if spec.vector_entry_point is None:
            raise UnknownEnvError(
                f"gymnasium env {target!r} has no vector entry point (a batched implementation); "
                f"env={target!r} steps it as single envs"
            )
        _refuse_reserved(self.name, env_kwargs)

    def make(self, target: Any, env_kwargs: Mapping[str, Any]) -> GymLikeEnv:
        """Not used: this backend builds batched envs (:meth:`make_batched`)."""
        raise NotImplementedError("gymnasium-vector builds batched envs")

    def make_batched(self, target: Any, env_kwargs: Mapping[str, Any], num_envs: int) -> VectorEnvAdapter:
        """``gymnasium.make_vec(target, num_envs, vectorization_mode="vector_entry_point", **env_kwargs)``."""
        _refuse_reserved(self.name, env_kwargs)
        env = gym.make_vec(target, num_envs=num_envs, vectorization_mode="vector_entry_point", **dict(env_kwargs))
        return VectorEnvAdapter(env)


class EnvPoolBackend(EnvBackend):
    """Builds an EnvPool env (``envpool.make(task, env_type="gymnasium", ...)``), in sync mode.

    ``env_kwargs`` go to ``envpool.make`` (``episodic_life``, ``reward_clip``, ``stack_num``...);
    ``num_envs`` is ``envs_per_worker`` and ``seed`` the worker's first env seed (sub-env ``i``
    gets ``seed + i``, EnvPool's rule). EnvPool is an optional dependency (``pip install envpool``).
    """

    name = "envpool"
    batched = True

    def check(self, target: Any, env_kwargs: Mapping[str, Any]) -> None:
        """EnvPool is installed and lists the task; no env is built."""
        if importlib.util.find_spec("envpool") is None:
            raise UnknownEnvError(f"env 'envpool:{target}' needs EnvPool: pip install \"pycollect-rl[envpool]\"")
        import envpool

        if not isinstance(target, str) or target not in envpool.list_all_envs():
            raise UnknownEnvError(f"EnvPool has no task {target!r} (envpool.list_all_envs() names them)")
        _refuse_reserved(self.name, env_kwargs, ("batch_size", "env_type", "seed"))

    def make(self, target: Any, env_kwargs: Mapping[str, Any]) -> GymLikeEnv:
        """Not used: this backend builds batched envs (:meth:`make_batched`)."""
        raise NotImplementedError("envpool builds batched envs")

    def make_batched(self, target: Any, env_kwargs: Mapping[str, Any], num_envs: int) -> EnvPoolAdapter:
        """``envpool.make(target, env_type="gymnasium", num_envs=num_envs, **env_kwargs)``, rebuilt per seed."""
        import envpool

        kwargs = dict(env_kwargs)

        def build(seed: int) -> Any:
            # EnvPool takes an int32 seed (and gives sub-env i seed + i)
            seed %= _INT32_SEEDS - num_envs
            return envpool.make(target, env_type="gymnasium", num_envs=num_envs, seed=seed, **kwargs)

        return EnvPoolAdapter(build(0), remake=build, seed=0, task=str(target))


def _refuse_reserved(backend: str, env_kwargs: Mapping[str, Any], more: tuple[str, ...] = ()) -> None:
    for key in (*_RESERVED, *more):
        if key in env_kwargs:
            raise ConfigError(
                f"env_kwargs[{key!r}]: the {backend} backend sets it itself (num_envs is envs_per_worker, seeds come "
                "from the collector's seed)"
            )


@hookimpl
def register_env_backend() -> list[type[EnvBackend]]:
    """Register :class:`GymnasiumVectorBackend` and :class:`EnvPoolBackend`."""
    return [GymnasiumVectorBackend, EnvPoolBackend]
