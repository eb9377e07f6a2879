"""Spaces as fixed-shape leaves: batched observations rebuilt from them, actions checked and split.

A vector env moves every observation and action as one ``[N, *shape]`` array per *leaf* of its
gymnasium space (a Box, Discrete, MultiDiscrete or MultiBinary, possibly nested in Dict and
Tuple spaces): the arrays a worker writes its results into, in shared memory or not. This
module holds what turns those arrays into what gymnasium's vector envs hand out and back:

* :class:`SpaceLayout`: a space's leaves in a fixed order (Dict keys in the space's order,
  Tuple items in order), each a :class:`~pycollect.envs.specs.FieldSpec` of the leaf space's
  own dtype, so that the arrays are what gymnasium's ``create_empty_array`` makes. It rebuilds
  the batched value in gymnasium's structure (``dict`` for Dict, ``tuple`` for Tuple) from the
  leaf arrays, as copies or as views, and one env's value in the single space's structure.
* :class:`ActionChecker`: a batch of actions against the batched action space, before
  anything is sent: structure, shape, dtype kind and bounds. What fits comes back as one array
  per leaf of the space's dtype (or is written into the arrays given, :meth:`ActionChecker.writer`:
  the common case of a one-leaf space checked and written natively, in one pass); what does
  not raises :class:`~pycollect.ActionError` naming the value and the env.
* :func:`split_rows`: per-leaf arrays cut into the ``[K, ...]`` blocks of consecutive envs.

numpy and gymnasium only: worker processes import it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeAlias

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import batch_space

from pycollect._native import _core
from pycollect.envs.specs import FieldSpec, _leaf
from pycollect.exceptions import ActionError, ConfigError, UnsupportedSpaceError

__all__ = ["ELEMENT_CODES", "ActionChecker", "Leaf", "Path", "SpaceLayout", "split_rows"]

ELEMENT_CODES: dict[np.dtype[Any], int] = {
    np.dtype(name): code
    for code, name in enumerate(
        ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64")
    )
}
"""The element types ``_core.ActionWriter`` reads and writes, by numpy's own dtype objects."""

Path: TypeAlias = tuple[Any, ...]
"""Where a leaf sits in one env's value: Dict keys and Tuple indices, outermost first."""

# The shape of a space's value: a leaf's index, a Dict's {key: tree} or a Tuple's (tree, ...).
_Tree: TypeAlias = "int | dict[Any, _Tree] | tuple[_Tree, ...]"

_LEAF_SPACES = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)


@dataclass(frozen=True)
class Leaf:
    """One fixed-shape part of a space.

    Attributes:
        path: Where the leaf sits in one env's value (``()`` for a space that is one leaf).
        field: Its key (``("observation", "position")``, ``("action",)``), shape, dtype (the
            leaf space's own, as gymnasium batches it) and bounds.
        space: The leaf space itself.
    """

    path: Path
    field: FieldSpec
    space: gym.Space[Any]


