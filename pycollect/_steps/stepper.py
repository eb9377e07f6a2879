"""What the native stepper is built from: one object, described the same way by both of its users.

pycollect has one native stepper, ``_core.GroupStepper``, built in one place,
:class:`pycollect._steps.group.EnvGroup`, over either of its kinds of arrays: a vector env's
(one row per env, any autoreset mode) or a collector rollout's (``[K, T]`` arrays, one step
column at a time, ``DISABLED`` mode; :meth:`~pycollect._steps.group.EnvGroup.for_rollout`). It
describes the stepper with a :class:`StepperSpec`, which the native constructor reads attribute
by attribute and checks (every array against its role, the mode, the episode limit).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pycollect._native import _core

__all__ = ["StepperSpec", "native_stepper"]


@dataclass(frozen=True)
class StepperSpec:
    """Everything ``_core.GroupStepper`` binds: ``K`` envs and the arrays they are stepped into.

    Attributes:
        steps: Each env's ``step``.
        resets: Each env's ``reset``.
        leaves: ``(path, shape, dtype, itemsize)`` per observation leaf, ``path`` the Dict keys
            and Tuple indices leading to it in the raw observation (empty: the observation).
        rows: Per leaf, the writable C-contiguous ``[K, T, *shape]`` array of observations.
        finals: Per leaf, the ``[K, T, *shape]`` array of final observations: exactly in
            ``SAME_STEP`` mode (``None`` otherwise).
        rewards: ``[T, K]`` float64.
        terminated: ``[T, K]`` bool.
        truncated: ``[T, K]`` bool.
        ended: ``[K]`` bool, shared with Python: the env's episode ended at its last step.
        lengths: ``[K]`` int64, shared with Python: steps since the env's last reset.
        mode: One of ``_core.AUTORESET_*``.
        max_episode_steps: Truncate an episode at this many steps: ``SAME_STEP`` resets it in
            the same step, ``DISABLED`` flags it as ended (a rollout's runner resets it).
        info_keys: The info entries kept (``None``: all).
        info_fields: The info fields' arrays
            (:meth:`pycollect._steps.info_fields.InfoArrays.native_args`).
        steps_per_row: ``T``, the step columns of every per-step array.
        ndarray: ``numpy.ndarray``, the type the stepper recognises arrays by.
    """

    steps: Sequence[Callable[[Any], Any]]
    resets: Sequence[Callable[..., Any]]
    leaves: Sequence[tuple[Sequence[Any], Sequence[int], np.dtype[Any], int]]
    rows: Sequence[np.ndarray]
    finals: Sequence[np.ndarray] | None
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    ended: np.ndarray
    lengths: np.ndarray
    mode: int
    max_episode_steps: int | None = None
    info_keys: Sequence[str] | None = None
    info_fields: Sequence[tuple[Any, ...]] = field(default_factory=tuple)
    steps_per_row: int = 1
    ndarray: type = np.ndarray


def native_stepper(spec: StepperSpec) -> _core.GroupStepper:
    """The native stepper ``spec`` describes.

    Raises:
        ConfigError: An array that does not fit its role, an unknown mode or kind, an episode
            limit outside ``SAME_STEP`` mode.
    """
    return _core.GroupStepper(spec)
