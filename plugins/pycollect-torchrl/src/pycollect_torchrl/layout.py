"""A TorchRL env's ``Composite`` specs as pycollect's fixed-size fields, checked once.

:func:`layout` reads one unbatched ``EnvBase``'s specs and returns a :class:`Layout`: its
observation leaves under their TorchRL keys (``("observation",)``, ``("pixels",)``,
``("step_count",)``, ``("agent", "position")``: the keys a TorchRL collector's batch has, so a
TorchRL policy's ``in_keys`` work unchanged), the action, the reward and done keys, and the
gymnasium spaces that ``pycollect.make_vec`` lays its arrays out from. Anything that cannot be
laid out in fixed-size fields is refused here, in the trainer, before any worker starts, with a
:class:`pycollect.ConfigError` naming the key and why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from pycollect import ConfigError
from pycollect.envs.specs import EnvSpecs, FieldSpec, spaces_from_specs

__all__ = ["RESERVED_KEYS", "Layout", "OneHotFieldSpec", "OneHotSpace", "layout"]

Key = tuple[str, ...]

RESERVED_KEYS: frozenset[Key] = frozenset(
    {("action",), ("done",), ("terminated",), ("truncated",), ("reward",), ("policy_version",), ("next",)}
)
"""Root keys a pycollect batch holds itself (an observation there would be overwritten).

``("collector", ...)`` is reserved too (trajectory ids). ``is_init`` is not: an ``InitTracker``'s
``is_init`` is an observation like any other, with the values pycollect would give it.
"""

_DONE_KEYS = {("done",), ("terminated",), ("truncated",)}


class OneHotFieldSpec(FieldSpec):
    """A one-hot action field: random actions are one-hot vectors, not any 0/1 vector."""

    def sample(self, rng: np.random.Generator, batch: int) -> np.ndarray:
        """``batch`` uniform one-hot vectors of the field's shape (the last dimension is the category)."""
        n = self.shape[-1]
        hot = rng.integers(0, n, size=(batch, *self.shape[:-1]))
        out: np.ndarray = (np.arange(n) == hot[..., None]).astype(self.dtype)
        return out

    def example(self) -> np.ndarray:
        """The first category, one-hot."""
        out = np.zeros(self.shape, self.dtype)
        out[..., 0] = 1
        return out


class OneHotSpace(gym.spaces.MultiBinary):
    """gymnasium's view of a TorchRL ``OneHot`` action: a ``MultiBinary`` that samples (and contains) one-hots."""

    def sample(self, mask: Any = None, probability: Any = None) -> np.ndarray:
        """One uniform category, one-hot (``mask`` and ``probability`` are not supported)."""
        if mask is not None or probability is not None:
            raise NotImplementedError("OneHotSpace.sample takes no mask or probability")
        n = int(self.shape[-1])
        hot = self.np_random.integers(0, n, size=self.shape[:-1])
        out: np.ndarray = (np.arange(n) == np.asarray(hot)[..., None]).astype(self.dtype)
        return out

    def contains(self, x: Any) -> bool:
        """A 0/1 array of the shape with exactly one 1 along the last dimension."""
        return bool(super().contains(x)) and bool((np.asarray(x).sum(-1) == 1).all())


@dataclass(frozen=True)
class Layout:
    """Where everything of one TorchRL env sits, as its specs say.

    Attributes:
        observation: One field per observation leaf, in the spec's order, keyed as TorchRL keys
            it; ``path`` is where the leaf sits in what :class:`~pycollect_torchrl.env.TorchRLEnv`
            returns (``()`` when there is one leaf: the array itself).
        action: The action field (``("action",)``).
        action_key: The env's action key (always ``"action"``: pycollect stores actions there).
        reward_key: The env's reward key.
        reward_dtype: The reward spec's dtype.
        has_terminated: Whether the env reports ``terminated``.
        has_truncated: Whether the env reports ``truncated``.
        observation_space: The observation as a gymnasium space: a ``Box`` for one leaf, a
            (nested) ``Dict`` of them in the spec's order otherwise.
        action_space: The action as a gymnasium space.
    """

    observation: tuple[FieldSpec, ...]
    action: FieldSpec
    action_key: str
    reward_key: str
    reward_dtype: torch.dtype
    has_terminated: bool
    has_truncated: bool
    observation_space: gym.Space[Any]
    action_space: gym.Space[Any]

    @property
    def reward_numpy_dtype(self) -> np.dtype[Any]:
        """:attr:`reward_dtype` as numpy's dtype (what the fast steps and ``ParallelEnv`` cast rewards to)."""
        return np.dtype(torch.empty((), dtype=self.reward_dtype).numpy().dtype)

    @property
    def keys(self) -> tuple[Key, ...]:
        """The observation keys, in order."""
        return tuple(spec.key for spec in self.observation)

    def specs(self) -> EnvSpecs:
        """Pycollect's :class:`~pycollect.envs.specs.EnvSpecs` of the env."""
        return EnvSpecs(self.observation, self.action, self.observation_space, self.action_space)


