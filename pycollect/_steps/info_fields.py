"""Info entries of a fixed size as fields: what lets a step's infos travel without pickling.

gymnasium's vector infos hold, for each entry an env returned, an array of ``num_envs`` values
and a ``_key`` mask (``VectorEnv._add_info``). Where an entry's value has the same *kind* on
every step (ALE's ``lives`` is always a Python ``int``, a user env's ``"x_position"`` always a
``float``), the vector env gives it a field: per env a value and a mask bit ("returned at this
step"), written where the env steps (natively by ``_core.GroupStepper``, or by
:meth:`InfoArrays.split` in Python) and read back as gymnasium's arrays by
:meth:`InfoArrays.infos`. An env's info whose every entry fits is written there; one with an
entry that fits no field (a variable entry such as ``episode``'s dict, a value of another kind
on some step) goes whole through the info material, and only on the steps that have it.

A kind fixes the dtype of gymnasium's array: a Python ``int`` (int64), ``float`` (float64) or
``bool``, exactly one numpy scalar type (its dtype), or numpy arrays of one dtype and shape
(``[num_envs, *shape]``). Entries are found by :func:`probe_info_fields`, which reads the infos
of a probe env's reset and first steps.

numpy and gymnasium only: worker processes import it.
"""

from __future__ import annotations

import enum
import logging
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pycollect._deadline import within
from pycollect.exceptions import PyCollectWarning

__all__ = [
    "MAX_FIELD_BYTES",
    "PROBE_STEPS",
    "InfoArrays",
    "InfoField",
    "InfoKind",
    "info_field",
    "probe_info_fields",
]

PROBE_STEPS = 4
"""Steps of the probe env, after its reset, whose infos :func:`probe_info_fields` reads."""
MAX_FIELD_BYTES = 4096
"""Largest value an info field holds (an array entry over it travels in the material)."""

# The dtypes shared memory holds (the segment's), so the dtypes a field may have.
_FIELD_DTYPES = frozenset(
    np.dtype(name)
    for name in (
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
    )
)

logger = logging.getLogger("pycollect.vector")


class InfoKind(enum.IntEnum):
    """What an info field's values are (the numbers ``_core.GroupStepper`` takes)."""

    INT = 0
    """A Python ``int`` (stored as int64; one that does not fit is not of this kind)."""
    FLOAT = 1
    """A Python ``float`` (float64)."""
    BOOL = 2
    """A Python ``bool``."""
    SCALAR = 3
    """Exactly one numpy scalar type, such as ``numpy.float32``."""
    ARRAY = 4
    """A ``numpy.ndarray`` of one dtype and shape."""


@dataclass(frozen=True)
class InfoField:
    """One info entry kept as a field.

    Attributes:
        key: The entry's name.
        kind: What its values are.
        dtype: The dtype of gymnasium's array for it (int64 for ``INT``...).
        shape: One value's shape (``()`` but for ``ARRAY``).
        scalar_type: ``SCALAR``: the numpy scalar type.
    """

    key: str
    kind: InfoKind
    dtype: np.dtype[Any]
    shape: tuple[int, ...] = ()
    scalar_type: type | None = None

    def __reduce__(self) -> Any:
        # numpy's own dtype object comes back on unpickling (the native store compares an
        # array's dtype by identity), as pycollect._steps.spaces.SpaceLayout does for leaves.
        return (_field, (self.key, int(self.kind), self.dtype.str, self.shape, self.scalar_type))

    def fits(self, value: Any) -> bool:
        """Whether ``value`` is of this field's kind exactly (what the native store takes)."""
        kind = self.kind
        if kind is InfoKind.INT:
            return type(value) is int and -(2**63) <= value < 2**63
        if kind is InfoKind.FLOAT:
            return type(value) is float
        if kind is InfoKind.BOOL:
            return type(value) is bool
        if kind is InfoKind.SCALAR:
            return type(value) is self.scalar_type
        return (
            type(value) is np.ndarray
            and value.dtype is self.dtype
            and value.shape == self.shape
            and value.flags.c_contiguous
        )

    def python_value(self, stored: Any) -> Any:
        """The value an env returned, from what its field stored (for an exact merge)."""
        if self.kind is InfoKind.INT:
            return int(stored)
        if self.kind is InfoKind.FLOAT:
            return float(stored)
        if self.kind is InfoKind.BOOL:
            return bool(stored)
        if self.kind is InfoKind.SCALAR:
            return stored  # a numpy scalar of the dtype: exactly the type recorded
        return np.array(stored)


def _field(key: str, kind: int, dtype: str, shape: tuple[int, ...], scalar_type: type | None) -> InfoField:
    return InfoField(key, InfoKind(kind), _canonical(np.dtype(dtype)), tuple(shape), scalar_type)


