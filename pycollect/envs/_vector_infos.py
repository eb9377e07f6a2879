"""Gymnasium vector info dicts (``{key: values, "_key": mask}``), read one row at a time or kept whole.

A batched env returns its sub-envs' infos as one gymnasium vector info dict, and what pycollect
promises of a vector env over it is what gymnasium's ``VectorEnv._add_info`` builds from the
sub-envs' own infos, env by env. There are two ways to get there:

* row by row: :func:`info_row` reads one sub-env's info (what a single env would have returned),
  and the trainer merges the rows with ``_add_info`` itself (:mod:`pycollect._steps.infos`);
* whole: :func:`gather` builds the dict ``_add_info`` would build from those rows with one array
  operation per entry, and :func:`combine` joins such dicts (of disjoint envs, or of several
  groups at their offsets). Their result is :class:`WholeInfos`, which a group returns instead of
  per-env material where it can.

The whole way holds where the rows would hold numpy numbers, bools or arrays: an entry of a
numeric or bool array with a row per sub-env, or a nested dict of such entries, with masks of
bools. ``_add_info`` makes an array of the first env's value's type (a numpy number: its dtype;
a bool: bool; an array: its dtype and shape), so one array of those rows is exactly its result.
Anything else (an object array, a list, one value for the whole batch, a string) is ``None``
here, and the caller takes the row by row way, which gives the same infos by construction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["WholeInfos", "combine", "gather", "info_row"]

_FINAL_KEYS = ("final_obs", "final_info")
_WHOLE_KINDS = "biufc"  # bool, integers, floats, complex: numpy numbers (and bools) to _add_info


def info_row(infos: Any, i: int) -> dict[str, Any]:
    """Sub-env ``i``'s entries of a gymnasium vector info dict (``{key: values, "_key": mask}``), nested too."""
    entry: dict[str, Any] = {}
    if not isinstance(infos, Mapping):
        return entry
    for key, values in infos.items():
        if key.startswith("_") or key in _FINAL_KEYS:
            continue
        mask = infos.get(f"_{key}")
        if mask is not None and not mask[i]:
            continue
        if isinstance(values, Mapping):
            entry[key] = info_row(values, i)
        else:
            try:
                value = values[i]
            except (TypeError, IndexError):
                value = values  # a value for the whole batch
            # numpy's bool is no number to gymnasium's info merge (it would make an object array)
            entry[key] = bool(value) if isinstance(value, np.bool_) else value
    return entry


def gather(
    infos: Any,
    take: np.ndarray,
    count: int,
    at: np.ndarray | None = None,
    keys: tuple[str, ...] | None = None,
) -> dict[str, Any] | None:
    """What ``_add_info`` builds over ``count`` envs from rows ``take`` of ``infos``; ``None`` where it cannot be whole.

    Args:
        infos: A gymnasium vector info dict, one row per ``take`` entry.
        take: ``[rows]`` bool: the rows to read (the others are as if their env returned nothing).
        count: Envs of the result.
        at: The env each row of ``infos`` belongs to (``None``: row ``n`` is env ``n``).
        keys: The top-level entries kept, in this order (``None``: every entry, in ``infos``' order),
            as a group keeps ``info_keys``.
    """
    if not isinstance(infos, Mapping):
        return {}
    rows = take.shape[0]
    out: dict[str, Any] = {}
    for key, values in infos.items():
        if key.startswith("_") or key in _FINAL_KEYS or (keys is not None and key not in keys):
            continue
        mask = infos.get(f"_{key}")
        if mask is None:
            present = take
        elif type(mask) is np.ndarray and mask.dtype == np.bool_ and mask.shape == (rows,):
            present = take & mask
        else:
            return None
        if not present.any():
            continue
        envs = present if at is None else at[present]
        if isinstance(values, Mapping):
            nested = gather(values, present, count, at)
            if nested is None:
                return None
            out[key] = nested
        elif (
            type(values) is np.ndarray
            and values.ndim >= 1
            and values.shape[0] == rows
            and values.dtype.kind in _WHOLE_KINDS
        ):
            # A row of one value is a numpy scalar, whose array _add_info makes of its type's
            # native dtype; a row of several is an array, whose dtype it keeps as it is.
            dtype = values.dtype if values.ndim > 1 else np.dtype(values.dtype.type)
            array = np.zeros((count, *values.shape[1:]), dtype)
            array[envs] = values[present]
            out[key] = array
        else:
            return None
        where = np.zeros(count, np.bool_)
        where[envs] = True
        out[f"_{key}"] = where
    if keys is not None:
        out = {name: out[name] for key in keys if key in out for name in (key, f"_{key}")}
    return out


