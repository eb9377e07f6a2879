"""A gymnax environment as a pycollect batched env: ``N`` sub-envs stepped by one jitted, vmapped call.

:class:`GymnaxBatchedEnv` holds one gymnax environment, its ``EnvParams``, and the state and
PRNG key of each of its ``N`` sub-envs as ``[N, ...]`` JAX arrays on the CPU. A step is one call
of ``jax.jit(jax.vmap(...))`` over gymnax's ``step_env`` (the transition, without gymnax's own
autoreset) and ``reset_env``: every sub-env steps, and those whose episode ended are reset in the
same call (``SAME_STEP`` autoreset, their final observation returned beside). Its results come
back to pycollect as numpy arrays, one ``np.asarray`` each (a view of JAX's CPU buffer, no copy):
no Python runs per sub-env in a step.

Termination and truncation: gymnax (1.0 on) keeps them apart. ``step_env`` returns the task's
own end of an episode (``is_terminated``: the pole fell, the game was lost, a bsuite chain's
fixed length was reached), which is ``terminated``; the time limit is ``is_truncated`` (``state.time
>= params.max_steps_in_episode``), which is ``truncated`` when the same step did not also
terminate. So ``terminated`` and ``truncated`` are never both true, and a step that ends the
episode on both counts is a termination (no value to bootstrap from).

Seeds: sub-env ``i`` reset with seed ``s`` starts its key stream from ``jax.random.PRNGKey(s)``
(``s`` in ``[0, 2**32)``, pycollect's own seeds; a larger one, which JAX's 32-bit mode would
truncate, is folded in: ``fold_in(PRNGKey(s % 2**32), s >> 32)``); a reset without a seed goes on
with the sub-env's own stream. The same seeds give the same episodes.

JAX itself is imported when the first env is built, not with this module; see
:func:`configure_jax` for the settings of a pycollect worker process.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from pycollect.envs.batched import BatchedEnv
from pycollect.exceptions import ConfigError, EnvCreationError, EnvStateError

__all__ = [
    "OPT_OUT",
    "WORKER_XLA_FLAGS",
    "GymnaxBatchedEnv",
    "SubEnvFunctions",
    "check_saved",
    "configure_jax",
    "gymnasium_space",
    "saved_arrays",
    "seed_arrays",
]

WORKER_XLA_FLAGS = ("--xla_cpu_multi_thread_eigen=false",)
"""XLA flags a pycollect worker gets: XLA's CPU operations on the calling thread (see :func:`configure_jax`)."""

OPT_OUT = "PYCOLLECT_JAX_CONFIGURE"
"""``PYCOLLECT_JAX_CONFIGURE=0`` in the trainer's environment: :func:`configure_jax` changes nothing in workers."""

_WORKER_VARIABLE = "PYCOLLECT_WORKER"  # set in every pycollect worker process (pycollect's worker contract)
_SEED_LIMIT = 2**64
_configured = False  # whether configure_jax configured JAX in this process


def configure_jax() -> bool:
    """Settle how JAX runs in a pycollect worker process, before JAX is first imported there.

    Workers start from pycollect's fork server, which never imports JAX: each worker imports it
    fresh, when its first env is built, and this runs first. In a worker (``PYCOLLECT_WORKER``
    in the environment) that has not imported JAX yet, unless ``PYCOLLECT_JAX_CONFIGURE=0``:

    * ``JAX_PLATFORMS=cpu`` (unless set): the envs run on the CPU, and no worker probes for or
      claims memory on an accelerator (JAX preallocates most of a GPU's memory, which a policy
      on that GPU needs; pycollect hides CUDA from workers without a CUDA placement anyway);
    * ``jax_cpu_enable_async_dispatch`` off: a jitted call computes before it returns. The
      step's results are read at once (``np.asarray``), so dispatching to another thread only
      adds a hand-off: stepping 8 CartPoles took half the time synchronously (2.1x the steps
      per second, 2.5x with 64 sub-envs, 1.2x with 512; 1.4x for 64 Breakout-MinAtar; two
      workers on two CPUs);
    * :data:`WORKER_XLA_FLAGS` added to ``XLA_FLAGS`` (each unless ``XLA_FLAGS`` names it):
      XLA's CPU operations run on the calling thread rather than on a pool as wide as the
      machine, as pycollect's workers run torch and OpenMP (``OMP_NUM_THREADS=1``): the workers
      together are the parallelism. Measured with synchronous dispatch, as above: never fewer
      steps per second, up to 8 % more (without synchronous dispatch the flag alone was mixed).

    Anywhere else (the trainer, an in-process collector) nothing is changed: JAX is the user's
    to configure there, and this plugin only keeps its own arrays on JAX's CPU device.

    Returns:
        Whether JAX was configured here, by this call or an earlier one (``False``: not a worker,
        JAX imported before, or opted out).
    """
    global _configured
    if _configured:
        return True
    if "jax" in sys.modules or _WORKER_VARIABLE not in os.environ or os.environ.get(OPT_OUT) == "0":
        return False
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    flags = os.environ.get("XLA_FLAGS", "")
    added = [flag for flag in WORKER_XLA_FLAGS if flag.split("=")[0] not in flags]
    if added:
        os.environ["XLA_FLAGS"] = " ".join([flags, *added]).strip()
    import jax

    config: Any = jax.config  # untyped in JAX's stubs
    config.update("jax_cpu_enable_async_dispatch", False)
    _configured = True
    return True


