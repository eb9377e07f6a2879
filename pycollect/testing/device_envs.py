"""Small device envs with known behaviour, written in torch, for ``engine="device"`` and its tests.

* :class:`TorchCartPole`: gymnasium's ``CartPole-v1`` (the same constants, equations, thresholds,
  reward and 500-step time limit) as a :class:`~pycollect.envs.DeviceBatchedEnv` of ``num_envs``
  sub-envs on any torch device.
* :class:`TorchPointMass`: a point pushed around a square, with a ``Dict`` observation and a
  continuous (``Box``) action, to cover those layouts.
* :class:`HostCartPole`: the very same :class:`TorchCartPole`, stepped on the CPU and handed to the
  host engines as a numpy batched env (:class:`~pycollect.envs.batched.BatchedEnv`), so that a
  batch of ``engine="device"`` can be compared value for value with one of ``engine="inprocess"``.
* :func:`forbid_host_transfers`: a context in which reading a tensor's value on the host or
  moving a tensor between devices raises, to check that a device env (or the engine) never does
  within a step.

Randomness is per sub-env and counter-based: sub-env ``i``'s ``k``-th episode starts from a hash of
its seed and ``k`` (integer arithmetic on the device, identical on every device and for any
``num_envs``), so a sub-env's episodes do not depend on the other sub-envs, and no step reads a
value on the host or loops over sub-envs in Python. A per-sub-env ``torch.Generator`` would need
one call per sub-env that resets, chosen on the host.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from torch.utils._python_dispatch import TorchDispatchMode

from pycollect.envs.batched import BatchedEnv
from pycollect.envs.device import DeviceBatchedEnv
from pycollect.exceptions import ConfigError, ConformanceError, EnvStateError

__all__ = [
    "HostCartPole",
    "SeededArgmax",
    "TorchCartPole",
    "TorchPointMass",
    "forbid_host_transfers",
    "stream_uniform",
]

_MASK32 = 0xFFFFFFFF


def _mul32(x: torch.Tensor, constant: int) -> torch.Tensor:
    """``x * constant mod 2**32`` for int64 ``x`` in ``[0, 2**32)``, with no int64 overflow.

    The constant is split in 16-bit halves, so every product stays below ``2**49``: torch's
    integer overflow is not something to rely on across devices.
    """
    low, high = constant & 0xFFFF, constant >> 16
    return (x * low + ((x * high) & 0xFFFF) * 0x10000) & _MASK32


def _hash32(x: torch.Tensor) -> torch.Tensor:
    """Chris Wellons' ``lowbias32`` integer hash of int64 ``x`` in ``[0, 2**32)``."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def _keys(seeds: Sequence[int], device: torch.device) -> torch.Tensor:
    """One 32-bit stream key per sub-env from its seed (any non-negative int: both halves of 64 bits count)."""
    low = torch.tensor([seed & _MASK32 for seed in seeds], dtype=torch.int64, device=device)
    high = torch.tensor([(seed >> 32) & _MASK32 for seed in seeds], dtype=torch.int64, device=device)
    return _hash32(_hash32(low) ^ _mul32(high + 1, 0x9E3779B9))


def stream_uniform(keys: torch.Tensor, episodes: torch.Tensor, count: int) -> torch.Tensor:
    """``count`` uniform float64 values in ``[0, 1)`` per sub-env: its stream ``keys`` at episode ``episodes``.

    Args:
        keys: ``[N]`` int64 stream keys in ``[0, 2**32)``.
        episodes: ``[N]`` int64 episode counters (what makes each episode's start differ).
        count: Values per sub-env.

    Returns:
        ``[N, count]`` float64, on the keys' device.
    """
    index = torch.arange(count, dtype=torch.int64, device=keys.device)
    counter = (episodes[:, None] * count + index) & _MASK32
    bits = _hash32(_hash32(counter ^ keys[:, None]) ^ _mul32(keys[:, None], 0x85EBCA6B))
    return bits.to(torch.float64) * (1.0 / 2**32)


def _fresh_seeds(count: int) -> list[int]:
    return [int.from_bytes(os.urandom(4), "little") for _ in range(count)]


def _saved(env: DeviceBatchedEnv, names: Sequence[str]) -> dict[str, Any]:
    """``env``'s attributes ``names`` (tensors cloned), with its class and size: its whole state."""
    parts = {name: getattr(env, name) for name in names}
    parts = {name: value.clone() if isinstance(value, torch.Tensor) else value for name, value in parts.items()}
    return {"class": type(env).__qualname__, "num_envs": env.num_envs, **parts}