def _canonical(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """Numpy's own object for ``dtype`` where it has one (native byte order built-in types), else ``dtype``."""
    own = np.dtype(dtype.type)
    return own if own == dtype else dtype


def _describe(space: gym.Space[Any]) -> str:
    text = repr(space)
    return text if len(text) <= 120 else type(space).__name__


def _build(tree: _Tree, values: Sequence[Any]) -> Any:
    if isinstance(tree, int):
        return values[tree]
    if isinstance(tree, dict):
        return {key: _build(sub, values) for key, sub in tree.items()}
    return tuple(_build(sub, values) for sub in tree)


class SpaceLayout:
    """The leaves of one env's observation or action space, in a fixed order.

    Args:
        space: The space of one env: Box, Discrete, MultiDiscrete, MultiBinary, or Dict and
            Tuple spaces of those (nested as deep as wanted).
        root: The first element of every leaf's key (``"observation"`` or ``"action"``).

    Raises:
        UnsupportedSpaceError: A leaf of another type (Text, Graph, Sequence, OneOf...), or an
            empty Dict or Tuple; the message names where it is.
    """

    def __init__(self, space: gym.Space[Any], root: str) -> None:
        self.space = space
        self.root = root
        leaves: list[Leaf] = []
        self.tree: _Tree = self._walk(space, (), leaves)
        self.leaves: tuple[Leaf, ...] = tuple(leaves)
        self._views: Any = None
        self._viewed: tuple[np.ndarray, ...] = ()

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_views": None, "_viewed": ()}  # views belong to one process's arrays

    def __setstate__(self, state: dict[str, Any]) -> None:
        # An unpickled dtype is a copy of numpy's own object, and the stores (and the native
        # stepper) test an observation's dtype by identity: take numpy's objects back.
        leaves = tuple(
            replace(leaf, field=replace(leaf.field, dtype=_canonical(leaf.field.dtype))) for leaf in state["leaves"]
        )
        self.__dict__.update(state, leaves=leaves)

    def _walk(self, space: gym.Space[Any], path: Path, leaves: list[Leaf]) -> _Tree:
        where = "/".join(str(part) for part in (self.root, *path))
        if isinstance(space, gym.spaces.Dict | gym.spaces.Tuple):
            if not len(space.spaces):
                raise UnsupportedSpaceError(f"empty {type(space).__name__} {self.root} space at {where}")
            if isinstance(space, gym.spaces.Dict):
                return {key: self._walk(sub, (*path, key), leaves) for key, sub in space.spaces.items()}
            return tuple(self._walk(sub, (*path, n), leaves) for n, sub in enumerate(space.spaces))
        if not isinstance(space, _LEAF_SPACES):
            raise UnsupportedSpaceError(
                f"unsupported {self.root} space {_describe(space)} at {where}: pycollect's vector envs "
                "support Box, Discrete, MultiDiscrete and MultiBinary spaces, nested in Dict and Tuple spaces"
            )
        key = (self.root, *(str(part) for part in path))
        field = replace(_leaf(key, space), dtype=np.dtype(space.dtype))
        leaves.append(Leaf(path, field, space))
        return len(leaves) - 1

    @property
    def fields(self) -> tuple[FieldSpec, ...]:
        """Every leaf's field, in order."""
        return tuple(leaf.field for leaf in self.leaves)

    def empty(self, num_envs: int) -> list[np.ndarray]:
        """Zeroed ``[num_envs, *shape]`` arrays, one per leaf (what gymnasium's ``create_empty_array`` makes)."""
        return [np.zeros((num_envs, *leaf.field.shape), leaf.field.dtype) for leaf in self.leaves]

    def check_arrays(self, arrays: Sequence[np.ndarray], num_envs: int, what: str) -> None:
        """Refuse arrays that are not one ``[num_envs, *shape]`` array of each leaf's dtype.

        Raises:
            ConfigError: One is missing, or has another shape or dtype; the message names it.
        """
        if len(arrays) != len(self.leaves):
            raise ConfigError(f"{what}: {len(arrays)} arrays for {len(self.leaves)} {self.root} leaves")
        for leaf, array in zip(self.leaves, arrays, strict=True):
            shape = (num_envs, *leaf.field.shape)
            if array.shape != shape or array.dtype != leaf.field.dtype:
                raise ConfigError(
                    f"{what}: the array for {'/'.join(leaf.field.key)} has shape {array.shape} and dtype "
                    f"{array.dtype}; it must have shape {shape} and dtype {leaf.field.dtype}"
                )

    def batched(self, arrays: Sequence[np.ndarray], copy: bool = True) -> Any:
        """The batched value, in gymnasium's structure, from one ``[N, ...]`` array per leaf.

        Args:
            arrays: One array per leaf, in order.
            copy: ``True``: fresh arrays. ``False``: the arrays themselves (views where they are
                views); the structure is built once per set of arrays and returned again.
        """
        if copy:
            return _build(self.tree, [array.copy() for array in arrays])
        if len(self._viewed) != len(arrays) or any(a is not b for a, b in zip(self._viewed, arrays, strict=True)):
            self._viewed = tuple(arrays)
            self._views = _build(self.tree, arrays)
        return self._views

    def forget_views(self) -> None:
        """Drop the structure :meth:`batched` built over arrays (it keeps the memory they view alive)."""
        self._views, self._viewed = None, ()

    def single(self, arrays: Sequence[np.ndarray], index: int) -> Any:
        """Env ``index``'s value in the single space's structure, copied out of the leaf arrays.

        A scalar leaf (Discrete) comes out as a numpy scalar of the leaf's dtype, every other
        leaf as an array of its shape and dtype.
        """
        return _build(self.tree, [array[index].copy() if array.ndim > 1 else array[index] for array in arrays])

    def per_env(self, arrays: Sequence[np.ndarray]) -> list[Any]:
        """Each env's value (what gymnasium's ``iterate`` gives), from one ``[K, ...]`` array per leaf.

        Leaves come out as gymnasium's ``iterate`` gives them: numpy scalars for a 1-D array,
        row views otherwise; Dict and Tuple values are rebuilt around them.
        """
        if isinstance(self.tree, int):
            return list(arrays[0])
        rows = [list(array) for array in arrays]
        return [_build(self.tree, values) for values in zip(*rows, strict=True)]


class ActionChecker:
    """Checks batches of actions against the batched action space, before anything is sent.

    Args:
        layout: The single action space's leaves.
        num_envs: How many envs a batch holds actions for.
    """

    def __init__(self, layout: SpaceLayout, num_envs: int) -> None:
        self.layout = layout
        self.num_envs = num_envs
        self.space = batch_space(layout.space, num_envs)
        self._leaves = [
            _LeafCheck(leaf, num_envs, _describe(leaf.space), _describe(batch_space(leaf.space, num_envs)))
            for leaf in layout.leaves
        ]

    def writer(self, out: Sequence[np.ndarray]) -> Callable[[Any], None]:
        """A function that checks a batch of actions and writes it into ``out``, one array per leaf.

        ``out`` holds one ``[num_envs, *shape]`` array of each leaf's dtype (the arrays workers
        read their actions from). For a space of one leaf the common case (an exact numpy array
        of the batch's shape, of a numpy bool, integer or float dtype) is checked and written
        natively, in one pass (``_core.ActionWriter``); anything else, or a batch it refuses,
        goes through :meth:`check`, which casts what fits and raises for what does not.

        Raises:
            ActionError: (from the function) the actions do not fit; nothing of them counts.
        """
        self.layout.check_arrays(out, self.num_envs, "action arrays")
        native = None
        if isinstance(self.layout.tree, int) and (target := ELEMENT_CODES.get(out[0].dtype)) is not None:
            field = self.layout.leaves[0].field
            try:
                native = _core.ActionWriter(
                    out[0],
                    [self.num_envs, *field.shape],
                    [float(bound) for bound in np.ravel(field.low)],
                    [float(bound) for bound in np.ravel(field.high)],
                    target,
                    list(ELEMENT_CODES.items()),
                    np.ndarray,
                )
            except ConfigError:  # an array the native writer cannot take: the checks below do it all
                native = None
        check = self.check

        def write(actions: Any) -> None:
            if native is not None and native.write(actions):
                return
            for array, checked in zip(out, check(actions), strict=True):
                array[...] = checked

        return write

    def check(self, actions: Any) -> list[np.ndarray]:
        """The actions as one ``[num_envs, *shape]`` array per leaf, of the leaf's dtype.

        An array is passed through when it already is exactly that; otherwise it is cast
        (``float64`` to a ``float32`` Box, ``int32`` to an ``int64`` Discrete), never across
        kinds (floats to an integer space) and never out of bounds.

        Raises:
            ActionError: The actions do not fit; nothing was cast or sent. The message names the
                value, the env whose action it is and what the space takes.
        """
        tree = self.layout.tree
        if isinstance(tree, int):
            return [self._leaves[0].check(actions)]
        values: list[Any] = [None] * len(self._leaves)
        self._gather(tree, actions, (), values)
        return [check.check(value) for check, value in zip(self._leaves, values, strict=True)]

    def _gather(self, tree: _Tree, value: Any, path: Path, out: list[Any]) -> None:
        if isinstance(tree, int):
            out[tree] = value
            return
        where = "actions" + "".join(f"[{part!r}]" for part in path)
        if isinstance(tree, dict):
            if not isinstance(value, Mapping):
                raise ActionError(
                    f"{where} is a {type(value).__name__}; the action space is a Dict ({_space_at(self.space, path)}), "
                    f"so give a dict with the keys {list(tree)}"
                )
            missing = [key for key in tree if key not in value]
            extra = [key for key in value if key not in tree]
            if missing or extra:
                lacks = f"lacks {missing}" if missing else ""
                has = f"has {extra}, which the space does not" if extra else ""
                raise ActionError(
                    f"{where} {' and '.join(part for part in (lacks, has) if part)}: the Dict action space "
                    f"takes exactly the keys {list(tree)}"
                )
            for key, sub in tree.items():
                self._gather(sub, value[key], (*path, key), out)
            return
        if not isinstance(value, tuple | list) or len(value) != len(tree):
            size = f" of {len(value)} items" if isinstance(value, tuple | list) else ""
            raise ActionError(
                f"{where} is a {type(value).__name__}{size}; the action space is a Tuple of {len(tree)} "
                f"({_space_at(self.space, path)}), so give a tuple of {len(tree)} batches"
            )
        for n, sub in enumerate(tree):
            self._gather(sub, value[n], (*path, n), out)


def _space_at(space: gym.Space[Any], path: Path) -> str:
    for part in path:
        space = space[part]  # type: ignore[index]  # a Dict or Tuple: the path was walked through them
    return _describe(space)


class _LeafCheck:
    """The checks of one action leaf: shape, dtype kind, bounds, then the cast."""

    def __init__(self, leaf: Leaf, num_envs: int, single: str, batched: str) -> None:
        field = leaf.field
        path = "".join(f"[{part!r}]" for part in leaf.path)
        self.where, self.one = f"actions{path}", f"action{path}"  # the batch; one env's action
        self.shape = (num_envs, *field.shape)
        self.dtype = field.dtype
        self.integer = field.dtype.kind in "biu"
        # Values are compared with the bounds before the cast, so that an int64 300 is refused by
        # an int8 space instead of wrapping around.
        self.low, self.high = field.low, field.high
        self.single, self.batched = single, batched

    def check(self, value: Any) -> np.ndarray:
        array = value if type(value) is np.ndarray else self._array(value)
        if array.shape != self.shape:
            raise ActionError(
                f"{self.where} have shape {array.shape}; the batched action space {self.batched} takes shape "
                f"{self.shape} ({self.shape[0]} envs of {self.single})"
            )
        kind = array.dtype.kind
        if kind not in ("biu" if self.integer else "biuf"):
            raise ActionError(
                f"{self.where} have dtype {array.dtype}, which cannot be cast to the action space's {self.dtype} "
                f"({self.single}) without changing their kind"
            )
        # NaN fails both comparisons, as in gymnasium's Box.contains.
        inside = (array >= self.low) & (array <= self.high)
        if not inside.all():
            env = int(np.argmin(inside.reshape(self.shape[0], -1).all(axis=1)))
            raise ActionError(
                f"{self.one} of env {env} is {_value(array[env])}, outside the action space {self.single}"
            )
        if array.dtype is self.dtype:
            return array
        with np.errstate(over="ignore"):  # an overflow to inf is refused below, with the value
            cast = array.astype(self.dtype)
        if kind == "f" and array.dtype.itemsize > self.dtype.itemsize:
            overflow = np.isinf(cast) & ~np.isinf(array)
            if overflow.any():
                env = int(np.argmax(overflow.reshape(self.shape[0], -1).any(axis=1)))
                raise ActionError(
                    f"{self.one} of env {env} is {_value(array[env])}, which does not fit the action space's "
                    f"{self.dtype} ({self.single})"
                )
        return cast

    def _array(self, value: Any) -> np.ndarray:
        try:
            array = np.asarray(value)
        except (TypeError, ValueError) as exc:
            raise ActionError(
                f"{self.where} cannot be made an array ({exc}); the action space is {self.batched}"
            ) from None
        if array.dtype == object:
            raise ActionError(
                f"{self.where} are {_value(value)}, not numbers of one shape; the action space is {self.batched}"
            )
        return array


def _value(value: Any) -> str:
    if isinstance(value, np.ndarray) and value.ndim:
        text = np.array2string(value, threshold=8, separator=", ")
        text = f"array({text}, dtype={value.dtype})"
    elif isinstance(value, np.generic | np.ndarray):
        text = f"{value.item()!r} ({value.dtype})"
    else:
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def split_rows(arrays: Sequence[np.ndarray], counts: Sequence[int]) -> list[list[np.ndarray]]:
    """Cut one ``[N, ...]`` array per leaf into per-group ``[K_g, ...]`` row views, groups in order.

    Args:
        arrays: One array per leaf, each with ``sum(counts)`` rows.
        counts: How many consecutive envs each group (worker) has.
    """
    if any(len(array) != sum(counts) for array in arrays):
        raise ConfigError(f"split_rows: arrays of {[len(a) for a in arrays]} rows for groups of {list(counts)} envs")
    blocks, start = [], 0
    for count in counts:
        blocks.append([array[start : start + count] for array in arrays])
        start += count
    return blocks
