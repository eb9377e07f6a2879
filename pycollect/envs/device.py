"""Device-resident batched envs: ``N`` sub-envs stepped in one call, whose data never leaves their device.

Simulators such as gymnax, Brax and MJX (JAX), Isaac Lab and ManiSkill3 (torch on CUDA) step
thousands of envs in one call on an accelerator. :class:`DeviceBatchedEnv` is what pycollect
steps such a simulator through: observations, rewards and done flags are torch tensors on the
env's :attr:`~DeviceBatchedEnv.device`, actions come back as a tensor on that device, and the
``device`` engine (``Collector(env, policy, engine="device", envs_per_worker=N)``) writes every
step into a rollout that lives there too. No value is read on the host between two batches.

What a simulator implements (see :class:`DeviceBatchedEnv`):

* :attr:`~DeviceBatchedEnv.num_envs`, :attr:`~DeviceBatchedEnv.single_observation_space`,
  :attr:`~DeviceBatchedEnv.single_action_space` (gymnasium spaces of one sub-env: they lay out the
  batch) and :attr:`~DeviceBatchedEnv.device`;
* :meth:`~DeviceBatchedEnv.reset`: every sub-env starts an episode, seeded one seed per sub-env;
* :meth:`~DeviceBatchedEnv.step`: every sub-env steps, and one whose episode ends starts the next
  one in the same call (gymnasium's ``SAME_STEP`` autoreset), reporting the episode's last
  observation apart;
* :meth:`~DeviceBatchedEnv.reset_envs`: the sub-envs of a mask start an episode (a trajectory
  limit cuts them), the others go on;
* :meth:`~DeviceBatchedEnv.close`;
* optionally, :meth:`~DeviceBatchedEnv.rollout`: ``T`` steps with given actions in one call (a
  JAX env's ``lax.scan``), which the ``device`` engine calls instead of ``T`` steps wherever the
  actions do not depend on the observations (random actions, no trajectory limit); see
  :func:`has_rollout`.
* optionally, :meth:`~DeviceBatchedEnv.get_state` and :meth:`~DeviceBatchedEnv.set_state`: every
  sub-env's state, for checkpoints with env states (``snapshots=True``, ``checkpoint_dir=``,
  ``state_dict()``); see :func:`has_state`.

A JAX simulator hands its arrays over without a copy with ``torch.from_dlpack(array)`` (a JAX
array on a GPU becomes a CUDA tensor sharing its memory) and takes its actions back with
``jax.dlpack.from_dlpack(actions)`` (or ``jnp.from_dlpack``); a torch simulator on CUDA returns its
tensors as they are. Either way, nothing in a step may read a value on the host (``.item()``,
``bool(tensor)``, a boolean-mask index, which waits for the device to count): the collector's loop
runs ahead of the device, and one such read per step stalls it.

Other engines step host-side (numpy) envs only: :func:`is_device_env` tells a device env apart,
and :func:`device_env_refusal` says why another engine cannot step one. This module imports no
torch (a worker with a random policy never does); the types it names are torch's.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from pycollect.exceptions import ActionError, EnvStateError

if TYPE_CHECKING:
    import torch

__all__ = [
    "DeviceBatchedEnv",
    "DeviceObservation",
    "DeviceStep",
    "device_env_refusal",
    "has_rollout",
    "has_state",
    "is_device_env",
]

DeviceObservation: TypeAlias = "torch.Tensor | Mapping[str, DeviceObservation]"
"""A batch of observations: one ``[num_envs, *shape]`` tensor for a Box (Discrete, MultiDiscrete,
MultiBinary) space, a mapping of them (nested as the space is) for a Dict space."""

DeviceStep: TypeAlias = "tuple[DeviceObservation, torch.Tensor, torch.Tensor, torch.Tensor, DeviceObservation]"
"""What :meth:`DeviceBatchedEnv.step` returns: ``(observation, reward, terminated, truncated,
final_observation)``; :meth:`DeviceBatchedEnv.rollout` returns the same with a leading
dimension of ``T`` steps on each tensor."""


class DeviceBatchedEnv(abc.ABC):
    """``num_envs`` sub-envs on one device, stepped together with torch tensors that stay there.

    Subclasses set the four attributes (in ``__init__``, or as properties) and implement
    :meth:`reset`, :meth:`step` and :meth:`reset_envs`; :meth:`close` releases the simulator
    (nothing by default).

    Layout: everything is batched along a first dimension of ``num_envs``, on :attr:`device`. An
    observation is one tensor ``[num_envs, *shape]`` of the space's dtype (``float32`` for a
    ``float32`` Box; a Discrete space's sub-env observation is a scalar, so ``[num_envs]`` of an
    integer dtype), or for a ``Dict`` space a mapping of such tensors with the space's keys
    (nested as the space is). Rewards are ``[num_envs]`` (any real dtype: stored as float32), and
    ``terminated`` and ``truncated`` ``[num_envs]`` bool tensors. Actions are one tensor
    ``[num_envs, *shape]`` of the action space's dtype (``int64`` for Discrete and
    MultiDiscrete, ``int8`` for MultiBinary); a ``Dict`` action space is not supported.

    The collector checks the shapes, dtypes and devices of what comes back at every step (that
    costs no device time), never the values: reading a value would copy it to the host.

    Attributes:
        num_envs: How many sub-envs one call steps (the collector's ``envs_per_worker``).
        single_observation_space: One sub-env's observation space (a gymnasium space: Box,
            Discrete, MultiDiscrete, MultiBinary or a nested Dict of those).
        single_action_space: One sub-env's action space (Box, Discrete, MultiDiscrete or MultiBinary).
        device: Where every tensor the env takes and returns lives (``torch.device``).
        final_observation_complete: Optional, ``False`` by default. ``True`` promises that
            :meth:`step`'s ``final_observation`` holds every sub-env's own observation of the step,
            not only the ended ones': the observation the step reached, before any reset (where
            no episode ended, the same values as ``observation``). The collector then copies it as
            the step's ``("next", "observation")`` as it is, instead of picking between the two by
            the done flags (a select per step and leaf). Set it where it holds: a sub-env's row of
            ``final_observation`` that is anything else would be stored as its next observation.
    """

    num_envs: int
    single_observation_space: Any
    single_action_space: Any
    device: torch.device
    final_observation_complete: bool = False

    @abc.abstractmethod
    def reset(self, seeds: Sequence[int] | None = None) -> DeviceObservation:
        """Start an episode in every sub-env; return every sub-env's first observation.

        Args:
            seeds: One seed per sub-env (the collector's first reset passes
                ``pycollect.env_seeds(seed, num_envs)``): sub-env ``i``'s random stream starts
                from ``seeds[i]``, whatever the other sub-envs do, so a run can be replayed.
                ``None``: each sub-env goes on with its own stream (``reset_at_each_iter`` resets
                with ``None``); an env never seeded draws its streams from fresh entropy. A JAX
                env makes one key per sub-env (``jax.random.PRNGKey(seed)``, vmapped), a torch
                env a counter-based stream or a generator per sub-env.
        """

    @abc.abstractmethod
    def step(self, actions: torch.Tensor) -> DeviceStep:
        """Step every sub-env with its row of ``actions``; reset those whose episode ends, in the same call.

        Args:
            actions: ``[num_envs, *action_shape]`` on :attr:`device`, of the action space's
                dtype. Read it within the call: the collector may write into the memory behind
                it afterwards.

        Returns:
            ``(observation, reward, terminated, truncated, final_observation)``, all on
            :attr:`device`. A sub-env whose episode ended at this step (``terminated`` or
            ``truncated``) is reset in the same call (gymnasium's ``SAME_STEP`` autoreset): its
            row of ``observation`` is its new episode's first observation and its row of
            ``final_observation`` the ended episode's last one. The rows of
            ``final_observation`` of sub-envs that did not end may hold anything (the
            collector takes ``observation`` there; returning ``observation`` itself is fine),
            unless :attr:`final_observation_complete` is set: then every row is the sub-env's
            observation of this step, before any reset.
        """

    @abc.abstractmethod
    def reset_envs(self, mask: torch.Tensor) -> DeviceObservation:
        """Start an episode in the sub-envs of ``mask``; the others go on untouched.

        The collector calls it once per step while a trajectory limit
        (``max_frames_per_traj``) may cut an episode, usually with no sub-env in ``mask``: it
        must not read ``mask`` on the host to decide what to do (reset every sub-env into a
        scratch state and keep it where ``mask`` is set, ``torch.where`` / ``jnp.where``). A
        reset sub-env goes on with its own random stream, as after an episode's end.

        Args:
            mask: ``[num_envs]`` bool on :attr:`device`.

        Returns:
            Every sub-env's current observation (the new first one where ``mask`` is set).
        """

    def rollout(self, actions: torch.Tensor) -> DeviceStep:
        """Step every sub-env ``T`` times, with ``actions[t]`` at step ``t``: ``T`` calls of :meth:`step` in one.

        Optional. The ``device`` engine calls it instead of ``T`` :meth:`step` calls wherever the
        actions of a whole batch are known before its first step (random actions, for
        ``policy=None`` and ``init_random_frames``) and no trajectory limit may cut an episode
        within it (``max_frames_per_traj`` unset): an env that steps ``T`` times in one call of
        its simulator (a JAX env's jitted ``lax.scan``; a CUDA graph) saves the per-step
        dispatch and conversions there. It is called only where a subclass overrides it
        (:func:`has_rollout`); this implementation is its meaning, :meth:`step` ``T`` times, and
        an override must return the same values (the batches are then those of the step path,
        value for value). Like :meth:`step`, it reads no value on the host.

        Args:
            actions: ``[T, num_envs, *action_shape]`` on :attr:`device`, of the action space's
                dtype, contiguous; row ``t`` is step ``t``'s actions. Read it within the call.

        Returns:
            ``(observation, reward, terminated, truncated, final_observation)`` as :meth:`step`
            returns them, each tensor with a leading dimension of ``T``: row ``t`` is step
            ``t``'s (``observation[T - 1]`` is what the policy would see next). The tensors may
            be the env's own memory, kept by the caller until the next call.

        Raises:
            ActionError: ``actions`` has no step (``T`` is 0).
        """
        import torch

        steps = actions.shape[0]
        if steps < 1:
            raise ActionError(f"{self.describe()}: a rollout of actions {tuple(actions.shape)} has no step")
        stacked: list[Any] = []
        for t in range(steps):
            outputs = self.step(actions[t])
            if not stacked:  # the layout of every step's outputs, T of them
                stacked = [
                    _map(lambda leaf: torch.empty((steps, *leaf.shape), dtype=leaf.dtype, device=leaf.device), out)
                    for out in outputs
                ]
            for rows, out in zip(stacked, outputs, strict=True):
                _zip_copy(rows, out, t)
        observation, reward, terminated, truncated, final = stacked
        return observation, reward, terminated, truncated, final

    def get_state(self) -> Any:
        """Everything every sub-env's future depends on: their simulator state and random streams.

        Optional (:func:`has_state`): the ``device`` engine saves it with its own state for a
        checkpoint or ``state_dict()``, between batches, never per step, so it may read the
        device. Return a picklable value that shares no memory with the env (tensors cloned,
        on the device or the host); :meth:`set_state` given it, in this env or a fresh one built
        the same way, makes every sub-env go on exactly as this one would.

        Raises:
            EnvStateError: This env does not save its state (the default).
        """
        raise EnvStateError(_stateless(self))

    def set_state(self, state: Any) -> None:
        """Put every sub-env back where :meth:`get_state` found them (its simulator state and streams).

        Raises:
            EnvStateError: This env does not restore its state (the default), or ``state`` is
                not one of an env built the same way; nothing is changed then.
        """
        raise EnvStateError(_stateless(self))

    def close(self) -> None:  # noqa: B027 - optional: most simulators hold nothing to release
        """Release the simulator (called once, when the collector shuts down)."""

    def describe(self) -> str:
        """A short name for messages: the class, the sub-envs and the device."""
        return f"{type(self).__name__} of {self.num_envs} sub-envs on {self.device}"


def has_rollout(env: DeviceBatchedEnv) -> bool:
    """Whether ``env``'s class overrides :meth:`DeviceBatchedEnv.rollout` (the engine then calls it)."""
    return getattr(type(env), "rollout", None) is not DeviceBatchedEnv.rollout


def has_state(env: DeviceBatchedEnv) -> bool:
    """Whether ``env``'s class overrides :meth:`DeviceBatchedEnv.get_state` and :meth:`~DeviceBatchedEnv.set_state`."""
    klass = type(env)
    return (
        getattr(klass, "get_state", None) is not DeviceBatchedEnv.get_state
        and getattr(klass, "set_state", None) is not DeviceBatchedEnv.set_state
    )


def _stateless(env: DeviceBatchedEnv) -> str:
    return (
        f"device env {_describe(env)} does not save its state: implement get_state() and set_state(state) on it "
        "(pycollect.envs.DeviceBatchedEnv) to checkpoint it"
    )


def _map(function: Any, tree: Any) -> Any:
    """``function`` of each tensor of an observation (nested mappings) or of one tensor."""
    if isinstance(tree, Mapping):
        return {name: _map(function, value) for name, value in tree.items()}
    return function(tree)


def _zip_copy(rows: Any, step: Any, t: int) -> None:
    """Copy one step's tensors (an observation's nested mappings, or a tensor) into row ``t`` of ``rows``."""
    if isinstance(rows, Mapping):
        for name, value in rows.items():
            _zip_copy(value, step[name], t)
        return
    rows[t].copy_(step)


def is_device_env(obj: Any) -> bool:
    """Whether ``obj`` is a :class:`DeviceBatchedEnv` (only ``engine="device"`` steps one)."""
    return isinstance(obj, DeviceBatchedEnv)


def device_env_refusal(env: DeviceBatchedEnv, source: str) -> str:
    """Why an engine that steps host envs cannot step the device env ``env`` that ``source`` built.

    Args:
        env: The device env built.
        source: The env argument's name (``EnvSource.describe()``, e.g. ``"callable:make_env"``).
    """
    count = getattr(env, "num_envs", "N")
    return (
        f"env {source!r} built a device env ({_describe(env)}), whose tensors stay on their device: only "
        f"engine='device' steps one, in this process (Collector(env, policy, engine='device', "
        f"envs_per_worker={count})); the other engines step numpy envs"
    )


def _describe(env: DeviceBatchedEnv) -> str:
    try:
        return env.describe()
    except Exception:  # a half-built env: its class is still a name
        return type(env).__name__