def _name(key: Key) -> str:
    return key[0] if len(key) == 1 else repr(key)


def _numpy_dtype(key: Key, dtype: torch.dtype, what: str) -> np.dtype[Any]:
    try:
        return np.dtype(torch.empty((), dtype=dtype).numpy().dtype)
    except (TypeError, RuntimeError):
        raise ConfigError(
            f"{what} {_name(key)!r} has dtype {dtype}, which numpy (and so pycollect's batches) cannot hold; "
            "cast it (e.g. with a DTypeCastTransform) to a numpy dtype"
        ) from None


def _bounds(spec: Any, shape: tuple[int, ...], dtype: np.dtype[Any]) -> tuple[np.ndarray, np.ndarray, bool]:
    """Lower and upper bounds (float64, broadcast to ``shape``) and whether values are integer categories."""
    from torchrl.data import Binary, Bounded, Categorical, MultiCategorical, MultiOneHot, OneHot

    integer = bool(np.issubdtype(dtype, np.integer) or dtype == np.bool_)
    if isinstance(spec, OneHot | MultiOneHot | Binary):
        return np.zeros(shape), np.ones(shape), True
    if isinstance(spec, MultiCategorical):
        nvec = np.broadcast_to(spec.nvec.cpu().numpy(), shape).astype(np.float64)
        return np.zeros(shape), nvec - 1, True
    if isinstance(spec, Categorical):
        return np.zeros(shape), np.full(shape, float(spec.space.n - 1)), True
    if isinstance(spec, Bounded):
        low = np.broadcast_to(spec.space.low.cpu().double().numpy(), shape).copy()
        high = np.broadcast_to(spec.space.high.cpu().double().numpy(), shape).copy()
        return low, high, integer
    if dtype == np.bool_:
        return np.zeros(shape), np.ones(shape), True
    if integer:
        info = np.iinfo(dtype)
        return np.full(shape, float(info.min)), np.full(shape, float(info.max)), True
    return np.full(shape, -np.inf), np.full(shape, np.inf), False


def _leaf_spec(key: Key, spec: Any, what: str, path: Key | None) -> FieldSpec:
    from torchrl.data import Composite, NonTensor, OneHot

    if isinstance(spec, NonTensor) or not hasattr(spec, "shape") or isinstance(spec, Composite):
        raise ConfigError(
            f"{what} {_name(key)!r} is a {type(spec).__name__} spec, not a tensor: pycollect stores fixed-size "
            "arrays; drop the key (ExcludeTransform) or turn it into a tensor"
        )
    if type(spec).__name__.startswith("Stacked"):
        raise ConfigError(
            f"{what} {_name(key)!r} is a {type(spec).__name__} (a stack of specs that may differ): pycollect "
            "needs one fixed shape per key"
        )
    shape = tuple(int(n) for n in spec.shape)
    if any(n < 0 for n in shape):
        raise ConfigError(
            f"{what} {_name(key)!r} has a variable shape {list(shape)} (-1 marks a dimension of any size): "
            "pycollect lays every key out in fixed-size fields; give it a fixed shape (pad or crop it)"
        )
    dtype = _numpy_dtype(key, spec.dtype, what)
    low, high, discrete = _bounds(spec, shape, dtype)
    cls = OneHotFieldSpec if isinstance(spec, OneHot) else FieldSpec
    return cls(key, shape, dtype, low, high, discrete, f"{type(spec).__name__}{list(shape)}", path)