def combine(parts: Sequence[tuple[int, Mapping[str, Any]]], count: int) -> dict[str, Any] | None:
    """Join vector info dicts of disjoint envs into one over ``count`` envs, as ``_add_info`` of all their rows would.

    Args:
        parts: ``(index of its first env, the dict)``, each dict over a run of envs from there.
        count: Envs of the result.

    Returns:
        The joined dict, or ``None`` where an entry is a dict in one part and an array in
        another, or arrays of different row shapes (``_add_info`` of such rows is not one array
        operation; take the row by row way).
    """
    present = [(offset, part) for offset, part in parts if part]
    if len(present) > 1 and (overlaid := _overlaid_by_envs(present)) is not None:
        present = overlaid  # a step's and a reset's infos of one group, as one part
    if len(present) == 1 and present[0][0] == 0 and _envs(present[0][1]) == count:
        return dict(present[0][1])
    if _tiled(present, count) and (joined := _concatenated([part for _, part in present])) is not None:
        return joined  # the common case: the same entries from each of several groups, in order
    first_env: dict[str, int] = {}  # each entry's first env: _add_info makes its array of that env's value
    for offset, part in present:
        for key in part:
            if not key.startswith("_"):
                first = offset + int(np.argmax(part[f"_{key}"]))
                first_env[key] = min(first_env.get(key, first), first)
    out: dict[str, Any] = {}
    for key in sorted(first_env, key=first_env.__getitem__):  # in the order the envs bring the entries
        having = [(offset, part[key], part[f"_{key}"]) for offset, part in present if key in part]
        where = np.zeros(count, np.bool_)
        if all(isinstance(values, Mapping) for _, values, _ in having):
            nested = combine([(offset, values) for offset, values, _ in having], count)
            if nested is None:
                return None
            out[key] = nested
        elif all(isinstance(values, np.ndarray) for _, values, _ in having):
            _, model, _ = min(having, key=lambda h: h[0] + int(np.argmax(h[2])))
            if any(values.shape[1:] != model.shape[1:] for _, values, _ in having):
                return None
            array = np.zeros((count, *model.shape[1:]), model.dtype)
            for offset, values, mask in having:
                rows = np.flatnonzero(mask)
                array[offset + rows] = values[rows]
            out[key] = array
        else:
            return None
        for offset, _, mask in having:
            where[offset : offset + mask.shape[0]] |= mask
        out[f"_{key}"] = where
    return out


def _overlaid_by_envs(parts: Sequence[tuple[int, Mapping[str, Any]]]) -> list[tuple[int, Mapping[str, Any]]] | None:
    """The parts, each run of parts over the same envs (a group's) laid over each other; ``None`` if one cannot be."""
    out: list[tuple[int, Mapping[str, Any]]] = []
    same: list[Mapping[str, Any]] = []
    for n, (offset, part) in enumerate(parts):
        same.append(part)
        if n + 1 < len(parts) and parts[n + 1][0] == offset and _envs(parts[n + 1][1]) == _envs(part):
            continue
        overlaid = same[0] if len(same) == 1 else _overlaid(same)
        if overlaid is None:
            return None
        out.append((offset, overlaid))
        same = []
    return out