# -- spaces -------------------------------------------------------------------------------------


def gymnasium_space(space: Any, returned: Any = None) -> gym.Space[Any]:
    """A gymnax space as a gymnasium space.

    Args:
        space: A gymnax ``Discrete``, ``Box``, ``Dict`` or ``Tuple`` space.
        returned: For an observation space, what the env returns (a ``jax.ShapeDtypeStruct``, or
            a dict or tuple of them): its shape and dtype are the space's, so that the space
            holds exactly what a step gives (gymnax's spaces do not always say: Catch-bsuite
            declares int32 and returns float32). ``None`` for an action space: gymnax's own
            shape and dtype, but a ``Discrete`` is gymnasium's int64 one (the env casts actions
            to gymnax's int32).

    Returns:
        ``Discrete(n)``, or a ``Box`` whose bounds are gymnax's broadcast to the shape, a float
        bound at or beyond float32's largest value (gymnax's way of writing "unbounded") made
        infinite; ``Dict`` and ``Tuple`` of them.

    Raises:
        EnvCreationError: A space of another kind.
    """
    kind = type(space).__name__
    if kind == "Discrete":
        dtype = np.int64 if returned is None else np.dtype(returned.dtype).type
        return gym.spaces.Discrete(int(space.n), dtype=dtype)
    if kind == "Box":
        shape = tuple(int(n) for n in (space.shape if returned is None else returned.shape))
        dtype = np.dtype(space.dtype if returned is None else returned.dtype)
        return gym.spaces.Box(_bound(space.low, shape, dtype), _bound(space.high, shape, dtype), shape, dtype)
    if kind == "Dict":
        return gym.spaces.Dict(
            [
                (key, gymnasium_space(sub, None if returned is None else returned[key]))
                for key, sub in space.spaces.items()
            ]
        )
    if kind == "Tuple":
        return gym.spaces.Tuple(
            [gymnasium_space(sub, None if returned is None else returned[n]) for n, sub in enumerate(space.spaces)]
        )
    raise EnvCreationError(f"gymnax space {space!r} ({kind}) has no gymnasium counterpart here")