def _action_space(spec: Any, field: FieldSpec, box: gym.Space[Any]) -> gym.Space[Any]:
    """The action's gymnasium space: by the kind of TorchRL spec, ``box`` (the field's ``Box``) for a continuous one."""
    from torchrl.data import Binary, Categorical, MultiCategorical, MultiOneHot, OneHot

    if isinstance(spec, OneHot):
        return OneHotSpace(field.shape[-1] if len(field.shape) == 1 else list(field.shape))
    if isinstance(spec, MultiOneHot):
        raise ConfigError(
            f"action is a MultiOneHot spec {list(field.shape)}: not supported yet; use a MultiCategorical "
            "action (ActionDiscretizer / categorical_action_encoding) instead"
        )
    if isinstance(spec, Binary):
        return gym.spaces.MultiBinary(list(field.shape))
    if isinstance(spec, MultiCategorical) or (isinstance(spec, Categorical) and field.shape):
        return gym.spaces.MultiDiscrete((field.high + 1).astype(np.int64))
    if isinstance(spec, Categorical):
        return gym.spaces.Discrete(int(field.high) + 1)
    return box


def layout(env: Any) -> Layout:
    """Read and check one TorchRL env's specs.

    Args:
        env: An unbatched ``torchrl.envs.EnvBase`` (``batch_size=[]``).

    Raises:
        ConfigError: The env is batched; an observation leaf is not a tensor, has a variable
            shape, a dtype numpy lacks, or a key pycollect's batch holds itself; the action,
            reward or done keys are not one root ``action``, one reward and root
            ``done``/``terminated``/``truncated`` (multi-agent envs); the message names the key.
    """
    batch_size = tuple(env.batch_size)
    if batch_size:
        raise ConfigError(
            f"env {type(env).__name__} is already batched (batch_size={list(batch_size)}): pycollect batches envs "
            "itself (envs_per_worker, num_workers); pass a factory of one unbatched env (batch_size=[]), "
            "e.g. GymEnv('CartPole-v1') rather than GymEnv('CartPole-v1', num_envs=4) or a ParallelEnv"
        )
    action_keys = [tuple(k) if isinstance(k, tuple) else (k,) for k in env.action_keys]
    if action_keys != [("action",)]:
        raise ConfigError(
            f"env {type(env).__name__} has action keys {action_keys}: pycollect steps envs with one action, "
            "at the root key 'action' (multi-agent or renamed actions are not supported)"
        )
    reward_keys = [tuple(k) if isinstance(k, tuple) else (k,) for k in env.reward_keys]
    if len(reward_keys) != 1 or len(reward_keys[0]) != 1:
        raise ConfigError(
            f"env {type(env).__name__} has reward keys {reward_keys}: pycollect stores one reward per step, "
            "at a root key"
        )
    done_keys = {tuple(k) if isinstance(k, tuple) else (k,) for k in env.done_keys}
    if not done_keys <= _DONE_KEYS or ("done",) not in done_keys:
        raise ConfigError(
            f"env {type(env).__name__} has done keys {sorted(done_keys)}: pycollect needs the root 'done' "
            "(and optionally 'terminated' and 'truncated'), one flag per step"
        )
    reward_spec = env.full_reward_spec[reward_keys[0]]
    if int(np.prod(tuple(reward_spec.shape))) != 1:
        raise ConfigError(
            f"reward {reward_keys[0][0]!r} has shape {list(reward_spec.shape)}: pycollect stores one scalar reward "
            "per step (shape [] or [1])"
        )
    leaves = [
        (tuple(k) if isinstance(k, tuple) else (k,), spec)
        for k, spec in env.observation_spec.items(include_nested=True, leaves_only=True)
    ]
    if not leaves:
        raise ConfigError(f"env {type(env).__name__} has no observation keys: pycollect needs at least one")
    single = len(leaves) == 1
    fields = []
    for key, spec in leaves:
        if key in RESERVED_KEYS or key[0] == "collector" or key in reward_keys:
            raise ConfigError(
                f"observation {_name(key)!r}: pycollect's batch holds that key itself; rename it (RenameTransform)"
            )
        fields.append(_leaf_spec(key, spec, "observation", () if single else key))
    action_spec = env.full_action_spec[action_keys[0]]
    action = _leaf_spec(("action",), action_spec, "action", None)
    # One observation leaf is the whole observation (path ()), several sit at their keys; the action is its Box
    observation_space, action_box = spaces_from_specs(fields, action)
    return Layout(
        observation=tuple(fields),
        action=action,
        action_key="action",
        reward_key=reward_keys[0][0],
        reward_dtype=reward_spec.dtype,
        has_terminated=("terminated",) in done_keys,
        has_truncated=("truncated",) in done_keys,
        observation_space=observation_space,
        action_space=_action_space(action_spec, action, action_box),
    )
