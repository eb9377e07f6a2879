"""Checking what an environment returns against its spaces, on every step, cheaply.

numpy would cast or broadcast almost anything into a batch array: an observation of shape
``(1,)`` into a ``(4,)`` field, ``None`` into NaN, ``1e39`` into ``inf``, ``300.0`` into a
uint8. The stepping loop instead lets through, at the cost of a few attribute reads, exactly
the values that need no conversion (an array of the field's shape and dtype, a Python bool for
a flag, a Python float for a reward), and sends everything else here, where a value that fits
is accepted and one that does not raises :class:`~pycollect.EnvOutputError` naming the env, the
field, what came and what the space says.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from pycollect._keys import Key
from pycollect.envs.specs import FieldSpec
from pycollect.exceptions import EnvOutputError

__all__ = ["FLOAT32_MAX", "OutputChecks"]

FLOAT32_MAX = float(np.finfo(np.float32).max)


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"of shape {value.shape} and dtype {value.dtype}"
    text = repr(value)
    return f"{text if len(text) <= 60 else text[:57] + '...'} ({type(value).__name__})"


class OutputChecks:
    """The checks of one runner's environments.

    Args:
        observation: The observation fields, in the runner's order.
        env: The env's name for messages (``"gymnasium:CartPole-v1"``).
        worker: The worker index, or ``None`` in-process.
        info: The fields kept from the env's step ``info`` (``info_keys``), in order.
    """

    def __init__(
        self, observation: tuple[FieldSpec, ...], env: str, worker: int | None, info: tuple[FieldSpec, ...] = ()
    ) -> None:
        self.fields = observation
        self.info_fields = info
        self.env = env
        self.worker = worker

    def _where(self, env_index: int, step: int) -> str:
        place = f"env {env_index}" + (f" of worker {self.worker}" if self.worker is not None else "")
        when = "on reset" if step == 0 else f"at step {step} of this rollout"
        return f"env {self.env!r} ({place}) {when}"

    def leaf(self, raw: Any, path: Key, field: int, env_index: int, step: int) -> Any:
        """The leaf at ``path`` of a Dict observation, or an error naming what is missing."""
        value = raw
        for name in path:
            try:
                value = value[name]
            except (KeyError, IndexError, TypeError, ValueError):
                spec = self.fields[field]
                raise EnvOutputError(
                    f"{self._where(env_index, step)} returned an observation without {'/'.join(spec.key)!r} "
                    f"({_describe(raw)}); its observation space is a Dict with that key"
                ) from None
        return value

    def observation(self, field: int, value: Any, env_index: int, step: int) -> Any:
        """A value for observation field ``field`` that can be stored as it is, or an error.

        Called only for values the loop's fast test did not let through.
        """
        spec = self.fields[field]
        says = f"its observation space {spec.space} says shape {spec.shape} and dtype {spec.dtype}"
        return self._fitting(spec, f"observation {'/'.join(spec.key)!r}", says, value, env_index, step)

    def info(self, field: int, value: Any, env_index: int, step: int) -> Any:
        """A value for the kept info entry ``field``, checked like an observation."""
        spec = self.info_fields[field]
        says = f"its first step's info had shape {spec.shape} and dtype {spec.dtype}"
        return self._fitting(spec, f"info[{spec.key[-1]!r}]", says, value, env_index, step)

    def _fitting(self, spec: FieldSpec, what: str, says: str, value: Any, env_index: int, step: int) -> Any:
        where = f"{self._where(env_index, step)} returned {what}"
        array = np.asarray(value) if value is not None else None
        if array is None or array.dtype == object or array.shape != spec.shape or array.dtype.kind not in "biuf":
            raise EnvOutputError(f"{where} {_describe(value)}; {says}")
        if spec.dtype.kind in "biu":
            if array.dtype.kind == "f" and not np.array_equal(array, np.round(array)):
                raise EnvOutputError(
                    f"{where} with non-integer values {_range(array)} for a {spec.dtype} field; {says}"
                )
            info = np.iinfo(spec.dtype) if spec.dtype.kind != "b" else None
            low, high = (0, 1) if info is None else (info.min, info.max)
            if array.size and (array.min() < low or array.max() > high):
                raise EnvOutputError(
                    f"{where} {_describe(value)} with values {_range(array)}, which do not fit a {spec.dtype} "
                    f"field; {says}"
                )
        elif array.dtype.kind == "f" and array.dtype.itemsize > spec.dtype.itemsize:
            limit = float(np.finfo(spec.dtype).max)
            finite = np.isfinite(array)
            if array.size and np.any(np.abs(array[finite]) > limit):
                raise EnvOutputError(
                    f"{where} with values up to {float(np.abs(array[finite]).max()):g}, which does not fit "
                    f"{spec.dtype}; {says}"
                )
        return array

    def step(self, reward: Any, terminated: Any, truncated: Any, env_index: int, step: int) -> tuple[float, bool, bool]:
        """A step's reward and flags, when they are not a Python float and two Python bools."""
        return (self.reward(reward, env_index, step), *self.flags(terminated, truncated, env_index, step))

    def reward(self, value: Any, env_index: int, step: int) -> float:
        """A reward that is not a Python float: a real number, or an error."""
        if isinstance(value, numbers.Real):
            return float(value)
        if isinstance(value, np.ndarray) and value.shape in ((), (1,)) and value.dtype.kind in "iuf":
            return float(value.reshape(()))
        raise EnvOutputError(
            f"{self._where(env_index, step)} returned reward {_describe(value)}; a reward is one real number"
        )

    def reward_range(self, rewards: np.ndarray, steps: int) -> None:
        """Refuse finite rewards too large for the batch's float32 reward field."""
        finite = np.isfinite(rewards)
        too_large = finite & (np.abs(rewards) > FLOAT32_MAX)
        if too_large.any():
            step, env_index = (int(i) for i in np.argwhere(too_large)[0])
            raise EnvOutputError(
                f"{self._where(env_index, step + 1)} returned reward {rewards[step, env_index]:g}, which does not "
                "fit float32 (the batch's reward field)"
            )

    def flags(self, terminated: Any, truncated: Any, env_index: int, step: int) -> tuple[bool, bool]:
        """Done flags that are not both Python bools: booleans (or 0 and 1), or an error."""
        out = []
        for name, value in (("terminated", terminated), ("truncated", truncated)):
            if isinstance(value, bool | np.bool_) or (isinstance(value, int | np.integer) and value in (0, 1)):
                out.append(bool(value))
            else:
                raise EnvOutputError(
                    f"{self._where(env_index, step)} returned {name} {_describe(value)}; it must be a bool"
                )
        return out[0], out[1]


def _range(array: np.ndarray) -> str:
    low, high = array.min(), array.max()
    return f"{low:g}" if low == high else f"{low:g}..{high:g}"