def _overlaid(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Dicts over the same envs, of disjoint envs, as one, where each entry has one dtype and row shape; else ``None``.

    Each part's arrays hold zeros outside its mask (as :func:`gather` makes them), so one
    part's array with the others' masked rows written over it is the joined array.
    """
    keys: dict[str, None] = {}  # in the order the parts bring them
    for part in parts:
        keys.update((key, None) for key in part if not key.startswith("_"))
    out: dict[str, Any] = {}
    for key in keys:
        having = [(part[key], part[f"_{key}"]) for part in parts if key in part]
        first, where = having[0]
        if len(having) == 1:
            out[key], out[f"_{key}"] = first, where
            continue
        values = [value for value, _ in having]
        kind = _kind(values)  # the parts are over the same envs: arrays of one row shape are of one shape
        if kind == "dicts":
            nested = _overlaid(values)
            if nested is None:
                return None
            out[key] = nested
        elif kind == "arrays":
            array = first.copy()
            for value, mask in having[1:]:
                array[mask] = value[mask]
            out[key] = array
        else:
            return None
        out[f"_{key}"] = np.logical_or.reduce([mask for _, mask in having])
    return out


def _tiled(parts: Sequence[tuple[int, Mapping[str, Any]]], count: int) -> bool:
    """Whether the parts are over consecutive runs of envs, in order, from env 0 to ``count``."""
    end = 0
    for offset, part in parts:
        if offset != end:
            return False
        end += _envs(part)
    return end == count


def _concatenated(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Parts of the same entries (same keys, dtypes and row shapes), one after another; else ``None``."""
    keys = list(parts[0])
    if any(list(part) != keys for part in parts[1:]):
        return None
    out: dict[str, Any] = {}
    for key in keys:
        values = [part[key] for part in parts]
        kind = _kind(values)
        if kind == "dicts":
            nested = _concatenated(values)
            if nested is None:
                return None
            out[key] = nested
        elif kind == "arrays":
            out[key] = np.concatenate(values)
        else:
            return None
    return out


def _kind(values: Sequence[Any]) -> str | None:
    """``"dicts"`` if every value is a dict, ``"arrays"`` if each is an array of the first's dtype and row shape."""
    if all(isinstance(value, Mapping) for value in values):
        return "dicts"
    first = values[0]
    if all(
        isinstance(value, np.ndarray) and value.dtype == first.dtype and value.shape[1:] == first.shape[1:]
        for value in values
    ):
        return "arrays"
    return None


def _envs(infos: Mapping[str, Any]) -> int:
    """How many envs a non-empty vector info dict is over (its masks' length)."""
    return next(len(mask) for key, mask in infos.items() if key.startswith("_"))


@dataclass(frozen=True)
class WholeInfos:
    """A group's infos of one step or reset kept whole, as vector info dicts over its ``count`` envs.

    What a group returns instead of per-env material (one ``(env, info, final info)`` entry per
    env with something) where the infos allow it (see :func:`gather`): the same infos, with
    no Python per env. Each part holds some envs' infos (a step's, and a reset's of the envs it
    reset), so that :meth:`entries` gives each env its own values, as per-env material would;
    the trainer joins the parts of every group (:func:`combine`).

    Attributes:
        count: Envs of the group.
        parts: Vector info dicts of disjoint envs: the step's (or reset's) infos.
        finals: ``SAME_STEP`` mode: vector info dicts of disjoint envs, the final infos of the
            envs whose episode ended at this step (``None``: none ended).
    """

    count: int
    parts: tuple[dict[str, Any], ...]
    finals: tuple[dict[str, Any], ...] | None = None

    def entries(self) -> list[tuple[int, dict[str, Any], dict[str, Any] | None]]:
        """The per-env material of the same infos: ``(env, info, final info or None)`` of each env with something.

        Each env's info is what :func:`info_row` reads of it (built entry by entry, not env by
        env); its dicts are new and its arrays rows of copies, which the caller may keep.
        """
        infos: dict[int, dict[str, Any]] = {}
        finals: dict[int, dict[str, Any]] = {}
        for part in self.parts:
            _rows_of(part, infos)
        for part in self.finals or ():
            _rows_of(part, finals)
        out = []
        for i in sorted(infos.keys() | finals.keys()):
            info, final = infos.get(i, {}), finals.get(i)
            if info or final:
                out.append((i, info, final or None))
        return out


def _rows_of(infos: Mapping[str, Any], rows: dict[int, dict[str, Any]]) -> None:
    """Add each env's row of a vector info dict made by :func:`gather` to ``rows`` (env -> info), as ``info_row``."""
    for key, values in infos.items():
        if key.startswith("_"):
            continue
        envs = np.flatnonzero(infos[f"_{key}"]).tolist()
        if isinstance(values, Mapping):
            nested: dict[int, dict[str, Any]] = {i: {} for i in envs}
            _rows_of(values, nested)
            picked: list[Any] = [nested[i] for i in envs]
        elif values.dtype == np.bool_ and values.ndim == 1:
            picked = values[envs].tolist()  # Python bools, as info_row gives them
        else:
            picked = list(values[envs])  # numpy scalars, or rows of a copy
        for i, value in zip(envs, picked, strict=True):
            rows.setdefault(i, {})[key] = value