def _canonical(dtype: np.dtype[Any]) -> np.dtype[Any]:
    own = np.dtype(dtype.type)
    return own if own == dtype else dtype


def info_field(key: str, value: Any) -> InfoField | None:
    """The field an entry ``key`` of value ``value`` would have; ``None``: it cannot have one.

    Mirrors gymnasium's choice of array dtype: Python ``int``/``float``/``bool`` values get
    int64/float64/bool, a numpy number its own type's dtype, an array its dtype and shape.
    Anything else (dicts, strings, ``None``, numpy bools, which gymnasium keeps in object
    arrays) has no field, nor does a dtype shared memory does not hold or an array over
    :data:`MAX_FIELD_BYTES`.
    """
    kind = type(value)
    if kind is bool:
        return InfoField(key, InfoKind.BOOL, np.dtype(np.bool_))
    if kind is int:
        return InfoField(key, InfoKind.INT, np.dtype(np.int64)) if -(2**63) <= value < 2**63 else None
    if kind is float:
        return InfoField(key, InfoKind.FLOAT, np.dtype(np.float64))
    if isinstance(value, np.number) and type(value).__module__ == "numpy":
        dtype = _canonical(np.dtype(kind))
        return InfoField(key, InfoKind.SCALAR, dtype, (), kind) if dtype in _FIELD_DTYPES else None
    if kind is np.ndarray and value.dtype in _FIELD_DTYPES and value.nbytes <= MAX_FIELD_BYTES:
        return InfoField(key, InfoKind.ARRAY, _canonical(value.dtype), tuple(value.shape))
    return None


def probe_info_fields(
    env: Any, info_keys: tuple[str, ...] | None, *, timeout_s: float, steps: int = PROBE_STEPS
) -> tuple[InfoField, ...]:
    """The info entries of ``env`` that get a field: those of one kind wherever they appear.

    Reads the info of a reset (without a seed) and of ``steps`` steps with actions sampled from
    the env's action space (resetting where an episode ends), keeping only ``info_keys``
    (``None``: every entry; ``()``: none, so nothing is probed). An entry whose value is of one
    kind in every info that has it becomes a field. An env whose probe raises gets none, and so
    does one whose probe takes longer than ``timeout_s`` (a stuck simulator must not make the
    vector env's start hang: the probe runs in a daemon thread, which is left to finish, with a
    :class:`~pycollect.PyCollectWarning`). Either way its infos all travel as material, which is
    always right, only slower.

    ``env`` is a probe env, built for this (it is stepped, then its owner closes it).
    """
    if info_keys == ():
        return ()
    infos: list[Any] = []

    def probe() -> None:
        try:
            infos.append(env.reset()[1])
            action_space = env.action_space
            for _ in range(steps):
                *_, terminated, truncated, info = env.step(action_space.sample())
                infos.append(info)
                if terminated or truncated:
                    infos.append(env.reset()[1])
        except Exception as exc:  # the workers will meet it again and report it; no fields here
            logger.debug("probing the infos of %r raised %s: every info entry travels pickled", env, exc)
            infos.clear()

    if not within(probe, timeout_s, name="pycollect-probe-infos"):
        warnings.warn(
            f"probing the infos of {env!r} (a reset and {steps} steps) did not end within {timeout_s:g} s: every "
            "info entry travels pickled (a daemon thread keeps waiting for the probe env)",
            PyCollectWarning,
            stacklevel=3,
        )
        return ()
    seen: dict[str, InfoField | None] = {}
    for info in infos:
        if not isinstance(info, Mapping):
            continue
        for key, value in info.items():
            if not isinstance(key, str) or (info_keys is not None and key not in info_keys):
                continue
            field = info_field(key, value)
            if key not in seen:
                seen[key] = field
            elif seen[key] != field:
                seen[key] = None  # two kinds: the material carries it
    return tuple(field for field in seen.values() if field is not None)