def _restore(env: DeviceBatchedEnv, state: Any, names: Sequence[str]) -> None:
    """Set :func:`_saved`'s attributes back on ``env``, on its device; a state of another env is refused."""
    ours = (type(env).__qualname__, env.num_envs)
    theirs = (state.get("class"), state.get("num_envs")) if isinstance(state, dict) else None
    if theirs != ours:
        got = f"{theirs[0]} of {theirs[1]} sub-envs" if theirs is not None else type(state).__name__
        raise EnvStateError(
            f"{env.describe()}: a state of {got} cannot be restored into a {ours[0]} of {ours[1]} sub-envs"
        )
    for name in names:
        value = state[name]
        setattr(env, name, value.to(env.device) if isinstance(value, torch.Tensor) else value)


class TorchCartPole(DeviceBatchedEnv):
    """gymnasium's ``CartPole-v1`` as ``num_envs`` sub-envs on ``device``, stepped with torch.

    The state is float64, as gymnasium integrates it; observations are float32. Actions: 0 pushes
    left, 1 right (``Discrete(2)``, int64). Reward 1.0 per step; ``terminated`` when the cart
    leaves ``[-2.4, 2.4]`` or the pole tilts past 12 degrees, ``truncated`` after
    ``max_episode_steps`` steps (``TimeLimit``'s rule: both may hold). A new episode starts from a
    state drawn uniformly in ``[-0.05, 0.05]`` from the sub-env's own stream (see the module).
    ``final_observation`` is every sub-env's state after the step, ended or not
    (:attr:`~pycollect.envs.DeviceBatchedEnv.final_observation_complete`).

    Args:
        num_envs: Sub-envs.
        device: Where the state and every tensor in and out live.
        max_episode_steps: The time limit (``None``: none).

    Raises:
        ConfigError: ``num_envs`` is not a positive int.
    """

    gravity = 9.8
    masscart = 1.0
    masspole = 0.1
    total_mass = masspole + masscart
    length = 0.5  # half the pole's length
    polemass_length = masspole * length
    force_mag = 10.0
    tau = 0.02
    theta_threshold_radians = 12 * 2 * math.pi / 360
    x_threshold = 2.4
    final_observation_complete = True  # the step's own state, for every sub-env

    def __init__(
        self, num_envs: int = 1, device: torch.device | str = "cpu", max_episode_steps: int | None = 500
    ) -> None:
        if not isinstance(num_envs, int) or isinstance(num_envs, bool) or num_envs < 1:
            raise ConfigError(f"TorchCartPole(num_envs={num_envs!r}): num_envs must be an int of 1 or more")
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.max_episode_steps = max_episode_steps
        high = np.array([self.x_threshold * 2, np.inf, self.theta_threshold_radians * 2, np.inf], np.float32)
        self.single_observation_space = gym.spaces.Box(-high, high, dtype=np.float32)
        self.single_action_space = gym.spaces.Discrete(2)
        self._keys = _keys(_fresh_seeds(num_envs), self.device)
        self._episodes = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        self._steps = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        self._state = torch.zeros(num_envs, 4, dtype=torch.float64, device=self.device)
        self._started = False
        self.closed = False

    def reset(self, seeds: Sequence[int] | None = None) -> torch.Tensor:
        """Every sub-env starts an episode: from ``seeds`` (one per sub-env), or the next of its stream."""
        if seeds is not None:
            if len(seeds) != self.num_envs:
                raise ConfigError(f"{self.describe()}: reset got {len(seeds)} seeds, not one per sub-env")
            self._keys = _keys(seeds, self.device)
            self._episodes.zero_()
        elif self._started:
            self._episodes += 1
        self._started = True
        self._state = self._first_states(self._episodes)
        self._steps.zero_()
        return self._state.to(torch.float32)

    def step(
        self, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One step of every sub-env; those that end start their next episode (``SAME_STEP``)."""
        state = self._dynamics(self._state, actions)
        x, theta = state[:, 0], state[:, 2]
        terminated = (x.abs() > self.x_threshold) | (theta.abs() > self.theta_threshold_radians)
        self._steps += 1
        if self.max_episode_steps is None:
            truncated = torch.zeros_like(terminated)
        else:
            truncated = self._steps >= self.max_episode_steps
        final = state.to(torch.float32)
        ended = terminated | truncated
        self._episodes += ended
        self._state = torch.where(ended[:, None], self._first_states(self._episodes), state)
        self._steps = torch.where(ended, 0, self._steps)
        reward = torch.ones(self.num_envs, dtype=torch.float32, device=self.device)
        return self._state.to(torch.float32), reward, terminated, truncated, final

    def rollout(
        self, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``T`` steps in one call: :class:`~pycollect.envs.DeviceBatchedEnv`'s own step loop.

        Declared so that the engine's whole-rollout path (random actions) runs in the tests without
        JAX; a subclass that sets ``rollout = DeviceBatchedEnv.rollout`` is stepped one step at a time.
        """
        return super().rollout(actions)  # type: ignore[return-value]  # a tensor observation, as step's

    def reset_envs(self, mask: torch.Tensor) -> torch.Tensor:
        """The sub-envs of ``mask`` start their next episode; every sub-env's observation."""
        self._episodes += mask
        self._state = torch.where(mask[:, None], self._first_states(self._episodes), self._state)
        self._steps = torch.where(mask, 0, self._steps)
        return self._state.to(torch.float32)

    def close(self) -> None:
        """Nothing to release; remembered for tests."""
        self.closed = True

    _STATE = ("_keys", "_episodes", "_steps", "_state", "_started")

    def get_state(self) -> dict[str, Any]:
        """Every sub-env's stream key, episode and step counters and dynamics state (cloned)."""
        return _saved(self, self._STATE)

    def set_state(self, state: Any) -> None:
        """Restore :meth:`get_state`'s state (a TorchCartPole's of as many sub-envs, or refused by name)."""
        _restore(self, state, self._STATE)

    def _first_states(self, episodes: torch.Tensor) -> torch.Tensor:
        """Each sub-env's first state of episode ``episodes`` (gymnasium: uniform in [-0.05, 0.05])."""
        return stream_uniform(self._keys, episodes, 4) * 0.1 - 0.05

    def _dynamics(self, state: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """The Euler step of gymnasium's CartPole, for every sub-env at once."""
        x, x_dot, theta, theta_dot = state.unbind(1)
        force = torch.where(actions == 1, self.force_mag, -self.force_mag).to(torch.float64)
        costheta, sintheta = torch.cos(theta), torch.sin(theta)
        temp = (force + self.polemass_length * theta_dot.square() * sintheta) / self.total_mass
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * costheta.square() / self.total_mass)
        )
        xacc = temp - self.polemass_length * thetaacc * costheta / self.total_mass
        return torch.stack(
            (
                x + self.tau * x_dot,
                x_dot + self.tau * xacc,
                theta + self.tau * theta_dot,
                theta_dot + self.tau * thetaacc,
            ),
            dim=1,
        )


