"""The in-process step backend, ``"inprocess"`` (``num_workers=0``): every env in one group, in the trainer."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from pycollect._steps.backend import InfoParts, StepBackend, check_indices
from pycollect._steps.group import EnvGroup
from pycollect._steps.spaces import SpaceLayout
from pycollect.config import VectorConfig
from pycollect.envs.backend import GymLikeEnv
from pycollect.envs.source import EnvSource
from pycollect.exceptions import ConfigError

__all__ = ["InProcessBackend"]


class InProcessBackend(StepBackend):
    """Steps every env of a vector env in this process, as one :class:`~pycollect._steps.group.EnvGroup`.

    The :class:`~pycollect.vector.StepBackend` registered as ``"inprocess"`` (the default for
    ``num_workers=0``); its result arrays are plain numpy arrays it owns. Infos travel as
    material only (no info fields: nothing crosses a process boundary here). A step happens in
    :meth:`step_wait`, in the caller's thread.

    Args:
        envs: The environments, built (``config.num_envs`` of them); the backend closes them.
        config: The vector env's settings (the autoreset mode, ``info_keys``, ``max_episode_steps``
            are the group's; see :class:`~pycollect._steps.group.EnvGroup`).
        env_name: The env's name, for messages.

    Raises:
        ConfigError: The envs' spaces differ from each other.
        UnsupportedSpaceError: A space has a leaf pycollect cannot lay out.
    """

    name = "inprocess"

    def __init__(self, envs: Sequence[GymLikeEnv], config: VectorConfig, env_name: str = "env") -> None:
        first = envs[0]
        self.num_envs = len(envs)
        self.observation = SpaceLayout(first.observation_space, "observation")
        self.action = SpaceLayout(first.action_space, "action")
        self.metadata: Mapping[str, Any] = dict(getattr(first, "metadata", {}))
        self.render_mode: str | None = getattr(first, "render_mode", None)
        self.observations = self.observation.empty(self.num_envs)
        self.final_observations = self.observation.empty(self.num_envs) if config.final_observations else None
        self.actions = self.action.empty(self.num_envs)  # where a step's actions are written
        self._stepping = False  # step_async() was called and step_wait() not yet
        self.rewards = np.zeros(self.num_envs, np.float64)
        self.terminated = np.zeros(self.num_envs, np.bool_)
        self.truncated = np.zeros(self.num_envs, np.bool_)
        self.group = EnvGroup(
            envs,
            config.autoreset_mode,
            self.observation,
            self.action,
            self.observations,
            self.rewards,
            self.terminated,
            self.truncated,
            self.final_observations,
            env_name=env_name,
            info_keys=config.info_keys,
            max_episode_steps=config.max_episode_steps,
        )
        self.info = self.group.info

    @classmethod
    def check(cls, config: VectorConfig) -> None:
        """Refuse workers: this backend has none.

        Raises:
            ConfigError: ``num_workers`` is not 0.
        """
        if config.num_workers:
            raise ConfigError(
                f"step_backend={cls.name!r} steps the envs in this process; got num_workers={config.num_workers} "
                "(pass num_workers=0)"
            )
        super().check(config)

    @classmethod
    def start(cls, source: EnvSource, config: VectorConfig) -> InProcessBackend:
        """Build ``config.num_envs`` envs from ``source`` and a backend over them (closing them if that fails).

        Raises:
            EnvCreationError: An env's constructor raised.
            ConfigError: What was built is not a gymnasium-style env, or the envs' spaces differ.
            UnsupportedSpaceError: A space has a leaf pycollect cannot lay out.
        """
        envs: list[GymLikeEnv] = []
        try:
            envs.extend(source.make_envs(config.num_envs))
            return cls(envs, config, source.describe())
        except BaseException:
            for env in envs:
                with contextlib.suppress(Exception):  # the error that stopped the start is the one to report
                    env.close()
            raise

    def reset(self, seeds: Sequence[int | None], options: dict[str, Any] | None, mask: np.ndarray | None) -> InfoParts:
        """Reset every env or the envs of ``mask`` (see :class:`~pycollect.vector.StepBackend`)."""
        material = self.group.reset(seeds, options, mask)
        return [] if material is None else [(0, material)]

    def step_async(self, actions: Sequence[np.ndarray] | None = None) -> None:
        """Keep the actions (in :attr:`actions`, copied there from ``actions`` if given) for :meth:`step_wait`."""
        if actions is not None:
            for block, leaf in zip(self.actions, actions, strict=True):
                block[...] = leaf
        self._stepping = True

    def step_wait(self) -> InfoParts:
        """Step every env with the actions :meth:`step_async` kept."""
        if not self._stepping:
            raise ConfigError("step_wait() without step_async() before it")
        self._stepping = False
        # Copies: an env may keep its action, and the next step rewrites these arrays.
        material = self.group.step([block.copy() for block in self.actions])
        return [] if material is None else [(0, material)]

    def call(
        self, name: str, args: Sequence[Any], kwargs: Mapping[str, Any], indices: Sequence[int] | None = None
    ) -> list[Any]:
        """Each env's ``name`` (of ``indices``), called if callable."""
        return self.group.call(name, args, kwargs, check_indices(indices, self.num_envs))

    def get_attr(self, name: str, indices: Sequence[int] | None = None) -> list[Any]:
        """Each env's ``name`` (of ``indices``)."""
        return self.group.get_attr(name, check_indices(indices, self.num_envs))

    def set_attr(self, name: str, values: Sequence[Any], indices: Sequence[int] | None = None) -> None:
        """Set ``name`` on each env (of ``indices``)."""
        self.group.set_attr(name, values, check_indices(indices, self.num_envs))

    def apply(self, function: Callable[[Any], Any], indices: Sequence[int] | None = None) -> list[Any]:
        """``function(env)`` on each env (of ``indices``)."""
        return self.group.apply(function, check_indices(indices, self.num_envs))

    def workers(self) -> tuple[Any, ...]:
        """No worker processes: ``()``."""
        return ()

    def close(self) -> None:
        """Close every env (once)."""
        self.group.close()
