"""What a vector env steps its environments through: the :class:`StepBackend` interface.

:class:`pycollect.vector.VectorEnv` checks its input, hands it to a backend, then builds what
gymnasium returns (observations from the result arrays, infos from the material) itself; a
backend only moves requests to where the envs are and results into its arrays. The in-process
backend (:class:`~pycollect._steps.inprocess.InProcessBackend`, ``num_workers=0``) steps one
:class:`~pycollect._steps.group.EnvGroup` of every env in the trainer; a worker-process
backend steps one group per worker, its result arrays in shared memory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeAlias

import numpy as np

from pycollect._steps.group import Material
from pycollect._steps.info_fields import InfoArrays
from pycollect._steps.spaces import SpaceLayout
from pycollect.exceptions import ConfigError

__all__ = ["InfoParts", "StepBackend", "check_indices"]

InfoParts: TypeAlias = list[tuple[int, Material]]
"""``(index of a group's first env, the group's info material)`` for each group that returned
material, in env order; empty when none did (the common step)."""


class StepBackend(Protocol):
    """Steps ``num_envs`` environments with gymnasium's autoreset semantics, results in arrays.

    Env ``n`` of the vector env is env ``n - offset`` of the group whose first env is
    ``offset``; groups hold consecutive envs, in order.

    The result arrays are fixed for the backend's life (``VectorEnv(copy=False)`` hands out
    views of them) and rewritten by every :meth:`reset` (the rows of the envs it resets) and
    :meth:`step`.
    """

    @property
    def num_envs(self) -> int:
        """Envs of the vector env."""

    @property
    def observation(self) -> SpaceLayout:
        """The single observation space, as leaves."""

    @property
    def action(self) -> SpaceLayout:
        """The single action space, as leaves."""

    @property
    def metadata(self) -> Mapping[str, Any]:
        """The first env's ``metadata``."""

    @property
    def render_mode(self) -> str | None:
        """The first env's ``render_mode``."""

    @property
    def observations(self) -> Sequence[np.ndarray]:
        """``[num_envs, *shape]`` per observation leaf: the observations of the last step or reset."""

    @property
    def final_observations(self) -> Sequence[np.ndarray] | None:
        """``[num_envs, *shape]`` per observation leaf in ``SAME_STEP`` mode (else ``None``).

        The rows of the envs whose episode ended at the last step hold their final observation.
        """

    @property
    def actions(self) -> Sequence[np.ndarray]:
        """``[num_envs, *shape]`` per action leaf, of its dtype: a step's actions, written before :meth:`step_async`."""

    @property
    def info(self) -> InfoArrays:
        """The info fields: entries of a fixed kind, written where the envs step (none in-process)."""

    @property
    def rewards(self) -> np.ndarray:
        """``[num_envs]`` float64: the last step's rewards."""

    @property
    def terminated(self) -> np.ndarray:
        """``[num_envs]`` bool: the last step's ``terminated``."""

    @property
    def truncated(self) -> np.ndarray:
        """``[num_envs]`` bool: the last step's ``truncated``."""

    def reset(self, seeds: Sequence[int | None], options: dict[str, Any] | None, mask: np.ndarray | None) -> InfoParts:
        """Reset every env (``mask`` ``None``) or the envs of ``mask``; env ``n`` gets ``seeds[n]`` and ``options``."""

    def step_async(self, actions: Sequence[np.ndarray] | None = None) -> None:
        """Start a step of every env with the actions in :attr:`actions` (copied there from ``actions`` if given).

        ``actions``: one checked ``[num_envs, *shape]`` array per action leaf.
        """

    def step_wait(self) -> InfoParts:
        """Finish the step :meth:`step_async` started: the results are in the arrays and info fields.

        Returns the info material: the entries that fit no info field.
        """

    def call(
        self, name: str, args: Sequence[Any], kwargs: Mapping[str, Any], indices: Sequence[int] | None = None
    ) -> list[Any]:
        """Each env's ``name``, called with the arguments if callable (gymnasium's ``call``).

        ``indices``: the envs to call, in that order (repeats allowed; see :func:`check_indices`),
        the results in the same order; ``None``: every env, in env order. An env not in
        ``indices`` is not touched (with workers, a worker none of whose envs is named gets no
        request). The same holds for :meth:`get_attr`, :meth:`set_attr` and :meth:`apply`.
        """

    def get_attr(self, name: str, indices: Sequence[int] | None = None) -> list[Any]:
        """Each env's ``name`` (gymnasium's ``get_attr``: a method is called without arguments)."""

    def set_attr(self, name: str, values: Sequence[Any], indices: Sequence[int] | None = None) -> None:
        """Set ``name`` on env ``indices[j]`` (``None``: env ``j``) to ``values[j]``."""

    def apply(self, function: Callable[[Any], Any], indices: Sequence[int] | None = None) -> list[Any]:
        """``function(env)`` on each env, where the env is (pickled with cloudpickle for a worker).

        The env is the object built from the env source (with its wrappers); the results come
        back in env order (or ``indices``' order), pickled with a worker.
        """

    def workers(self) -> tuple[Any, ...]:
        """Each worker process's supervision state (:class:`~pycollect._core.WorkerStats`); ``()`` in-process."""

    def close(self) -> None:
        """Close every env and release what the backend holds; a second call does nothing."""


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