class TorchPointMass(DeviceBatchedEnv):
    """A point pushed around the square ``[-1, 1]^2``: a ``Dict`` observation and a ``Box`` action.

    Observation ``{"position": Box(-1, 1, (2,)), "velocity": Box(-inf, inf, (2,))}`` (float32), action
    ``Box(-1, 1, (2,))`` (a force, float32). Reward: minus the distance to the centre.
    ``terminated`` when the point leaves the square, ``truncated`` after ``max_episode_steps``.
    ``final_observation`` is every sub-env's point after the step (clamped into the square),
    ended or not (:attr:`~pycollect.envs.DeviceBatchedEnv.final_observation_complete`).

    Args:
        num_envs: Sub-envs.
        device: Where every tensor lives.
        max_episode_steps: The time limit.
    """

    final_observation_complete = True  # the step's own point, for every sub-env

    def __init__(self, num_envs: int = 1, device: torch.device | str = "cpu", max_episode_steps: int = 50) -> None:
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.max_episode_steps = max_episode_steps
        self.single_observation_space = gym.spaces.Dict(
            {
                "position": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
                "velocity": gym.spaces.Box(-np.inf, np.inf, (2,), np.float32),
            }
        )
        self.single_action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self._keys = _keys(_fresh_seeds(num_envs), self.device)
        self._episodes = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        self._steps = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        self._position = torch.zeros(num_envs, 2, device=self.device)
        self._velocity = torch.zeros(num_envs, 2, device=self.device)

    def reset(self, seeds: Sequence[int] | None = None) -> dict[str, torch.Tensor]:
        """Every sub-env starts near the centre, at rest."""
        if seeds is not None:
            self._keys = _keys(seeds, self.device)
            self._episodes.zero_()
        else:
            self._episodes += 1
        self._position = self._starts(self._episodes)
        self._velocity = torch.zeros_like(self._position)
        self._steps.zero_()
        return self._observation()

    def step(self, actions: torch.Tensor) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor, Any]:
        """Push, move, end where the point left the square or ran out of time."""
        velocity = self._velocity + 0.1 * actions.clamp(-1.0, 1.0)
        position = self._position + 0.1 * velocity
        reward = -position.norm(dim=1)
        terminated = (position.abs() > 1.0).any(dim=1)
        self._steps += 1
        truncated = self._steps >= self.max_episode_steps
        final = {"position": position.clamp(-1.0, 1.0), "velocity": velocity}
        ended = terminated | truncated
        self._episodes += ended
        self._position = torch.where(ended[:, None], self._starts(self._episodes), final["position"])
        self._velocity = torch.where(ended[:, None], 0.0, velocity)
        self._steps = torch.where(ended, 0, self._steps)
        return self._observation(), reward, terminated, truncated, final

    def rollout(self, actions: torch.Tensor) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor, Any]:
        """``T`` steps in one call (the base class's step loop; see :meth:`TorchCartPole.rollout`)."""
        return super().rollout(actions)

    def reset_envs(self, mask: torch.Tensor) -> dict[str, torch.Tensor]:
        """The sub-envs of ``mask`` start again near the centre."""
        self._episodes += mask
        self._position = torch.where(mask[:, None], self._starts(self._episodes), self._position)
        self._velocity = torch.where(mask[:, None], 0.0, self._velocity)
        self._steps = torch.where(mask, 0, self._steps)
        return self._observation()

    _STATE = ("_keys", "_episodes", "_steps", "_position", "_velocity")

    def get_state(self) -> dict[str, Any]:
        """Every sub-env's stream key, episode and step counters, position and velocity (cloned)."""
        return _saved(self, self._STATE)

    def set_state(self, state: Any) -> None:
        """Restore :meth:`get_state`'s state (a TorchPointMass's of as many sub-envs, or refused by name)."""
        _restore(self, state, self._STATE)

    def _starts(self, episodes: torch.Tensor) -> torch.Tensor:
        return (stream_uniform(self._keys, episodes, 2) * 0.2 - 0.1).to(torch.float32)

    def _observation(self) -> dict[str, torch.Tensor]:
        return {"position": self._position.clone(), "velocity": self._velocity.clone()}


