"""A gymnax environment as a pycollect device env, stepped with torch tensors that share JAX's memory.

:class:`GymnaxDeviceEnv` holds the same sub-envs as :class:`~pycollect_jax.env.GymnaxBatchedEnv`
(one gymnax environment, its ``EnvParams``, the state and PRNG key of each of ``N`` sub-envs as
``[N, ...]`` JAX arrays) and steps them with the same vmapped functions
(:class:`~pycollect_jax.env.SubEnvFunctions`): the same seeds and actions give the same values
in both. What differs is the edge. Instead of numpy arrays, a step takes a torch tensor of
actions and returns torch tensors, converted with DLPack both ways, on the env's device (the CPU,
or the GPU JAX and torch share):

* actions: ``jax.dlpack.from_dlpack(actions)``, the tensor's memory as a JAX array. A
  ``Discrete`` space's actions are int64 tensors (gymnasium's dtype, the batch's), which JAX in
  its default 32-bit mode would copy into an int32 array: the int64 tensor is handed over as the
  int32 words it is made of (``actions.view(torch.int32)``, no copy) and the jitted step takes
  the low word of each (exact for any action of a ``Discrete`` space, whose values fit 32 bits);
* results: ``torch.from_dlpack(array)`` of each output, a tensor over the JAX array's buffer.

Nothing goes through numpy or the host: on the CPU the tensors are the JAX arrays' memory, on a
GPU they stay in GPU memory, and a step reads no value on the host (a sub-env's end, a partial
reset's mask: all decided inside the jitted call).

GPU: a torch CUDA device maps to the JAX GPU device of the same CUDA ordinal. DLPack orders the
work on the two libraries' streams: JAX's step waits for the stream that wrote the actions, and
torch's current stream waits for the step's results before any torch work that follows, so the
action tensor may be reused as soon as :meth:`GymnaxDeviceEnv.step` returns.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from pycollect.envs.device import DeviceBatchedEnv, DeviceObservation
from pycollect.exceptions import ConfigError
from pycollect_jax.env import SubEnvFunctions, check_saved, configure_jax, saved_arrays, seed_arrays

if TYPE_CHECKING:
    import torch

__all__ = ["GymnaxDeviceEnv", "jax_device", "torch_device"]


def torch_device(device: torch.device | str | None) -> torch.device:
    """The torch device a gymnax device env lives on: ``device``, the CPU when ``None``, CUDA with its index.

    Raises:
        ConfigError: Not a CPU or CUDA device (JAX has no counterpart of the others here).
    """
    import torch

    if device is None:
        return torch.device("cpu")
    try:
        asked = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ConfigError(f"device {device!r} for a gymnax device env is no torch device: {exc}") from exc
    if asked.type == "cuda" and asked.index is None:
        return torch.device("cuda", torch.cuda.current_device() if torch.cuda.is_available() else 0)
    if asked.type not in ("cpu", "cuda"):
        raise ConfigError(
            f"device {str(asked)!r} for a gymnax device env: JAX steps gymnax on the CPU or a CUDA GPU; "
            "pass 'cpu' or 'cuda[:index]'"
        )
    return asked


def jax_device(device: torch.device) -> Any:
    """The JAX device whose memory is torch's ``device``'s: JAX's CPU, or its GPU of the same CUDA ordinal.

    Args:
        device: A CPU or indexed CUDA torch device (:func:`torch_device`).

    Raises:
        ConfigError: A CUDA device, but JAX has no GPU (a CPU-only jaxlib, ``JAX_PLATFORMS=cpu``),
            or none of that ordinal; the message lists JAX's devices.
    """
    import jax

    if device.type == "cpu":
        return jax.devices("cpu")[0]
    try:
        gpus = list(jax.devices("gpu"))
    except RuntimeError as exc:
        raise ConfigError(
            f"device {str(device)!r} for a gymnax device env, but JAX has no GPU backend here ({_first_line(exc)}; "
            f"JAX's devices: {_devices()}): install a CUDA build of JAX (pip install 'jax[cuda12]') and leave "
            "JAX_PLATFORMS unset or including 'cuda', or collect on the CPU (device='cpu')"
        ) from exc
    for gpu in gpus:
        if getattr(gpu, "local_hardware_id", None) == device.index:
            return gpu
    if device.index is not None and 0 <= device.index < len(gpus):
        return gpus[device.index]
    raise ConfigError(
        f"device {str(device)!r} for a gymnax device env, but JAX's GPUs are {', '.join(map(str, gpus))}: "
        "JAX and torch see the same CUDA devices (CUDA_VISIBLE_DEVICES), so pass one of those ordinals"
    )


def dlpack_importer(device: torch.device, place: Any) -> Callable[[torch.Tensor], Any]:
    """What turns a torch tensor on ``device`` into a JAX array on ``place`` over the same memory, per step.

    ``jax.dlpack.from_dlpack`` does, but on every call it looks the device up again, asks
    for its stream (an exception on the CPU, which has none), and canonicalizes the dtype with a
    ``jnp.asarray``: about 55 us per step more than the import itself, measured on the 2-CPU
    machine with 4,096 CartPoles (a fifth of the step). The import underneath
    (``jax._src.lib._jax.dlpack_managed_tensor_to_buffer``, what ``from_dlpack`` calls) with
    the device and stream looked up once costs about 6 us. It is JAX's private API: it is used
    only where a probe at construction shows that it imports a tensor of the env's device
    without a copy; otherwise (another JAX, another signature) ``jax.dlpack.from_dlpack``. The
    tensors it gets are of canonical dtypes already (:class:`GymnaxDeviceEnv` makes them so), so
    the canonicalization it skips has nothing to do.

    Args:
        device: The torch device of the tensors.
        place: The JAX device of the same memory (:func:`jax_device`).

    Returns:
        ``importer(tensor) -> jax.Array``.
    """
    import jax
    import torch

    public: Callable[[torch.Tensor], Any] = jax.dlpack.from_dlpack
    try:
        convert = importlib.import_module("jax._src.lib")._jax.dlpack_managed_tensor_to_buffer
    except (ImportError, AttributeError):
        return public
    try:
        stream = place.get_stream_for_external_ready_events() if device.type == "cuda" else None
    except Exception:  # no stream to hand over: torch's __dlpack__ default
        stream = None
    probe = torch.arange(8, dtype=torch.int32, device=device)
    kind = int(probe.__dlpack_device__()[0])
    for extra in ((None, kind), (None,)):  # the device type argument is newer than the copy one

        def fast(tensor: torch.Tensor, extra: tuple[Any, ...] = extra) -> Any:
            return convert(tensor.__dlpack__(stream=stream), place, stream, *extra)

        try:
            array = fast(probe)
            shared = array.unsafe_buffer_pointer() == probe.data_ptr()
            if shared and array.shape == (8,) and array.dtype == np.int32 and array.devices() == {place}:
                return fast
        except Exception:  # any failure of the private path: the public one
            continue
    return public


def _devices() -> str:
    import jax

    try:
        return ", ".join(str(d) for d in jax.devices())
    except RuntimeError as exc:  # no backend at all
        return f"none ({_first_line(exc)})"


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


class GymnaxDeviceEnv(DeviceBatchedEnv):
    """``num_envs`` sub-envs of one gymnax environment, stepped with torch tensors that share JAX's memory.

    What :class:`~pycollect.envs.DeviceBatchedEnv` asks: a step takes ``[N, *action_shape]``
    actions on :attr:`device` (int64 for a ``Discrete`` space, float32 for a gymnax ``Box``) and
    returns ``(observation, reward, terminated, truncated, final_observation)`` on it (the
    observation's dtype, float32 rewards, bool flags), every sub-env stepped by one jitted,
    vmapped call that also resets those whose episode ended (``SAME_STEP``); ``reset_envs(mask)``
    resets the sub-envs of ``mask`` in one jitted call that never reads the mask on the host.
    The episodes are :class:`~pycollect_jax.env.GymnaxBatchedEnv`'s (the same functions of one
    sub-env, vmapped): termination apart from the time limit, sub-env ``i`` seeded with ``s``
    starting its key stream from ``jax.random.PRNGKey(s)``, an unseeded reset going on with the
    sub-env's own stream. ``final_observation`` is every sub-env's observation of the step, ended
    or not (:attr:`~pycollect.envs.DeviceBatchedEnv.final_observation_complete`): the collector
    stores it as the next observation with a plain copy.

    Args:
        env: A gymnax environment (``gymnax.make(id)[0]``).
        params: Its ``EnvParams``.
        num_envs: How many sub-envs.
        device: The torch device of every tensor in and out: the CPU (``None``, the default), or
            a CUDA device, whose JAX GPU (of the same ordinal) then holds the env.
        name: The env's id, for messages (``env.name`` if not given).
        seed: The start of the sub-envs' key streams before any seeded reset (``None``: fresh
            entropy).

    Raises:
        ConfigError: ``num_envs`` is not a positive int, or ``device`` is no CPU or CUDA device
            that JAX has.
        EnvCreationError: The env's spaces have no gymnasium counterpart, or its reset and step
            disagree on the state's structure.
    """

    final_observation_complete = True  # the step's own observation, for every sub-env (SubEnvFunctions.step)

    def __init__(
        self,
        env: Any,
        params: Any,
        num_envs: int,
        *,
        device: torch.device | str | None = None,
        name: str | None = None,
        seed: int | None = None,
    ) -> None:
        configure_jax()
        import jax
        import jax.numpy as jnp
        import torch

        if not isinstance(num_envs, int | np.integer) or isinstance(num_envs, bool) or num_envs < 1:
            raise ConfigError(f"a gymnax device env needs 1 or more sub-envs, got num_envs={num_envs!r}")
        self.env, self.num_envs = env, int(num_envs)
        self.name = name or str(getattr(env, "name", type(env).__name__))
        self.device = torch_device(device)
        self.jax_device = jax_device(self.device)
        """The JAX device holding the sub-envs' state (its memory is :attr:`device`'s)."""
        count = self.num_envs

        functions = SubEnvFunctions.of(env, params, self.name)
        self.single_observation_space = functions.observation_space
        self.single_action_space = functions.action_space
        self._single = functions.single

        # Actions: how a tensor of the action space's dtype becomes what gymnax's step takes.
        action_shape = (count, *functions.action_shape)
        taken = np.dtype(functions.action_dtype)
        given = np.dtype(self.single_action_space.dtype)
        canonical = np.dtype(jax.dtypes.canonicalize_dtype(given))
        # int64 in JAX's 32-bit mode: the tensor's int32 words, the low one of each taken (no copy)
        self._words = given.kind in "iu" and given.itemsize == 8 and canonical.itemsize == 4
        self._words = self._words and sys.byteorder == "little"
        # Anything else JAX would not take as it is (float64 in 32-bit mode): cast by torch, on the device
        self._cast: torch.dtype | None = None
        if not self._words and canonical != given:
            self._cast = torch.from_numpy(np.empty(0, canonical)).dtype
        words = self._words

        def actions_of(raw: Any) -> Any:
            if words:
                raw = raw.reshape(*action_shape, 2)[..., 0]  # little-endian: the low word first
            return jax.lax.convert_element_type(raw.reshape(action_shape), taken)

        step_all = jax.vmap(functions.step, in_axes=(0, 0, 0, None))
        reset_all = jax.vmap(functions.reset, in_axes=(0, 0, 0, 0, 0, 0, 0, None))

        def step(keys: Any, state: Any, raw: Any, params: Any) -> tuple[Any, ...]:
            return step_all(keys, state, actions_of(raw), params)  # type: ignore[no-any-return]

        def reset_masked(keys: Any, mask: Any, state: Any, obs: Any, params: Any) -> tuple[Any, ...]:
            none = jnp.zeros(count, jnp.uint32)
            return reset_all(keys, none, none, jnp.zeros(count, jnp.bool_), mask, state, obs, params)  # type: ignore[no-any-return]

        def rollout(keys: Any, state: Any, obs: Any, raw: Any, params: Any) -> tuple[Any, ...]:
            # T steps in one call: each step is step's (the same values), the outputs stacked [T, N, ...]
            def one(carry: tuple[Any, ...], raw_t: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
                keys, state, _ = carry
                keys, state, obs, final, reward, terminated, truncated = step(keys, state, raw_t, params)
                return (keys, state, obs), (obs, final, reward, terminated, truncated)

            return jax.lax.scan(one, (keys, state, obs), raw)

        self._step: Callable[..., Any] = jax.jit(step)
        self._rollout: Callable[..., Any] = jax.jit(rollout)
        self._reset: Callable[..., Any] = jax.jit(reset_all)
        self._reset_masked: Callable[..., Any] = jax.jit(reset_masked)

        def zeros(leaf: Any) -> Any:
            return jnp.zeros((count, *leaf.shape), leaf.dtype)

        place = self.jax_device
        with jax.default_device(place):
            self._params = jax.device_put(params, place)
            self._state = jax.device_put(jax.tree.map(zeros, functions.state), place)
            self._obs = jax.device_put(jax.tree.map(zeros, functions.obs), place)
            start = np.random.SeedSequence(seed).generate_state(2 * count, np.uint32)
            self._keys = jax.device_put(start.reshape(count, 2), place)
            # An unseeded reset of every sub-env, ready on the device: reset(None) reads nothing on the host
            self._unseeded = jax.device_put(
                (np.zeros(count, np.uint32), np.zeros(count, np.uint32), np.zeros(count, np.bool_)), place
            )
            self._everyone = jax.device_put(np.ones(count, np.bool_), place)
        self._to_jax: Callable[[Any], Any] = dlpack_importer(self.device, place)
        self._to_torch: Callable[[Any], torch.Tensor] = torch.utils.dlpack.from_dlpack

    # -- DeviceBatchedEnv ---------------------------------------------------------------------

    def describe(self) -> str:
        """The gymnax id, the size and the device: ``gymnax CartPole-v1 of 4096 sub-envs on cpu``."""
        return f"gymnax {self.name} of {self.num_envs} sub-envs on {self.device}"

    def reset(self, seeds: Sequence[int] | None = None) -> DeviceObservation:
        """Start an episode in every sub-env: from ``PRNGKey(seeds[i])``, or (``None``) the next key of its stream.

        Args:
            seeds: One seed per sub-env (the collector's first reset passes ``env_seeds(seed, N)``),
                as :meth:`GymnaxBatchedEnv.reset_batch <pycollect_jax.env.GymnaxBatchedEnv.reset_batch>`
                takes them: the same seeds start the same episodes in either env. ``None``: each
                sub-env goes on with its own stream (nothing is read on the host).

        Returns:
            Every sub-env's first observation, sharing the JAX array's memory.

        Raises:
            ConfigError: ``seeds`` are not one int in ``[0, 2**64)`` per sub-env.
        """
        import jax

        if seeds is None:
            low, high, seeded = self._unseeded
        else:
            low, high, seeded = jax.device_put(seed_arrays(seeds, self.num_envs, self.describe()), self.jax_device)
        self._keys, self._state, self._obs = self._reset(
            self._keys, low, high, seeded, self._everyone, self._state, self._obs, self._params
        )
        return self._torch(self._obs)

    def step(self, actions: torch.Tensor) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor, Any]:
        """Step every sub-env with its row of ``actions``; those whose episode ended start the next one.

        Args:
            actions: ``[N, *action_shape]`` on :attr:`device`, of the action space's dtype.

        Returns:
            ``(observation, reward, terminated, truncated, final_observation)`` on :attr:`device`:
            observations ``[N, *shape]`` (the new episode's first where one ended), float32
            rewards ``[N]``, bool flags ``[N]``, and the step's own observations (the ended
            episodes' last ones) as ``final_observation``. Each shares its JAX array's memory.
        """
        import torch

        if not actions.is_contiguous():
            actions = actions.contiguous()
        if self._words:
            actions = actions.view(torch.int32)
        elif self._cast is not None:
            actions = actions.to(self._cast)
        keys, state, obs, final, reward, terminated, truncated = self._step(
            self._keys, self._state, self._to_jax(actions), self._params
        )
        self._keys, self._state, self._obs = keys, state, obs
        to_torch = self._to_torch
        return self._torch(obs), to_torch(reward), to_torch(terminated), to_torch(truncated), self._torch(final)

    def rollout(self, actions: torch.Tensor) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor, Any]:
        """Step every sub-env ``T`` times with ``actions[t]`` at step ``t``, in one jitted ``lax.scan``.

        The values of ``T`` :meth:`step` calls (the same vmapped function of one sub-env, scanned):
        the engine calls it for a batch of random actions. One DLPack conversion of the actions in
        and one per output out, for the whole rollout, and one dispatch of a compiled call
        (compiled once per ``T``).

        Args:
            actions: ``[T, N, *action_shape]`` on :attr:`device`, of the action space's dtype.

        Returns:
            :meth:`step`'s outputs, each ``[T, N, ...]``: row ``t`` is step ``t``'s. Each shares its
            JAX array's memory.
        """
        import torch

        if not actions.is_contiguous():
            actions = actions.contiguous()
        if self._words:
            actions = actions.view(torch.int32)  # [T, N, *shape, 2] words as [T, 2 * N * ...]: scanned by row
        elif self._cast is not None:
            actions = actions.to(self._cast)
        (keys, state, obs), stacked = self._rollout(
            self._keys, self._state, self._obs, self._to_jax(actions), self._params
        )
        self._keys, self._state, self._obs = keys, state, obs
        observation, final, reward, terminated, truncated = stacked
        to_torch = self._to_torch
        return (
            self._torch(observation),
            to_torch(reward),
            to_torch(terminated),
            to_torch(truncated),
            self._torch(final),
        )

    def reset_envs(self, mask: torch.Tensor) -> DeviceObservation:
        """Start an episode in the sub-envs of ``mask`` (each from the next key of its stream); the others go on.

        Args:
            mask: ``[N]`` bool on :attr:`device`, never read on the host: every sub-env's reset is
                computed in the jitted call and kept where ``mask`` is set.

        Returns:
            Every sub-env's observation.
        """
        keep = self._to_jax(mask if mask.is_contiguous() else mask.contiguous())
        self._keys, self._state, self._obs = self._reset_masked(self._keys, keep, self._state, self._obs, self._params)
        return self._torch(self._obs)

    def get_state(self) -> dict[str, Any]:
        """Every sub-env's key, gymnax state and observation: numpy copies read from the device, between batches.

        Returns:
            :func:`~pycollect_jax.env.saved_arrays`' layout, the whole ``[N, ...]`` arrays.
        """
        return saved_arrays(self.name, self._trees())

    def set_state(self, state: Any) -> None:
        """Put every sub-env back where :meth:`get_state` found it (the arrays placed on :attr:`jax_device`).

        Raises:
            EnvStateError: ``state`` is not one of this gymnax env with as many sub-envs (another
                id, other shapes); nothing is changed then.
        """
        import jax

        check_saved(state, self.name, self._trees(), f"device env {self.describe()}")

        def placed(tree: Any, saved: list[np.ndarray]) -> Any:
            structure = jax.tree.structure(tree)
            return jax.tree.unflatten(structure, [jax.device_put(array, self.jax_device) for array in saved])

        self._keys = placed(self._keys, state["key"])
        self._state = placed(self._state, state["state"])
        self._obs = placed(self._obs, state["obs"])

    def close(self) -> None:
        """Drop the sub-envs' arrays (JAX frees them with the last reference; tensors handed out keep theirs)."""
        self._state = self._obs = self._keys = None

    def _trees(self) -> dict[str, Any]:
        return {"key": self._keys, "state": self._state, "obs": self._obs}

    def _torch(self, tree: Any) -> DeviceObservation:
        """JAX arrays as torch tensors over the same memory, in the observation's structure."""
        if self._single:
            return self._to_torch(tree)
        import jax

        converted: DeviceObservation = jax.tree.map(self._to_torch, tree)
        return converted

    # -- for tests and users --------------------------------------------------------------------

    @property
    def params(self) -> Any:
        """The ``EnvParams`` every sub-env steps with."""
        return self._params

    @property
    def state(self) -> Any:
        """The sub-envs' gymnax state: each leaf a ``[N, ...]`` JAX array on :attr:`jax_device`."""
        return self._state