def _bound(value: Any, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
    """A gymnax bound as a ``shape`` array of ``dtype``: unbounded floats infinite, integers clipped to the dtype."""
    array = np.broadcast_to(np.asarray(value, dtype=np.float64), shape)
    if dtype == np.bool_:
        return np.broadcast_to(np.asarray(array != 0), shape).copy()
    if np.issubdtype(dtype, np.floating):
        largest = float(np.finfo(np.float32).max)
        array = np.where(array >= largest, np.inf, np.where(array <= -largest, -np.inf, array))
        return array.astype(dtype)
    info = np.iinfo(dtype)
    return np.clip(np.nan_to_num(array, posinf=info.max, neginf=info.min), info.min, info.max).astype(dtype)


# -- one sub-env's functions, shared by the host and the device env ---------------------------


def seed_arrays(
    seeds: Sequence[int | None] | None, count: int, owner: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``seeds`` (one per sub-env, ``None`` where a sub-env goes on with its stream) as the reset's arrays.

    Args:
        seeds: One seed per sub-env or ``None`` (none seeded).
        count: The number of sub-envs.
        owner: The env, for messages (``"batched env gymnax CartPole-v1 of 8 sub-envs"``).

    Returns:
        ``(low, high, seeded)``: each seed's low and high 32 bits (``uint32 [count]``) and which
        sub-envs have one (``bool [count]``).

    Raises:
        ConfigError: ``seeds`` are not one per sub-env, or a seed is not an int in ``[0, 2**64)``.
    """
    low, high = np.zeros(count, np.uint32), np.zeros(count, np.uint32)
    seeded = np.zeros(count, np.bool_)
    if seeds is None:
        return low, high, seeded
    if len(seeds) != count:
        raise ConfigError(f"{owner} got {len(seeds)} seeds for {count} sub-envs")
    for i, seed in enumerate(seeds):
        if seed is None:
            continue
        if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or not 0 <= seed < _SEED_LIMIT:
            raise ConfigError(f"seed {seed!r} of sub-env {i}: seeds are ints in [0, 2**64)")
        seeded[i], low[i], high[i] = True, int(seed) & 0xFFFFFFFF, int(seed) >> 32
    return low, high, seeded


@dataclasses.dataclass(frozen=True)
class SubEnvFunctions:
    """One sub-env's step and reset, as both batched envs vmap and jit them, and what they take and return.

    :class:`GymnaxBatchedEnv` and :class:`~pycollect_jax.device.GymnaxDeviceEnv` vmap these same
    functions over their sub-envs, so that the same seeds and actions give the same values in
    either. Build with :meth:`of`.

    Attributes:
        step: ``step(key, state, action, params) -> (key, state, obs, final_obs, reward,
            terminated, truncated)``: gymnax's ``step_env``, and ``reset_env`` where the episode
            ended (``SAME_STEP``): ``obs`` the reset observation there, ``final_obs`` the step's.
            ``reward`` is float32, the flags bool (``truncated``: the time limit without a
            termination).
        reset: ``reset(key, low, high, seeded, reset, state, obs, params) -> (key, state, obs)``:
            where ``reset``, a new episode, from ``PRNGKey(low)`` (``high`` folded in when not
            zero) where ``seeded``, else from the sub-env's own key; elsewhere all as it was.
        state: One sub-env's state (a tree of ``jax.ShapeDtypeStruct``).
        obs: One sub-env's observation (a ``jax.ShapeDtypeStruct``, or a dict or tuple of them).
        observation_space: The gymnasium observation space (shape and dtype of ``obs``).
        action_space: The gymnasium action space (a ``Discrete`` is int64).
        action_dtype: The dtype gymnax's step takes (int32 for a ``Discrete`` space).
        action_shape: One sub-env's action shape.
        single: Whether the observation is one array (not a dict or tuple of them).
    """

    step: Callable[..., Any]
    reset: Callable[..., Any]
    state: Any
    obs: Any
    observation_space: gym.Space[Any]
    action_space: gym.Space[Any]
    action_dtype: np.dtype[Any]
    action_shape: tuple[int, ...]
    single: bool

    @classmethod
    def of(cls, env: Any, params: Any, name: str) -> SubEnvFunctions:
        """Trace ``env``'s reset and step (``jax.eval_shape``: nothing runs) and build the functions.

        Args:
            env: A gymnax environment.
            params: Its ``EnvParams``.
            name: The env's id, for messages.

        Raises:
            EnvCreationError: The env's spaces have no gymnasium counterpart, or its reset and step
                disagree on the state's structure.
        """
        import jax
        import jax.numpy as jnp

        shaped: Any = jax.ShapeDtypeStruct  # untyped in JAX's stubs
        action_space = env.action_space(params)
        action = shaped(tuple(action_space.shape), action_space.dtype)
        key = shaped((2,), jnp.uint32)
        _, reset_state = jax.eval_shape(env.reset_env, key, params)
        obs, state, *_ = jax.eval_shape(env.step_env, key, reset_state, action, params)
        structures: list[Any] = [jax.tree.structure(reset_state), jax.tree.structure(state)]
        if structures[0] != structures[1]:
            raise EnvCreationError(
                f"gymnax env {name}: reset_env and step_env return states of different structures "
                f"({structures[0]} and {structures[1]})"
            )

        # Each leaf of the state and observation keeps the dtype a step gives it: the jitted
        # functions take what they return, so each is traced and compiled once.
        state_types = jax.tree.map(lambda leaf: leaf.dtype, state)
        obs_types = jax.tree.map(lambda leaf: leaf.dtype, obs)

        def typed(tree: Any, types: Any) -> Any:
            return jax.tree.map(lambda leaf, dtype: jax.lax.convert_element_type(leaf, dtype), tree, types)

        def pick(where: Any, new: Any, old: Any) -> Any:
            return jax.tree.map(lambda a, b: jnp.where(where, a, b), new, old)

        def step_one(key: Any, state: Any, action: Any, params: Any) -> tuple[Any, ...]:
            key, step_key, reset_key = jax.random.split(key, 3)
            obs_st, state_st, reward, terminated, _ = env.step_env(step_key, state, action, params)
            terminated = jnp.asarray(terminated, jnp.bool_).reshape(())
            time_up = jnp.asarray(env.is_truncated(state_st, params), jnp.bool_).reshape(())
            truncated = time_up & ~terminated
            obs_re, state_re = env.reset_env(reset_key, params)
            ended = terminated | truncated
            state = pick(ended, typed(state_re, state_types), typed(state_st, state_types))
            final = typed(obs_st, obs_types)
            obs = pick(ended, typed(obs_re, obs_types), final)
            reward = jnp.asarray(reward, jnp.float32).reshape(())
            return key, state, obs, final, reward, terminated, truncated

        def reset_one(
            key: Any, low: Any, high: Any, seeded: Any, reset: Any, state: Any, obs: Any, params: Any
        ) -> tuple[Any, ...]:
            seed_key = jax.random.PRNGKey(low)  # a seed past 32 bits: its high half folded in
            seed_key = jnp.where(high != 0, jax.random.fold_in(seed_key, high), seed_key)
            key = jnp.where(seeded, seed_key, key)
            next_key, reset_key = jax.random.split(key)
            obs_re, state_re = env.reset_env(reset_key, params)
            key = jnp.where(reset, next_key, key)
            return key, pick(reset, typed(state_re, state_types), state), pick(reset, typed(obs_re, obs_types), obs)

        return cls(
            step=step_one,
            reset=reset_one,
            state=state,
            obs=obs,
            observation_space=gymnasium_space(env.observation_space(params), obs),
            action_space=gymnasium_space(action_space),
            action_dtype=np.dtype(action_space.dtype),
            action_shape=tuple(int(n) for n in action_space.shape),
            single=not isinstance(obs, dict | tuple | list),
        )


# -- the env -------------------------------------------------------------------------------------


def saved_arrays(name: str, trees: Mapping[str, Any], index: int | None = None) -> dict[str, Any]:
    """A gymnax env's state: its id and numpy copies of every leaf of ``trees``, or of each leaf's row ``index``.

    Args:
        name: The gymnax id (a state of another id is refused on restore).
        trees: ``{"key": keys, "state": gymnax state, "obs": observations}``, each a JAX array or tree
            of ``[N, ...]`` arrays.
        index: A sub-env's row only (``None``: the whole arrays).

    Returns:
        ``{"env": name, "key": [leaves], "state": [leaves], "obs": [leaves]}``, leaves in ``jax.tree`` order.
    """
    import jax

    def copy(leaf: Any) -> np.ndarray:
        array = np.asarray(leaf)
        return np.array(array if index is None else array[index])

    return {"env": name, **{part: [copy(leaf) for leaf in jax.tree.leaves(tree)] for part, tree in trees.items()}}


def check_saved(state: Any, name: str, trees: Mapping[str, Any], env: str, index: int | None = None) -> None:
    """Refuse a :func:`saved_arrays` state that ``trees`` (or their row ``index``) cannot take.

    Args:
        state: The state to restore.
        name: The env's gymnax id.
        trees: The env's arrays, as :func:`saved_arrays` takes them.
        env: The env's description, for messages.
        index: The sub-env whose rows would take it (``None``: the whole arrays).

    Raises:
        EnvStateError: ``state`` is not such a state, is of another gymnax id, or its arrays have
            other shapes or dtypes than the env's (both named).
    """
    import jax

    what = f"a {'sub-env ' if index is not None else ''}state of {env}"
    if not isinstance(state, dict) or set(state) != {"env", *trees}:
        raise EnvStateError(f"not {what}: got {type(state).__name__}")
    if state["env"] != name:
        raise EnvStateError(f"a state of gymnax {state['env']} cannot be restored into {env}")
    kind, skip = ("arrays", 0) if index is None else ("rows", 1)
    for part, tree in trees.items():
        want = [(tuple(leaf.shape[skip:]), np.dtype(leaf.dtype)) for leaf in jax.tree.leaves(tree)]
        got = [(np.shape(array), np.asarray(array).dtype) for array in state[part]]
        if got != want:
            raise EnvStateError(f"{what} cannot hold this one: its {part} {kind} are {got}, not {want}")


class GymnaxBatchedEnv(BatchedEnv):
    """``num_envs`` sub-envs of one gymnax environment, stepped by one jitted, vmapped call.

    Autoreset ``SAME_STEP`` (a sub-env whose episode ends is reset in the step: its final
    observation in ``infos["final_obs"]``, masked by ``infos["_final_obs"]``, the reset one as its
    observation) and partial resets (``reset_batch`` with a mask resets those sub-envs only).
    gymnax's step info (``{"discount": ...}`` for most envs, which ``terminated`` already says)
    is not passed on: a step's infos hold the final observations only, so pycollect stores the
    batch whole.

    Args:
        env: A gymnax environment (``gymnax.make(id)[0]``).
        params: Its ``EnvParams`` (``gymnax.make(id)[1]``, or changed with ``params.replace``).
        num_envs: How many sub-envs.
        name: The env's id, for messages (``env.name`` if not given).
        seed: The start of the sub-envs' key streams before any seeded reset (``None``: fresh
            entropy, as an unseeded gymnasium env).

    Raises:
        EnvCreationError: The env's spaces have no gymnasium counterpart, or its reset and step
            disagree on the state's structure.
    """

    autoreset_mode = AutoresetMode.SAME_STEP
    partial_reset = True

    def __init__(self, env: Any, params: Any, num_envs: int, *, name: str | None = None, seed: int | None = None):
        super().__init__()
        configured = configure_jax()
        import jax
        import jax.numpy as jnp

        if num_envs < 1:
            raise ConfigError(f"a gymnax batched env needs 1 or more sub-envs, got {num_envs}")
        self.env, self.num_envs = env, int(num_envs)
        self.name = name or str(getattr(env, "name", type(env).__name__))
        self.metadata = {"render_modes": [], "autoreset_mode": AutoresetMode.SAME_STEP}
        self._device = jax.devices("cpu")[0]
        config: Any = jax.config  # untyped in JAX's stubs
        self.jax_runtime: dict[str, Any] = {
            "configured": configured,
            "device": str(self._device),
            "async_dispatch": bool(config.read("jax_cpu_enable_async_dispatch")),
            "xla_flags": os.environ.get("XLA_FLAGS", ""),
        }
        """How JAX runs here: whether :func:`configure_jax` configured it, the device, dispatch, ``XLA_FLAGS``."""

        functions = SubEnvFunctions.of(env, params, self.name)
        self.single_observation_space = functions.observation_space
        self.single_action_space = functions.action_space
        self._action_dtype = functions.action_dtype
        self._action_shape = (self.num_envs, *functions.action_shape)
        self._single = functions.single
        self._step: Callable[..., Any] = jax.jit(jax.vmap(functions.step, in_axes=(0, 0, 0, None)))
        self._reset: Callable[..., Any] = jax.jit(jax.vmap(functions.reset, in_axes=(0, 0, 0, 0, 0, 0, 0, None)))
        state, obs = functions.state, functions.obs

        def zeros(leaf: Any) -> Any:
            return jnp.zeros((self.num_envs, *leaf.shape), leaf.dtype)

        with jax.default_device(self._device):
            self._params = jax.device_put(params, self._device)
            self._state = jax.device_put(jax.tree.map(zeros, state), self._device)
            self._obs = jax.device_put(jax.tree.map(zeros, obs), self._device)
            start = np.random.SeedSequence(seed).generate_state(2 * self.num_envs, np.uint32)
            self._keys = jax.device_put(start.reshape(self.num_envs, 2), self._device)

    # -- BatchedEnv ---------------------------------------------------------------------------

    def describe(self) -> str:
        """The gymnax id and the size: ``gymnax CartPole-v1 of 8 sub-envs``."""
        return f"gymnax {self.name} of {self.num_envs} sub-envs"

    def step_batch(self, actions: Any) -> tuple[Any, Any, Any, Any, Mapping[str, Any]]:
        """Step every sub-env with its row of ``actions``, resetting those whose episode ended.

        Returns:
            ``(observations, rewards, terminated, truncated, infos)``: numpy arrays of ``[N, *shape]``
            (the reset observation where a sub-env's episode ended), float32 ``[N]`` and bool ``[N]``;
            ``infos`` is ``{}``, or ``{"final_obs": [N, *shape], "_final_obs": ended}`` where some
            episode ended (rows of the other sub-envs: their observation, not a final one).
        """
        action = np.asarray(actions, dtype=self._action_dtype).reshape(self._action_shape)
        keys, state, obs, final, reward, terminated, truncated = self._step(
            self._keys, self._state, action, self._params
        )
        self._keys, self._state, self._obs = keys, state, obs
        terminated, truncated = np.asarray(terminated), np.asarray(truncated)
        ended = terminated | truncated
        infos: dict[str, Any] = {}
        if ended.any():
            infos = {"final_obs": self._numpy(final), "_final_obs": ended}
        return self._numpy(obs), np.asarray(reward), terminated, truncated, infos

    def reset_batch(
        self, seeds: Sequence[int | None] | None, mask: np.ndarray | None, options: Mapping[str, Any] | None = None
    ) -> tuple[Any, Mapping[str, Any]]:
        """Reset the sub-envs of ``mask`` (all: ``None``); sub-env ``i`` with ``seeds[i]`` where one is given.

        Returns:
            Every sub-env's observation (those not reset as they were) and ``{}``.

        Raises:
            ConfigError: ``options`` are given (gymnax resets take none), a seed is not an int
                in ``[0, 2**64)``, or ``seeds`` or ``mask`` are not one per sub-env.
        """
        if options:
            raise ConfigError(f"batched env {self.describe()} takes no reset options ({dict(options)!r})")
        count = self.num_envs
        reset = np.ones(count, np.bool_) if mask is None else np.asarray(mask, np.bool_)
        if reset.shape != (count,):
            raise ConfigError(f"batched env {self.describe()} got a reset mask of shape {reset.shape}, not ({count},)")
        low, high, seeded = seed_arrays(seeds, count, f"batched env {self.describe()}")
        self._keys, self._state, self._obs = self._reset(
            self._keys, low, high, seeded & reset, reset, self._state, self._obs, self._params
        )
        return self._numpy(self._obs), {}

    def close_batch(self) -> None:
        """Drop the sub-envs' arrays (JAX frees them with the last reference)."""
        self._state = self._obs = self._keys = None

    # -- env states (snapshots: checkpoints with env states, crash replay) -------------------

    def sub_env_state(self, index: int) -> Any:
        """Sub-env ``index``'s row of every array its future depends on: its key, its gymnax state, its observation.

        Returns:
            :func:`saved_arrays`' layout, each leaf the sub-env's row.
        """
        return saved_arrays(self.name, self._trees(), index)

    def set_sub_env_state(self, index: int, state: Any) -> None:
        """Put sub-env ``index``'s rows back (:meth:`sub_env_state`); the other sub-envs are untouched.

        Raises:
            EnvStateError: ``state`` is not a sub-env state of this gymnax env (one of another id,
                of other shapes, or not a state at all); nothing is changed then.
        """
        import jax

        check_saved(state, self.name, self._trees(), f"batched env {self.describe()}", index)

        def restored(tree: Any, saved: list[np.ndarray]) -> Any:
            leaves, structure = jax.tree.flatten(tree)
            return jax.tree.unflatten(
                structure, [leaf.at[index].set(row) for leaf, row in zip(leaves, saved, strict=True)]
            )

        self._keys = restored(self._keys, state["key"])
        self._state = restored(self._state, state["state"])
        self._obs = restored(self._obs, state["obs"])

    def _trees(self) -> dict[str, Any]:
        return {"key": self._keys, "state": self._state, "obs": self._obs}

    def _numpy(self, tree: Any) -> Any:
        """JAX arrays as numpy ones (a view of each CPU buffer), in the observation's structure."""
        if self._single:
            return np.asarray(tree)
        import jax

        return jax.tree.map(np.asarray, tree)

    # -- for tests and users --------------------------------------------------------------------

    @property
    def params(self) -> Any:
        """The ``EnvParams`` every sub-env steps with."""
        return self._params

    @property
    def state(self) -> Any:
        """The sub-envs' gymnax state: each leaf a ``[N, ...]`` JAX array."""
        return self._state