class HostCartPole(BatchedEnv):
    """A :class:`TorchCartPole` on the CPU as a numpy batched env, for the host engines.

    Its sub-envs are :class:`TorchCartPole`'s, value for value (the same tensors, converted with
    ``.numpy()``): ``Collector(HostCartPole, env_kwargs={"num_envs": N}, envs_per_worker=N)`` gives the
    batches ``Collector(TorchCartPole, engine="device", ...)`` gives, with the same settings.

    Args:
        num_envs: Sub-envs.
        max_episode_steps: The time limit (``None``: none).
    """

    autoreset_mode = AutoresetMode.SAME_STEP
    partial_reset = True

    def __init__(self, num_envs: int = 1, max_episode_steps: int | None = 500) -> None:
        super().__init__()
        self.env = TorchCartPole(num_envs, "cpu", max_episode_steps)
        self.num_envs = num_envs
        self.single_observation_space = self.env.single_observation_space
        self.single_action_space = self.env.single_action_space

    def step_batch(self, actions: Any) -> tuple[Any, Any, Any, Any, Mapping[str, Any]]:
        """:meth:`TorchCartPole.step`, in numpy; the final observations in ``infos["final_obs"]``."""
        observation, reward, terminated, truncated, final = self.env.step(torch.as_tensor(np.asarray(actions)))
        ended = (terminated | truncated).numpy()
        infos = {"final_obs": final.numpy(), "_final_obs": ended}
        return observation.numpy(), reward.numpy(), terminated.numpy(), truncated.numpy(), infos

    def reset_batch(
        self, seeds: Sequence[int | None] | None, mask: np.ndarray | None, options: Mapping[str, Any] | None = None
    ) -> tuple[Any, Mapping[str, Any]]:
        """:meth:`TorchCartPole.reset` (every sub-env) or :meth:`TorchCartPole.reset_envs` (those of ``mask``)."""
        if mask is not None:
            return self.env.reset_envs(torch.from_numpy(np.asarray(mask, bool))).numpy(), {}
        given = None if seeds is None else [int(seed) if seed is not None else 0 for seed in seeds]
        return self.env.reset(given).numpy(), {}

    def close_batch(self) -> None:
        """:meth:`TorchCartPole.close`."""
        self.env.close()


