"""What a vector env steps its environments through: the :class:`StepBackend` interface.

:class:`pycollect.vector.VectorEnv` checks its input, hands it to a backend, then builds what
gymnasium returns (observations from the result arrays, infos from the material) itself; a
backend only moves requests to where the envs are and results into its arrays. The in-process
backend (:class:`~pycollect._steps.inprocess.InProcessBackend`, ``num_workers=0``) steps one
:class:`~pycollect._steps.group.EnvGroup` of every env in the trainer; a worker-process
backend steps one group per worker, its result arrays in shared memory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeAlias

import numpy as np

from pycollect._steps.group import Material
from pycollect._steps.spaces import SpaceLayout

__all__ = ["InfoParts", "StepBackend"]

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

    def step_async(self, actions: Sequence[np.ndarray]) -> None:
        """Start a step of every env; ``actions`` is one checked ``[num_envs, *shape]`` array per action leaf."""

    def step_wait(self) -> InfoParts:
        """Finish the step :meth:`step_async` started: the results are in the arrays."""

    def call(self, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[Any]:
        """Each env's ``name``, called with the arguments if callable (gymnasium's ``call``), in env order."""

    def get_attr(self, name: str) -> list[Any]:
        """Each env's ``name``, in env order (gymnasium's ``get_attr``)."""

    def set_attr(self, name: str, values: Sequence[Any]) -> None:
        """Set ``name`` on env ``n`` to ``values[n]``."""

    def workers(self) -> tuple[Any, ...]:
        """Each worker process's supervision state (:class:`~pycollect._core.WorkerStats`); ``()`` in-process."""

    def close(self) -> None:
        """Close every env and release what the backend holds; a second call does nothing."""
