"""What a vector env steps its environments through: the :class:`StepBackend` base class.

:class:`pycollect.vector.VectorEnv` checks its input, hands it to a backend, then builds what
gymnasium returns (observations from the result arrays, infos from the material) itself; a
backend only moves requests to where the envs are and results into its arrays. The in-process
backend (:class:`~pycollect._step_backends.inprocess.InProcessBackend`, ``"inprocess"``) steps one
:class:`~pycollect._steps.group.EnvGroup` of every env in the trainer; the worker-process
backend (``"workers"``) steps one group per worker, its result arrays in shared memory.

The base class is public as :class:`pycollect.vector.StepBackend`: plugins register subclasses
through the ``register_step_backend()`` hook and users choose one with ``make_vec(...,
step_backend="<name>")``. It lives here, below the plugin manager and the engines, because
both built-in backends derive from it and the plugin manager checks registered classes against
it (``pyproject.toml``'s import layers).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, TypeAlias

import numpy as np

from pycollect._steps.group import Material
from pycollect._steps.info_fields import InfoArrays
from pycollect._steps.spaces import SpaceLayout
from pycollect.config import VectorConfig
from pycollect.envs.source import EnvSource
from pycollect.exceptions import ConfigError

__all__ = ["InfoParts", "StepBackend", "check_indices", "split_indices"]

InfoParts: TypeAlias = list[tuple[int, Material]]
"""``(index of a group's first env, the group's info material)`` for each group that returned
material, in env order; empty when none did (the common step)."""


class StepBackend(abc.ABC):
    """Steps ``num_envs`` environments with gymnasium's autoreset semantics, results in arrays.

    What a :class:`~pycollect.vector.VectorEnv` (and ``SB3VecEnv``, and ``pycollect.torchrl.ParallelEnv``)
    steps through, and what the ``register_step_backend()`` hook contributes. Users choose one
    with ``make_vec(..., step_backend="<name>")`` (or the class itself); without one, ``"inprocess"``
    for ``num_workers=0`` and ``"workers"`` otherwise. :meth:`check` sees the vector env's
    settings before anything is built, then :meth:`start` builds the envs (``config.num_envs``
    of them, from ``source``) and returns a running backend.

    Env ``n`` of the vector env is env ``n - offset`` of the group whose first env is
    ``offset``; groups hold consecutive envs, in order (one group in-process, one per worker).

    The result arrays are fixed for the backend's life (``VectorEnv(copy=False)`` hands out
    views of them) and rewritten by every :meth:`reset` (the rows of the envs it resets) and
    :meth:`step_wait`. The vector env writes a step's actions into :attr:`actions` before
    :meth:`step_async` and reads the results only after :meth:`step_wait` returns.

    Attributes:
        name: The name users select it by (a class attribute: letters, digits, ``_``, ``-``, ``.``).
        num_envs: Envs of the vector env.
        observation: The single observation space, as leaves (a :class:`~pycollect.vector.SpaceLayout`
            of ``"observation"``).
        action: The single action space, as leaves (of ``"action"``).
        metadata: The first env's ``metadata``.
        render_mode: The first env's ``render_mode``.
        observations: ``[num_envs, *shape]`` per observation leaf: the observations of the last
            step or reset (``observation.empty(num_envs)`` makes them).
        final_observations: ``[num_envs, *shape]`` per observation leaf in ``SAME_STEP`` mode
            (``config.final_observations``), else ``None``: the rows of the envs whose episode
            ended at the last step hold their final observation.
        actions: ``[num_envs, *shape]`` per action leaf, of its dtype: a step's actions, written
            before :meth:`step_async`.
        info: The info fields: entries of a fixed kind, written where the envs step (none
            in-process: every entry travels as material).
        rewards: ``[num_envs]`` float64: the last step's rewards.
        terminated: ``[num_envs]`` bool: the last step's ``terminated``.
        truncated: ``[num_envs]`` bool: the last step's ``truncated``.
    """

    name: ClassVar[str] = ""

    num_envs: int
    observation: SpaceLayout
    action: SpaceLayout
    metadata: Mapping[str, Any]
    render_mode: str | None
    observations: Sequence[np.ndarray]
    final_observations: Sequence[np.ndarray] | None
    actions: Sequence[np.ndarray]
    info: InfoArrays
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray

    @classmethod
    def check(cls, config: VectorConfig) -> None:
        """Refuse settings this backend cannot honour, before any env is built.

        The default refuses a pool (``batch_size < num_envs``) unless the class overrides the
        pool methods (:meth:`pool_recv`).

        Raises:
            ConfigError: Naming the setting.
        """
        if config.batch_size < config.num_envs and cls.pool_recv is StepBackend.pool_recv:
            raise ConfigError(
                f"step backend {cls.name or cls.__qualname__!r} serves no pool: batch_size={config.batch_size} < "
                f"num_envs={config.num_envs} needs one (the 'workers' backend serves it)"
            )

    @classmethod
    @abc.abstractmethod
    def start(cls, source: EnvSource, config: VectorConfig) -> StepBackend:
        """Build the envs and return a running backend over them; nothing is left running if this raises.

        Args:
            source: What builds the envs (:meth:`~pycollect.envs.source.EnvSource.make_envs`
                builds a group of them; picklable, for a backend that builds them elsewhere).
                Its ``num_envs`` is ``config.envs_per_worker``: the sub-envs one batched env
                holds, for a batched env backend.
            config: The vector env's settings, checked (:meth:`check` included): ``num_envs``,
                ``num_workers``, the autoreset mode, ``info_keys``, ``max_episode_steps``,
                ``supervision``...

        Raises:
            EnvCreationError: An env's constructor raised.
            ConfigError: What was built is not a gymnasium-style env, or the envs' spaces differ.
            UnsupportedSpaceError: A space has a leaf pycollect cannot lay out.
        """

    @abc.abstractmethod
    def reset(self, seeds: Sequence[int | None], options: dict[str, Any] | None, mask: np.ndarray | None) -> InfoParts:
        """Reset every env (``mask`` ``None``) or the envs of ``mask``; env ``n`` gets ``seeds[n]`` and ``options``.

        Returns the info material of the reset (the entries that fit no info field).
        """

    @abc.abstractmethod
    def step_async(self, actions: Sequence[np.ndarray] | None = None) -> None:
        """Start a step of every env with the actions in :attr:`actions` (copied there from ``actions`` if given).

        ``actions``: one checked ``[num_envs, *shape]`` array per action leaf.
        """

    @abc.abstractmethod
    def step_wait(self) -> InfoParts:
        """Finish the step :meth:`step_async` started: the results are in the arrays and info fields.

        Returns the info material: the entries that fit no info field.
        """

    @abc.abstractmethod
    def call(
        self, name: str, args: Sequence[Any], kwargs: Mapping[str, Any], indices: Sequence[int] | None = None
    ) -> list[Any]:
        """Each env's ``name``, called with the arguments if callable (gymnasium's ``call``).

        ``indices``: the envs to call, in that order (repeats allowed; see :func:`check_indices`),
        the results in the same order; ``None``: every env, in env order. An env not in
        ``indices`` is not touched (with workers, a worker none of whose envs is named gets no
        request). The same holds for :meth:`get_attr`, :meth:`set_attr` and :meth:`apply`.
        """

    @abc.abstractmethod
    def get_attr(self, name: str, indices: Sequence[int] | None = None) -> list[Any]:
        """Each env's ``name`` (gymnasium's ``get_attr``: a method is called without arguments)."""

    @abc.abstractmethod
    def set_attr(self, name: str, values: Sequence[Any], indices: Sequence[int] | None = None) -> None:
        """Set ``name`` on env ``indices[j]`` (``None``: env ``j``) to ``values[j]``."""

    @abc.abstractmethod
    def apply(self, function: Callable[[Any], Any], indices: Sequence[int] | None = None) -> list[Any]:
        """``function(env)`` on each env, where the env is (pickled with cloudpickle for a worker).

        The env is the object built from the env source (with its wrappers); the results come
        back in env order (or ``indices``' order), pickled with a worker.
        """

    def workers(self) -> tuple[Any, ...]:
        """Each worker process's supervision state (:class:`~pycollect._core.WorkerStats`); ``()`` without workers."""
        return ()

    def counters(self) -> Any | None:
        """The segment (``pycollect._core.Segment``) whose worker blocks count the workers' steps.

        ``None`` (the default, for envs stepped in this process): the vector env makes a small
        segment for its own counts (see :mod:`pycollect.metrics`).
        """
        return None

    @abc.abstractmethod
    def close(self) -> None:
        """Close every env and release what the backend holds; a second call does nothing."""

    # -- a pool (batch_size < num_envs): optional --------------------------------------------
    # A backend that serves one overrides all four; the default check() refuses a pool otherwise.

    def pool_reset(self, seeds: Sequence[int | None], options: dict[str, Any] | None) -> None:
        """Start a reset of every env and return: :meth:`pool_recv` collects the answers."""
        raise self._no_pool()

    def pool_recv(self, count: int) -> tuple[list[int], dict[int, Material | None]]:
        """Wait until ``count`` workers (``K`` envs each) are done; return them (first done first), their material."""
        raise self._no_pool()

    def pool_send(self, workers: Sequence[int], actions: Sequence[np.ndarray]) -> None:
        """Start the next step of ``workers``; ``actions``: one ``[len(workers) * K, ...]`` array per leaf."""
        raise self._no_pool()

    def pool_post(self, workers: Sequence[int]) -> None:
        """Start the next step of ``workers``, whose actions are already in :attr:`actions`."""
        raise self._no_pool()

    def _no_pool(self) -> ConfigError:
        return ConfigError(f"step backend {type(self).name or type(self).__qualname__!r} serves no pool")


def check_indices(indices: Sequence[int] | None, num_envs: int) -> list[int] | None:
    """``indices`` as a list of ints, each checked to name an env (``None`` stays ``None``: every env).

    Order and repeats are kept: ``[3, 0, 3]`` names env 3, env 0, then env 3 again.

    Raises:
        ConfigError: An index that is not an int (a bool is not one) or not in ``0..num_envs - 1``.
    """
    if indices is None:
        return None
    checked = []
    for index in indices:
        if not isinstance(index, int | np.integer) or isinstance(index, bool | np.bool_):
            raise ConfigError(f"env index {index!r} is not an int (indices {list(indices)!r})")
        if not 0 <= index < num_envs:
            raise ConfigError(
                f"env index {int(index)} is out of range: the vector env has {num_envs} envs, 0 to {num_envs - 1}"
            )
        checked.append(int(index))
    return checked


def split_indices(
    indices: Sequence[int] | None, parts: int, per_part: int
) -> dict[int, tuple[list[int] | None, list[int]]]:
    """Envs numbered across ``parts`` of ``per_part`` envs each (env ``i``: part ``i // per_part``), split by part.

    For each part ``indices`` names: its own indices of those envs (``None``: all of its
    envs, when ``indices`` is ``None``) and their positions in ``indices``, so that the parts'
    answers can be put back in the order of ``indices``. Parts named by no index are left out.

    Raises:
        ConfigError: As :func:`check_indices`.
    """
    checked = check_indices(indices, parts * per_part)
    if checked is None:
        return {part: (None, list(range(part * per_part, (part + 1) * per_part))) for part in range(parts)}
    split: dict[int, tuple[list[int] | None, list[int]]] = {}
    for position, index in enumerate(checked):
        local, positions = split.setdefault(index // per_part, ([], []))
        assert local is not None
        local.append(index % per_part)
        positions.append(position)
    return split