# -- checking that nothing leaves the device ----------------------------------------------

_HOST_METHODS = ("numpy", "cpu", "item", "tolist", "__bool__", "__int__", "__float__", "__index__", "__array__")
"""``torch.Tensor`` methods that convert to numpy or Python values, or move a tensor to the host."""

_READS = {"_local_scalar_dense", "nonzero", "masked_select", "argwhere", "equal", "is_nonzero", "allclose"}
"""aten ops whose result depends on values read on the host (on CUDA each waits for the device)."""


_INHERITED = object()


@contextlib.contextmanager
def forbid_host_transfers(device: torch.device | str) -> Iterator[None]:
    """Within: converting a tensor for the host, reading a value there or moving data off ``device`` raises.

    What is refused, with a :class:`~pycollect.ConformanceError` naming it:

    * ``Tensor.numpy``, ``.cpu``, ``.item``, ``.tolist``, ``bool()``, ``int()``, ``float()``,
      ``operator.index()`` and numpy's ``__array__`` of a tensor, and ``numpy.asarray`` (whatever
      device the tensor is on: on the CPU they copy nothing, but on a GPU each is a transfer that
      waits for the device);
    * every aten op that needs a value on the host (``item``, ``nonzero``, a boolean-mask index,
      ``masked_select``, ``unique``, ``equal``...), seen through a ``TorchDispatchMode``, so that
      the CPU run of a test catches what would stall a GPU;
    * a copy between two devices (``.to(other)``, ``copy_`` across devices);
    * on CUDA, also whatever ``torch.cuda.set_sync_debug_mode("error")`` catches.

    Args:
        device: The device everything must stay on.

    Raises:
        ConformanceError: Within the block, at the first refused call.
    """
    here = _indexed(device)
    saved: dict[tuple[Any, str], Any] = {}
    targets = [(torch.Tensor, name) for name in _HOST_METHODS] + [(np, "asarray")]
    for owner, name in targets:
        saved[(owner, name)] = owner.__dict__.get(name, _INHERITED)  # torch.Tensor inherits most of them
        setattr(owner, name, _refusing(f"{getattr(owner, '__name__', owner)}.{name}"))
    sync_mode = torch.cuda.get_sync_debug_mode() if here.type == "cuda" else None
    try:
        if here.type == "cuda":
            torch.cuda.set_sync_debug_mode("error")
        with _DeviceOnly(here):
            yield
    finally:
        if sync_mode is not None:
            torch.cuda.set_sync_debug_mode(sync_mode)
        for (owner, name), value in saved.items():
            if value is _INHERITED:
                delattr(owner, name)
            else:
                setattr(owner, name, value)


def _refusing(name: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise ConformanceError(f"{name} was called: a value was converted for the host, or moved off the device")

    return refuse


class _DeviceOnly(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch's class is untyped
    """Refuses aten ops that read values on the host or move data between devices (:func:`forbid_host_transfers`)."""

    def __init__(self, device: torch.device) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.device = device

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if name in _READS or name.startswith(("unique", "_unique")):
            raise ConformanceError(f"aten.{name} reads tensor values on the host")
        if name in ("index", "index_put", "index_put_"):
            indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
            if any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices):
                raise ConformanceError(f"aten.{name} with a boolean mask counts it on the host (use torch.where)")
        if name == "_to_copy" and kwargs.get("device") is not None and _indexed(kwargs["device"]) != self.device:
            raise ConformanceError(f"aten._to_copy moves a tensor to {kwargs['device']}, off {self.device}")
        if name == "copy_" and args[0].device != args[1].device:
            raise ConformanceError(f"aten.copy_ copies from {args[1].device} to {args[0].device}")
        return func(*args, **kwargs)


def _indexed(device: torch.device | str) -> torch.device:
    """``device`` with an index for CUDA (``cuda`` is the current CUDA device), as a tensor reports its own."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


class SeededArgmax(torch.nn.Module):
    """A deterministic CartPole policy for tests: a seeded linear layer, the larger of its two logits."""

    def __init__(self, seed: int = 3) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.linear = torch.nn.Linear(4, 2)
        with torch.no_grad():
            self.linear.weight.copy_(torch.randn(2, 4, generator=generator))
            self.linear.bias.copy_(torch.randn(2, generator=generator))

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        """The index of the larger logit, per row."""
        argmax: torch.Tensor = self.linear(observation).argmax(-1)
        return argmax
