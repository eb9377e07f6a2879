"""What an environment produces and accepts, as fixed-size fields.

An env backend reports an :class:`EnvSpecs` before anything is collected. The collector lays
out its batches (and, with worker processes, its shared memory) from it, the random policy
samples from it, and a user policy's output is checked against it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

import gymnasium as gym
import numpy as np

from pycollect._keys import Key
from pycollect.exceptions import ConfigError, UnsupportedSpaceError

__all__ = ["EnvSpecs", "Field", "FieldSpec", "spaces_from_specs", "specs_from_spaces"]


@dataclass(frozen=True)
class Field:
    """One fixed-shape array of a batch: values of ``shape`` and ``dtype`` under ``key``, per env and step.

    The one record of (key, shape, dtype): a rollout's fields (``collector.fields``), a policy's
    extra outputs and carried inputs, and (with bounds, as :class:`FieldSpec`) an environment's
    observation and action fields.

    Attributes:
        key: Where the field lives in a batch, relative to the root (``("observation",)``,
            ``("observation", "position")`` for a Dict space, ``("action",)``,
            ``("next", "reward")``).
        shape: The shape of one env's value at one step (``()`` for a scalar).
        dtype: The numpy dtype values are stored as.
    """

    key: Key
    shape: tuple[int, ...]
    dtype: np.dtype[Any]


@dataclass(frozen=True)
class FieldSpec(Field):
    """One fixed-shape field of an environment's observation or action: a :class:`Field` with bounds.

    Attributes:
        key: Where the field lives in a batch, relative to the root (``("observation",)``,
            ``("observation", "position")`` for a Dict space, ``("action",)``).
        shape: The shape of one env's value (``()`` for a scalar).
        dtype: The numpy dtype values are stored as.
        low: Lower bounds, broadcast to ``shape`` (``-inf`` where unbounded).
        high: Upper bounds, broadcast to ``shape`` (``+inf`` where unbounded). For discrete
            fields this is the largest valid value, not one past it.
        discrete: Whether values are integer categories (Discrete, MultiDiscrete,
            MultiBinary, or an integer Box).
        space: A short description of the gymnasium space the field came from, for messages.
        path: Where an observation leaf sits in the env's raw observation (``()``: the raw
            observation itself); ``None``: ``key[1:]``, as for a gymnasium space (a backend whose
            keys are not ``("observation", ...)``, such as TorchRL's, sets it).
    """

    low: np.ndarray = field(repr=False, compare=False)
    high: np.ndarray = field(repr=False, compare=False)
    discrete: bool
    space: str = field(default="", compare=False)
    path: Key | None = field(default=None, compare=False)

    def sample(self, rng: np.random.Generator, batch: int) -> np.ndarray:
        """Draw ``batch`` uniform random values (normal where a bound is infinite)."""
        size = (batch, *self.shape)
        if self.discrete:
            if not self.shape:  # Discrete: scalar bounds take numpy's fast path
                return rng.integers(int(self.low), int(self.high), size=batch, endpoint=True).astype(
                    self.dtype, copy=False
                )
            low, high = self.low.astype(np.int64), self.high.astype(np.int64)
            return rng.integers(low, high, size=size, endpoint=True).astype(self.dtype, copy=False)
        low = np.broadcast_to(self.low, size)
        high = np.broadcast_to(self.high, size)
        bounded = np.isfinite(low) & np.isfinite(high)
        out = rng.standard_normal(size)
        if bounded.any():
            uniform = rng.uniform(np.where(bounded, low, 0.0), np.where(bounded, high, 1.0))
            out = np.where(bounded, uniform, out)
        lower_only = np.isfinite(low) & ~np.isfinite(high)
        out = np.where(lower_only, low + rng.exponential(size=size), out)
        upper_only = ~np.isfinite(low) & np.isfinite(high)
        out = np.where(upper_only, high - rng.exponential(size=size), out)
        return out.astype(self.dtype, copy=False)

    def example(self) -> np.ndarray:
        """A deterministic valid value (zero clipped into the bounds), for dry runs."""
        value = np.clip(np.zeros(self.shape), self.low, self.high)
        return value.astype(self.dtype)


@dataclass(frozen=True)
class EnvSpecs:
    """The fields of one environment.

    A single-agent env has one action field, ``("action",)``, a scalar reward and root done
    flags. A backend whose env is several agents at once (``pycollect-pettingzoo``'s) describes
    it with the last four attributes: several action leaves under their own keys, values the
    env reports with each step and the batch keeps only under ``"next"`` (per-agent rewards),
    groups of per-agent done flags the collector marks wherever it cuts a trajectory itself, and
    the sub-TensorDicts whose batch size carries an agent dimension.

    Attributes:
        observation: Every observation leaf, in a fixed order. A Box observation is the single
            field ``("observation",)``; a Dict observation gives one field per leaf, nested
            under ``"observation"``.
        action: The action field, keyed ``("action",)`` for a gymnasium space (the first of
            :attr:`actions` when those are given).
        observation_space: The original gymnasium observation space.
        action_space: The original gymnasium action space.
        actions: Every action leaf, when the env takes its action as a (nested) mapping: each
            leaf's ``key`` is where the batch (and a TensorDict policy's output) holds it and its
            ``path`` where it sits in the mapping the env's ``step`` gets. Empty: the one field
            :attr:`action`, given to ``step`` as the array itself.
        next_fields: Values the env reports in each step's ``info`` and the batch keeps at their
            keys (which start with ``"next"``), like ``info_keys`` entries; each one's ``path``
            is ``(name,)``, its name in the info dict. A step whose info lacks one stores zeros.
        done_groups: Where the env reports done flags of its own as observation leaves
            ``(*group, "done")``, ``(*group, "terminated")`` and ``(*group, "truncated")``
            (per-agent flags): where the collector ends a trajectory itself (a dead worker,
            ``max_frames_per_traj``, ``set_truncated``) it marks those too, as it marks the root
            flags (``truncated`` and ``done`` set, ``terminated`` kept).
        group_sizes: Sub-TensorDicts whose batch size has one more dimension than the batch's,
            as ``(key, n)`` pairs: the sub-TensorDict at ``key`` (and at ``("next", *key)``) of a
            ``[K, T]`` batch has batch size ``[K, T, n]``, and the one the policy gets ``[K, n]``,
            as TorchRL's multi-agent envs give each group of ``n`` agents. Every leaf under such a
            key must have ``n`` as its first dimension.
    """

    observation: tuple[FieldSpec, ...]
    action: FieldSpec
    observation_space: gym.Space[Any] = field(repr=False, compare=False)
    action_space: gym.Space[Any] = field(repr=False, compare=False)
    actions: tuple[FieldSpec, ...] = ()
    next_fields: tuple[FieldSpec, ...] = ()
    done_groups: tuple[Key, ...] = ()
    group_sizes: tuple[tuple[Key, int], ...] = ()

    def observation_paths(self) -> list[tuple[Key, Key]]:
        """Pairs of (batch key, path inside the env's raw observation) for every leaf."""
        return [(spec.key, spec.key[1:] if spec.path is None else spec.path) for spec in self.observation]

    @property
    def action_fields(self) -> tuple[FieldSpec, ...]:
        """Every action leaf: :attr:`actions`, or :attr:`action` alone."""
        return self.actions or (self.action,)

    @property
    def structured_action(self) -> bool:
        """Whether the env's ``step`` takes a mapping of the action leaves (by their paths) rather than one array."""
        return bool(self.actions)

    def env_action(self, leaves: tuple[Any, ...] | list[Any]) -> Any:
        """One env's action as its ``step`` takes it, from its value of each leaf (:attr:`action_fields` order)."""
        if not self.actions:
            return leaves[0]
        out: dict[str, Any] = {}
        for spec, value in zip(self.actions, leaves, strict=True):
            path = spec.path or spec.key
            node = out
            for name in path[:-1]:
                node = node.setdefault(name, {})
            node[path[-1]] = value
        return out

    def sample_action(self, rng: np.random.Generator) -> Any:
        """One uniform random action, as the env's ``step`` takes it."""
        return self.env_action([spec.sample(rng, 1)[0] for spec in self.action_fields])


def _describe(space: gym.Space[Any]) -> str:
    return repr(space) if len(repr(space)) <= 120 else type(space).__name__


def _bounds(shape: tuple[int, ...], low: Any, high: Any) -> tuple[np.ndarray, np.ndarray]:
    lo = np.broadcast_to(np.asarray(low, dtype=np.float64), shape).copy()
    hi = np.broadcast_to(np.asarray(high, dtype=np.float64), shape).copy()
    return lo, hi


def _leaf(key: Key, space: gym.Space[Any]) -> FieldSpec:
    """Turn one non-composite gymnasium space into a field."""
    desc = _describe(space)
    if isinstance(space, gym.spaces.Box):
        dtype = np.dtype(space.dtype)
        lo, hi = _bounds(space.shape, space.low, space.high)
        is_int = np.issubdtype(dtype, np.integer) or dtype == np.bool_
        return FieldSpec(key, tuple(space.shape), dtype, lo, hi, bool(is_int), desc)
    if isinstance(space, gym.spaces.Discrete):
        start = int(space.start)
        lo, hi = _bounds((), start, start + int(space.n) - 1)
        return FieldSpec(key, (), np.dtype(np.int64), lo, hi, True, desc)
    if isinstance(space, gym.spaces.MultiDiscrete):
        shape = tuple(space.nvec.shape)
        lo, hi = _bounds(shape, space.start, space.start + space.nvec - 1)
        return FieldSpec(key, shape, np.dtype(np.int64), lo, hi, True, desc)
    if isinstance(space, gym.spaces.MultiBinary):
        shape = tuple(space.shape)
        lo, hi = _bounds(shape, 0, 1)
        return FieldSpec(key, shape, np.dtype(np.int8), lo, hi, True, desc)
    raise UnsupportedSpaceError(
        f"unsupported space {desc} at key {'/'.join(key)}: pycollect supports Box, Discrete, "
        "MultiDiscrete, MultiBinary and (for observations) Dict spaces"
    )


def _observation_leaves(key: Key, space: gym.Space[Any]) -> Iterator[FieldSpec]:
    if isinstance(space, gym.spaces.Dict):
        if not space.spaces:
            raise UnsupportedSpaceError(f"empty Dict observation space at key {'/'.join(key)}")
        for name, sub in space.spaces.items():
            if not isinstance(name, str):
                raise UnsupportedSpaceError(f"Dict observation space key {name!r} at {'/'.join(key)} is not a string")
            yield from _observation_leaves((*key, name), sub)
    else:
        yield _leaf(key, space)


def specs_from_spaces(observation_space: gym.Space[Any], action_space: gym.Space[Any]) -> EnvSpecs:
    """Build :class:`EnvSpecs` from gymnasium spaces.

    Args:
        observation_space: Box, Discrete, MultiDiscrete, MultiBinary or a (nested) Dict of those.
        action_space: Box, Discrete, MultiDiscrete or MultiBinary.

    Raises:
        UnsupportedSpaceError: A space (or a Dict leaf) of any other type; the message names it.
    """
    observation = tuple(_observation_leaves(("observation",), observation_space))
    if isinstance(action_space, gym.spaces.Dict):
        raise UnsupportedSpaceError(
            f"unsupported action space {_describe(action_space)}: Dict action spaces are not "
            "supported yet; use Box, Discrete, MultiDiscrete or MultiBinary"
        )
    action = _leaf(("action",), action_space)
    return EnvSpecs(observation, action, observation_space, action_space)


@overload
def spaces_from_specs(observation: Sequence[FieldSpec], action: None = None) -> tuple[gym.Space[Any], None]: ...


@overload
def spaces_from_specs(
    observation: Sequence[FieldSpec], action: FieldSpec | Sequence[FieldSpec]
) -> tuple[gym.Space[Any], gym.Space[Any]]: ...


def spaces_from_specs(
    observation: Sequence[FieldSpec], action: FieldSpec | Sequence[FieldSpec] | None = None
) -> tuple[gym.Space[Any], gym.Space[Any] | None]:
    """Build gymnasium spaces from fields: the inverse of :func:`specs_from_spaces`.

    Every field becomes a ``Box`` of its shape, dtype and bounds, and the boxes are nested in
    ``Dict`` spaces where the fields sit: an observation field at its ``path`` (``None``:
    ``key[1:]``, :meth:`EnvSpecs.observation_paths`), so one field at ``()`` is the space
    itself; an action given as one field is its ``Box``; action fields given as a sequence (an
    :attr:`EnvSpecs.actions`) sit at ``path`` (``None``: ``key``), as :meth:`EnvSpecs.env_action`
    puts them. Dict keys keep the fields' order. ``specs_from_spaces`` of the result gives
    fields equal to these, bounds included; what was a ``Discrete``, ``MultiDiscrete`` or
    ``MultiBinary`` comes back as an integer ``Box`` of the same values (a field does not say
    which it was). Integer and bool bounds are the field's float bounds saturated at the
    dtype's range (``-inf`` becomes the dtype's minimum).

    Args:
        observation: The observation fields (:attr:`EnvSpecs.observation`).
        action: The action field (:attr:`EnvSpecs.action`), or the action leaves
            (:attr:`EnvSpecs.actions`); ``None``: no action space.

    Returns:
        ``(observation_space, action_space)``; ``action_space`` is ``None`` without ``action``.

    Raises:
        ConfigError: No field, or two fields whose places clash (the same place, or one inside
            another); the message names their keys.
    """
    observation_space = _space_at(
        [(spec.key[1:] if spec.path is None else spec.path, spec) for spec in observation], "observation"
    )
    if action is None:
        return observation_space, None
    if isinstance(action, FieldSpec):
        return observation_space, _field_box(action)
    return observation_space, _space_at([(spec.path or spec.key, spec) for spec in action], "action")


def _field_box(spec: FieldSpec) -> gym.spaces.Box:
    """One field as a ``Box`` of its shape, dtype and bounds (integer and bool bounds saturated at its range)."""
    dtype = spec.dtype
    as_given: Any = dtype  # gymnasium's stub names scalar types only; Box takes the dtype itself too, exactly
    if dtype == np.bool_ or np.issubdtype(dtype, np.integer):
        return gym.spaces.Box(_saturated(spec.low, dtype), _saturated(spec.high, dtype), spec.shape, as_given)
    return gym.spaces.Box(spec.low.astype(dtype), spec.high.astype(dtype), spec.shape, as_given)


def _clash(what: str, keys: str, spec: FieldSpec) -> ConfigError:
    return ConfigError(
        f"{what} fields {keys}: {'/'.join(spec.key)} sits where another field does, or inside it, or around it"
    )


def _saturated(bound: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    """Float64 bounds as an integer (or bool) ``dtype``, saturating at its range.

    A plain cast would not do: ``float(2**63 - 1)`` is ``2**63``, which does not cast back.
    """
    if dtype == np.bool_:
        return np.asarray(bound > 0)
    info = np.iinfo(dtype)
    above, below = bound >= float(info.max), bound <= float(info.min)
    out = np.where(above | below, 0, bound).astype(dtype)
    out[above], out[below] = info.max, info.min
    return out


def _space_at(placed: list[tuple[Key, FieldSpec]], what: str) -> gym.Space[Any]:
    """The fields' boxes, each at its place (a path of Dict keys); one field at ``()`` is the space itself."""
    if not placed:
        raise ConfigError(f"no {what} fields to build a space from")
    keys = ", ".join("/".join(spec.key) for _, spec in placed)
    if any(not path for path, _ in placed):
        if len(placed) > 1:
            raise ConfigError(
                f"{what} fields {keys}: one of them is the whole {what} (path ()), so it must be the only one"
            )
        return _field_box(placed[0][1])
    tree: dict[str, Any] = {}
    for path, spec in placed:
        node = tree
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise _clash(what, keys, spec)
        if path[-1] in node:
            raise _clash(what, keys, spec)
        node[path[-1]] = _field_box(spec)

    def build(node: dict[str, Any]) -> gym.spaces.Dict:
        # A list of pairs: gymnasium sorts the keys of a plain dict, and the fields' order is the leaves' order
        return gym.spaces.Dict([(k, build(v) if isinstance(v, dict) else v) for k, v in node.items()])

    return build(tree)


def read_leaf(raw: Any, path: Key) -> Any:
    """Follow ``path`` into a raw (possibly nested Mapping) observation."""
    for name in path:
        if not isinstance(raw, Mapping):
            raise TypeError(f"observation is not a mapping at {name!r}")
        raw = raw[name]
    return raw