class InfoArrays:
    """The fields' values and masks for ``K`` envs: ``[K, *shape]`` and ``[K]`` bool each.

    Args:
        fields: The fields.
        values: One array per field.
        masks: One array per field.
        final_values: ``SAME_STEP`` mode: one array per field for the final infos.
        final_masks: ``SAME_STEP`` mode: their masks.
        info_keys: The entries kept (``None``: every entry; ``()``: none).
    """

    def __init__(
        self,
        fields: Sequence[InfoField],
        values: Sequence[np.ndarray],
        masks: Sequence[np.ndarray],
        final_values: Sequence[np.ndarray] | None = None,
        final_masks: Sequence[np.ndarray] | None = None,
        info_keys: tuple[str, ...] | None = None,
    ) -> None:
        self.fields = tuple(fields)
        self.values, self.masks = list(values), list(masks)
        self.final_values = list(final_values) if final_values is not None else None
        self.final_masks = list(final_masks) if final_masks is not None else None
        self.info_keys = info_keys
        self._by_key = {field.key: n for n, field in enumerate(self.fields)}

    @classmethod
    def allocate(
        cls, fields: Sequence[InfoField], count: int, finals: bool, info_keys: tuple[str, ...] | None
    ) -> InfoArrays:
        """Zeroed arrays of their own for ``count`` envs (in-process; workers get views of shared memory)."""

        def arrays() -> tuple[list[np.ndarray], list[np.ndarray]]:
            values = [np.zeros((count, *field.shape), field.dtype) for field in fields]
            return values, [np.zeros(count, np.bool_) for _ in fields]

        values, masks = arrays()
        final_values, final_masks = arrays() if finals else (None, None)
        return cls(fields, values, masks, final_values, final_masks, info_keys)

    def native_args(self) -> list[tuple[Any, ...]]:
        """The fields as ``_core.GroupStepper`` takes them."""
        args = []
        for n, field in enumerate(self.fields):
            kind: Any = field.scalar_type if field.kind is InfoKind.SCALAR else field.dtype
            finals = (
                (self.final_values[n], self.final_masks[n])
                if self.final_values is not None and self.final_masks is not None
                else (None, None)
            )
            args.append(
                (
                    field.key,
                    int(field.kind),
                    kind,
                    list(field.shape),
                    field.dtype.itemsize,
                    self.values[n],
                    self.masks[n],
                    *finals,
                )
            )
        return args

    def clear(self, env: int) -> None:
        """Zero env ``env``'s values and masks (an env that returned nothing holds zeros)."""
        if self.fields:
            self.clear_rows(slice(env, env + 1))

    def clear_rows(self, rows: slice) -> None:
        """Zero the values and masks of the envs of ``rows`` (both infos): none returned anything."""
        for arrays in (self.values, self.masks, self.final_values or (), self.final_masks or ()):
            for array in arrays:
                array[rows] = 0

    def split(self, info: dict[str, Any], env: int, final: bool = False) -> dict[str, Any]:
        """Write ``info`` into the fields as env ``env``'s if every entry fits one; return what did not go there.

        All or nothing, as the native store does: an info with an entry that fits no field is
        returned whole (so an env's info keeps its own order of entries, which a per-env info
        such as SB3's shows), and nothing of it is written. ``info`` is already kept to
        ``info_keys``; ``final``: it is the final info of an episode that ended in
        ``SAME_STEP`` mode.
        """
        if not info:
            return info
        fields = [self._by_key.get(key) for key in info]
        entries = zip(fields, info.values(), strict=True)
        if not self.fields or any(n is None or not self.fields[n].fits(value) for n, value in entries):
            return info
        values, masks = (self.final_values, self.final_masks) if final else (self.values, self.masks)
        assert values is not None and masks is not None, "a final info outside SAME_STEP mode"
        for n, value in zip(fields, info.values(), strict=True):
            assert n is not None
            values[n][env] = value
            masks[n][env] = True
        return {}

    def infos(self, final: bool = False, rows: np.ndarray | slice | None = None) -> dict[str, Any]:
        """Gymnasium's arrays (and ``_key`` masks) of the fields some env returned.

        ``rows``: the envs to read (``None``: all; others are left out as if they returned
        nothing); ``final``: the final infos.
        """
        values, masks = (self.final_values, self.final_masks) if final else (self.values, self.masks)
        out: dict[str, Any] = {}
        if values is None or masks is None:
            return out
        for field, array, mask in zip(self.fields, values, masks, strict=True):
            if rows is not None:
                array, mask = array[rows], mask[rows]
            if mask.any():
                out[field.key] = array.copy()
                out[f"_{field.key}"] = mask.copy()
        return out

    def env_info(self, env: int, final: bool = False) -> dict[str, Any]:
        """The entries env ``env`` returned that its fields hold, as the env returned them (its ``final`` info)."""
        values, masks = (self.final_values, self.final_masks) if final else (self.values, self.masks)
        if values is None or masks is None:
            return {}
        return {
            field.key: field.python_value(array[env])
            for field, array, mask in zip(self.fields, values, masks, strict=True)
            if mask[env]
        }

    def field(self, key: str) -> InfoField | None:
        """The field of entry ``key``, if it has one."""
        n = self._by_key.get(key)
        return None if n is None else self.fields[n]
