"""Environment state: snapshots from which an env continues exactly as it would have.

A snapshot (:func:`get_env_state`) holds everything an env's future depends on: restored
(:func:`set_env_state`) into the same env, or into a fresh one built the same way whatever it
did before, the env returns the same observations, rewards, flags and infos for the same
actions, and draws the same random numbers. Checkpoints with env states and crash replay are
built on it; env backends expose it as :meth:`~pycollect.envs.EnvBackend.get_state`,
:meth:`~pycollect.envs.EnvBackend.set_state` and :meth:`~pycollect.envs.EnvBackend.snapshot_refusal`.

A gymnasium env is saved layer by layer, from the outermost wrapper in, each layer saving what is
its own:

* gymnasium's wrappers that keep state (``TimeLimit``'s elapsed steps, ``RecordEpisodeStatistics``'
  running episode and queues, ``FrameStackObservation``'s frames, ``AtariPreprocessing``'s
  buffers and lives, ``NormalizeObservation``/``NormalizeReward``'s running statistics, and
  more: see ``docs/env-state.md``) save those attributes; wrappers that only transform (with no
  attribute that changes) are passed through, and so is a wrapper of any class that has no
  attributes of its own;
* a layer (wrapper or env) that implements :class:`SnapshotEnv` saves itself: a wrapper its own
  part (pycollect goes on inside it), an env everything;
* the env inside: classic control and toy text envs (their state attributes and random
  stream), gymnasium's MuJoCo envs (the simulation's whole ``MjData`` and the random stream) and
  ALE's Atari envs (``cloneState(include_rng=True)`` and the random stream; without ALE's sticky
  actions, whose repeated action ALE keeps outside that state: ``gymnasium.wrappers.StickyAction``
  gives sticky actions that are saved).

Anything else is refused, naming the part that cannot be saved: a wrapper class with attributes
pycollect does not know, an env of another kind (Box2D's among them). :func:`snapshot_refusal`
says why; :func:`check_snapshots` raises :class:`~pycollect.EnvStateError` for a feature that
needs snapshots.
"""

from __future__ import annotations

import abc
import copy
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np

from pycollect.exceptions import EnvStateError

__all__ = [
    "FORMAT",
    "EnvState",
    "SnapshotEnv",
    "check_snapshots",
    "get_env_state",
    "rng_state",
    "set_env_state",
    "set_rng_state",
    "snapshot_refusal",
]

FORMAT = 1
"""The layout of an :class:`EnvState`; a state of another format is refused."""


@runtime_checkable
class SnapshotEnv(Protocol):
    """An env (or a wrapper) that saves and restores its own state.

    Implement both methods on an env pycollect cannot save by itself (a simulator of your own, a
    plugin's env) to make it snapshot-able. ``get_state()`` returns a picklable value that does
    not share mutable objects with the env (copy arrays and lists); ``set_state(state)`` puts the
    env back where it was then, so that from there on it returns the same observations, rewards,
    flags and infos for the same actions and draws the same random numbers (its ``np_random``
    included), whatever the env did before: it may be a fresh env built the same way, reset with
    another seed or never reset. ``set_state`` may be given the same state more than once.

    An env implementing it saves everything inside it. A ``gymnasium.Wrapper`` implementing it
    saves only its own part: pycollect saves the wrappers and the env inside it as usual.

    Optionally, a ``snapshot_refusal()`` method (not part of the protocol's check) returns why
    this instance cannot be saved after all (a str naming the culprit), or ``None``: an env
    class that wraps simulators of several kinds refuses those it cannot save with it, before
    a feature that needs snapshots starts.
    """

    def get_state(self) -> Any:
        """Everything the env's future depends on, picklable and not shared with the env."""

    def set_state(self, state: Any) -> None:
        """Continue from ``state``, a value :meth:`get_state` returned (of an env built the same way)."""


@dataclass(frozen=True)
class EnvState:
    """A snapshot of an env, from :func:`get_env_state`; restore it with :func:`set_env_state`.

    Picklable (what it holds is numbers, arrays, containers, numpy random states and, for ALE,
    ALE's own picklable state).

    Attributes:
        format: :data:`FORMAT` when it was taken.
        layers: The qualified class name of each layer, from the outermost wrapper to the env.
        parts: Each layer's own state, in the order of :attr:`layers` (``None`` for a layer that
            keeps none).
    """

    format: int
    layers: tuple[str, ...]
    parts: tuple[Any, ...]

    @property
    def env(self) -> str:
        """The qualified class name of the env inside the wrappers."""
        return self.layers[-1]

    def __repr__(self) -> str:
        return f"EnvState(format={self.format}, layers={_chain(self.layers)})"


# -- the public functions -------------------------------------------------------------------


def snapshot_refusal(env: Any) -> str | None:
    """Why ``env`` cannot be snapshot, naming the part that cannot; ``None`` if it can.

    Cheap: nothing is copied.
    """
    plan = _plan(env)
    return plan if isinstance(plan, str) else None


def check_snapshots(env: Any, what: str) -> None:
    """Raise if ``env`` cannot be snapshot, saying which feature needed it.

    Args:
        env: The env.
        what: The feature that needs snapshots, for the message (``"crash replay"``).

    Raises:
        EnvStateError: ``env`` cannot be snapshot; the message names ``what`` and the part of
            the env that cannot be saved.
    """
    why = snapshot_refusal(env)
    if why is not None:
        raise EnvStateError(f"{what} needs to save the env's state, but {why}")


def get_env_state(env: Any) -> EnvState:
    """A snapshot of ``env``: every layer's state, from the outermost wrapper in.

    Raises:
        EnvStateError: ``env`` cannot be snapshot (the message names the part that cannot).
    """
    layers = _layers_or_raise(env)
    return EnvState(
        FORMAT,
        tuple(_qualified(obj) for obj, _ in layers),
        tuple(saver.get(obj) for obj, saver in layers),
    )


def set_env_state(env: Any, state: EnvState) -> None:
    """Restore a snapshot into ``env``, an env built the same way as the one it was taken of.

    Every layer pycollect saves itself is checked before any is changed, and the layers are
    restored from the env outwards: a state that does not fit is refused and leaves ``env`` as
    it was (a wrapper in the middle that implements :class:`SnapshotEnv` and refuses in its own
    ``set_state`` is the exception: the layers inside it are restored by then).

    Raises:
        EnvStateError: ``state`` is not an :class:`EnvState`, is of another format, was taken of
            an env of other classes (both chains named) or of another kind of the same class
            (another ALE game, another MuJoCo model: both named); or ``env`` cannot be snapshot.
    """
    if not isinstance(state, EnvState):
        raise EnvStateError(f"not an env state (from get_env_state): got a {type(state).__name__}")
    if state.format != FORMAT:
        raise EnvStateError(
            f"an env state of format {state.format} cannot be restored by this pycollect, which reads format {FORMAT}"
        )
    layers = _layers_or_raise(env)
    names = tuple(_qualified(obj) for obj, _ in layers)
    if names != state.layers:
        raise EnvStateError(
            f"a state of {_short(state.env)} ({_chain(state.layers)}) cannot be restored into "
            f"{_short(names[-1])} ({_chain(names)}): the envs or their wrappers differ"
        )
    for (obj, saver), part in zip(layers, state.parts, strict=True):
        why = saver.mismatch(obj, part)
        if why is not None:
            raise EnvStateError(f"a state of {_short(_qualified(obj))} cannot be restored into this one: {why}")
    # The env first: one implementing the protocol checks its state in its own set_state, and
    # if it refuses there, no wrapper outside it has been changed yet.
    for (obj, saver), part in reversed(list(zip(layers, state.parts, strict=True))):
        saver.set(obj, part)


def rng_state(rng: np.random.Generator | np.random.RandomState | None) -> Any:
    """A picklable copy of where a numpy random stream is (``None`` for ``None``).

    Raises:
        EnvStateError: ``rng`` is not a numpy ``Generator`` or ``RandomState``.
    """
    if rng is None:
        return None
    if isinstance(rng, np.random.Generator):
        return ("Generator", rng.bit_generator.state)
    if isinstance(rng, np.random.RandomState):
        return ("RandomState", rng.get_state(legacy=False))
    raise EnvStateError(f"a random stream must be a numpy Generator or RandomState, got a {type(rng).__name__}")


def set_rng_state(
    rng: np.random.Generator | np.random.RandomState | None, state: Any
) -> np.random.Generator | np.random.RandomState | None:
    """A random stream at the position ``state`` (from :func:`rng_state`) says.

    ``rng`` is moved there in place when it is of the same kind (its users keep seeing it);
    otherwise a new stream of the saved kind is returned. Assign the result back.

    Returns:
        ``rng`` or a new stream; ``None`` when ``state`` is ``None`` (no stream was made yet).
    """
    if state is None:
        return None
    kind, position = state
    if kind == "Generator":
        name = position["bit_generator"]
        if not (isinstance(rng, np.random.Generator) and type(rng.bit_generator).__name__ == name):
            bit_generator = getattr(np.random, name, None)
            if bit_generator is None:
                raise EnvStateError(f"a random stream of bit generator {name!r}, which numpy does not have")
            rng = np.random.Generator(bit_generator())
        rng.bit_generator.state = copy.deepcopy(position)
        return rng
    if kind == "RandomState":
        if not isinstance(rng, np.random.RandomState):
            rng = np.random.RandomState()
        rng.set_state(copy.deepcopy(position))
        return rng
    raise EnvStateError(f"not a random stream's state: {kind!r}")


# -- walking an env -------------------------------------------------------------------------


class _Saver(abc.ABC):
    """Saves and restores one layer's own state."""

    @abc.abstractmethod
    def get(self, obj: Any) -> Any:
        """The layer's state, copied."""

    def mismatch(self, obj: Any, part: Any) -> str | None:
        """Why ``part`` cannot be restored into ``obj`` (a layer of the same class), if it cannot."""
        return None

    def refusal(self, obj: Any) -> str | None:
        """Why ``obj`` cannot be saved although layers of its class can (its settings); ``None`` if it can.

        Asked of every instance: a saver is planned once per class (:data:`_SAVERS`).
        """
        return None

    @abc.abstractmethod
    def set(self, obj: Any, part: Any) -> None:
        """Restore ``part`` (not consumed: it may be restored again)."""


def _layers_or_raise(env: Any) -> list[tuple[Any, _Saver]]:
    plan = _plan(env)
    if isinstance(plan, str):
        raise EnvStateError(plan)
    return plan


def _plan(env: Any) -> list[tuple[Any, _Saver]] | str:
    """Each layer and its saver, from the outside in, or why some layer cannot be saved."""
    layers: list[tuple[Any, _Saver]] = []
    obj = env
    while True:
        inner = isinstance(obj, gym.Wrapper)
        saver = _saver(obj, _wrapper_saver if inner else _env_saver)
        why = saver if isinstance(saver, str) else saver.refusal(obj)
        if why is not None:
            return _refusal(env, obj, why)
        assert not isinstance(saver, str)
        layers.append((obj, saver))
        if not inner:
            return layers
        obj = obj.env


_SAVERS: dict[tuple[type, frozenset[str]], _Saver | str] = {}
"""Savers (or refusals) by class and instance attribute names: a snapshot per rollout plans cheaply."""


def _saver(obj: Any, classify: Callable[[Any], _Saver | str]) -> _Saver | str:
    if _implements_protocol(obj):
        return _protocol_saver(obj)  # its own snapshot_refusal() may change: asked every time
    key = (type(obj), frozenset(getattr(obj, "__dict__", ())))
    saver = _SAVERS.get(key)
    if saver is None:
        saver = _SAVERS[key] = classify(obj)
    return saver


def _refusal(env: Any, culprit: Any, why: str) -> str:
    where = "" if culprit is env else f" (in {_chain(_qualified(layer) for layer in _outer_layers(env, culprit))})"
    return f"{why}{where}"


def _outer_layers(env: Any, culprit: Any) -> list[Any]:
    """The layers from ``env`` in, down to ``culprit``."""
    layers = [env]
    while layers[-1] is not culprit and isinstance(layers[-1], gym.Wrapper):
        layers.append(layers[-1].env)
    return layers


def _implements_protocol(obj: Any) -> bool:
    # On the class: an instance attribute that happens to be named get_state is not the protocol.
    return callable(getattr(type(obj), "get_state", None)) and callable(getattr(type(obj), "set_state", None))


def _protocol_saver(obj: Any) -> _Saver | str:
    """The saver of a layer implementing the protocol, unless its own ``snapshot_refusal()`` refuses."""
    refusal = getattr(type(obj), "snapshot_refusal", None)
    why = refusal(obj) if callable(refusal) else None
    if why is not None:
        return str(why)
    return _ProtocolSaver()


def _qualified(obj: Any) -> str:
    klass = type(obj)
    return f"{klass.__module__}.{klass.__qualname__}"


def _short(qualified: str) -> str:
    return qualified.rsplit(".", 1)[-1]


def _chain(names: Iterable[str]) -> str:
    return " > ".join(_short(name) for name in names)


_PROTOCOL_HINT = (
    "implement get_state() and set_state(state) on it (the pycollect.envs.state.SnapshotEnv protocol, "
    "docs/env-state.md) to make it snapshot-able"
)


# -- copying values ------------------------------------------------------------------------

_IMMUTABLE = (bool, int, float, complex, str, bytes, type(None), np.generic)


def _copy(value: Any) -> Any:
    """A copy of ``value`` that shares nothing mutable with it (cheap for the common kinds)."""
    if isinstance(value, _IMMUTABLE):
        return value
    if isinstance(value, np.ndarray):
        return value.copy()
    return copy.deepcopy(value)


_ABSENT = "__pycollect_absent__"
"""Marks an attribute that the instance did not have (set in ``reset``, before the first one)."""


@dataclass(frozen=True)
class _Attributes:
    """What the instance attributes of a class are, beyond those every layer of its kind has.

    Attributes:
        state: Changed by ``reset`` or ``step``: saved and restored.
        config: Set when built and never changed after.
        scratch: Buffers rewritten before they are read again: not saved.
        clocks: ``time.perf_counter()`` readings: saved as the time since, so that a restore in
            another process (whose clock has another origin) keeps the durations.
        render: Rendering resources (windows, images): not saved; a restored env makes its own.
    """

    state: tuple[str, ...] = ()
    config: tuple[str, ...] = ()
    scratch: tuple[str, ...] = ()
    clocks: tuple[str, ...] = ()
    render: tuple[str, ...] = ()

    def known(self) -> frozenset[str]:
        return frozenset(self.state + self.config + self.scratch + self.clocks + self.render)


class _AttributeSaver(_Saver):
    """A layer whose state is some of its instance attributes (and, for an env, its random stream)."""

    def __init__(self, attributes: _Attributes, random_stream: bool) -> None:
        self.attributes = attributes
        self.random_stream = random_stream

    def get(self, obj: Any) -> Any:
        own = vars(obj)
        part: dict[str, Any] = {name: _copy(own[name]) if name in own else _ABSENT for name in self.attributes.state}
        now = time.perf_counter()
        for name in self.attributes.clocks:
            reading = own.get(name, -1)
            part[name] = None if reading is None or reading < 0 else now - reading
        if self.random_stream:
            part["_np_random"] = rng_state(own.get("_np_random"))
            part["_np_random_seed"] = own.get("_np_random_seed")
        return part

    def set(self, obj: Any, part: Any) -> None:
        own = vars(obj)
        for name in self.attributes.state:
            value = part[name]
            if isinstance(value, str) and value == _ABSENT:
                own.pop(name, None)
            else:
                own[name] = _copy(value)
        now = time.perf_counter()
        for name in self.attributes.clocks:
            since = part[name]
            own[name] = -1 if since is None else now - since
        if self.random_stream:
            own["_np_random"] = set_rng_state(own.get("_np_random"), part["_np_random"])
            own["_np_random_seed"] = part["_np_random_seed"]


class _PassThrough(_Saver):
    """A layer with nothing of its own to save."""

    def get(self, obj: Any) -> Any:
        return None

    def set(self, obj: Any, part: Any) -> None:
        pass


class _ProtocolSaver(_Saver):
    """A layer that implements :class:`SnapshotEnv`."""

    def get(self, obj: Any) -> Any:
        return obj.get_state()

    def set(self, obj: Any, part: Any) -> None:
        obj.set_state(copy.deepcopy(part))


# -- gymnasium's wrappers ------------------------------------------------------------------

_WRAPPER_BASE = frozenset(
    {"env", "_action_space", "_observation_space", "_metadata", "_cached_spec", "_reward_range", "_saved_kwargs"}
)
"""Attributes of every ``gymnasium.Wrapper`` (spaces, metadata, spec, constructor arguments)."""

_TRANSFORM = _Attributes(config=("func",))

# By qualified name, so that looking a wrapper up imports nothing (some of gymnasium's wrapper
# modules need JAX or torch). Each was read in gymnasium 1.x's source: a subclass that adds
# attributes, or a gymnasium version that adds some, is refused rather than saved in part.
_GYMNASIUM_WRAPPERS: dict[str, _Attributes] = {
    "gymnasium.wrappers.common.TimeLimit": _Attributes(state=("_elapsed_steps",), config=("_max_episode_steps",)),
    "gymnasium.wrappers.common.OrderEnforcing": _Attributes(
        state=("_has_reset",), config=("_disable_render_order_enforcing",)
    ),
    "gymnasium.wrappers.common.PassiveEnvChecker": _Attributes(
        # gymnasium 1.4 added the last two: the first reset's and step's data, kept to check the
        # next step does not reuse their objects
        state=(
            "checked_reset",
            "checked_step",
            "checked_render",
            "close_called",
            "checked_data_reuse",
            "_previous_data",
        )
    ),
    "gymnasium.wrappers.common.Autoreset": _Attributes(state=("autoreset",)),
    "gymnasium.wrappers.common.RecordEpisodeStatistics": _Attributes(
        state=("episode_count", "episode_returns", "episode_lengths", "time_queue", "return_queue", "length_queue"),
        clocks=("episode_start_time",),
        config=("_stats_key",),
    ),
    "gymnasium.wrappers.stateful_observation.FrameStackObservation": _Attributes(
        state=("obs_queue", "padding_value"), scratch=("stacked_obs",), config=("stack_size", "padding_type")
    ),
    "gymnasium.wrappers.stateful_observation.DelayObservation": _Attributes(
        state=("observation_queue",), config=("delay",)
    ),
    "gymnasium.wrappers.stateful_observation.TimeAwareObservation": _Attributes(
        state=("timesteps",),
        config=(
            "flatten",
            "normalize_time",
            "max_timesteps",
            "_time_preprocess_func",
            "_append_data_func",
            "_obs_postprocess_func",
        ),
    ),
    "gymnasium.wrappers.stateful_observation.NormalizeObservation": _Attributes(
        state=("obs_rms", "_update_running_mean"), config=("epsilon",)
    ),
    "gymnasium.wrappers.stateful_observation.MaxAndSkipObservation": _Attributes(
        state=("_obs_buffer",), config=("_skip",)
    ),
    "gymnasium.wrappers.stateful_reward.NormalizeReward": _Attributes(
        state=("return_rms", "discounted_reward", "_update_running_mean"), config=("gamma", "epsilon")
    ),
    "gymnasium.wrappers.stateful_action.StickyAction": _Attributes(
        state=("last_action", "is_sticky_actions", "num_repeats", "repeats_taken"),
        config=("repeat_action_probability", "repeat_action_duration_range"),
    ),
    "gymnasium.wrappers.stateful_action.RepeatAction": _Attributes(config=("num_repeats",)),
    "gymnasium.wrappers.atari_preprocessing.AtariPreprocessing": _Attributes(
        state=("obs_buffer", "lives", "game_over"),
        config=(
            "noop_max",
            "frame_skip",
            "screen_size",
            "terminal_on_life_loss",
            "grayscale_obs",
            "grayscale_newaxis",
            "scale_obs",
        ),
    ),
    # Transforms: their attributes are set when built and never change.
    "gymnasium.wrappers.transform_observation.TransformObservation": _TRANSFORM,
    "gymnasium.wrappers.transform_observation.FilterObservation": _Attributes(config=("func", "filter_keys")),
    "gymnasium.wrappers.transform_observation.FlattenObservation": _TRANSFORM,
    "gymnasium.wrappers.transform_observation.GrayscaleObservation": _Attributes(config=("func", "keep_dim")),
    "gymnasium.wrappers.transform_observation.ResizeObservation": _Attributes(config=("func", "shape", "cv2_shape")),
    "gymnasium.wrappers.transform_observation.ReshapeObservation": _Attributes(config=("func", "shape")),
    "gymnasium.wrappers.transform_observation.RescaleObservation": _TRANSFORM,
    "gymnasium.wrappers.transform_observation.DtypeObservation": _Attributes(config=("func", "dtype")),
    "gymnasium.wrappers.transform_observation.AddRenderObservation": _TRANSFORM,
    "gymnasium.wrappers.transform_observation.DiscretizeObservation": _Attributes(
        config=("func", "low", "high", "n_dims", "multidiscrete", "bins", "bin_edges")
    ),
    "gymnasium.wrappers.transform_action.TransformAction": _TRANSFORM,
    "gymnasium.wrappers.transform_action.ClipAction": _TRANSFORM,
    "gymnasium.wrappers.transform_action.RescaleAction": _TRANSFORM,
    "gymnasium.wrappers.transform_action.DiscretizeAction": _Attributes(
        config=("func", "low", "high", "n_dims", "multidiscrete", "bins", "bin_centers")
    ),
    "gymnasium.wrappers.transform_reward.TransformReward": _TRANSFORM,
    "gymnasium.wrappers.transform_reward.ClipReward": _TRANSFORM,
    # Noise drawn from the env's own random stream, which the env's layer saves.
    "gymnasium.wrappers.rendering.AddWhiteNoise": _Attributes(
        config=("probability_of_noise_per_pixel", "is_noise_grayscale")
    ),
    "gymnasium.wrappers.rendering.ObstructView": _Attributes(
        config=("obstruction_centers_ratio", "obstruction_width", "is_noise_grayscale")
    ),
    "gymnasium.wrappers.array_conversion.ArrayConversion": _Attributes(
        config=("_env_xp", "_target_xp", "_env_device", "_target_device")
    ),
}


def _known_class(obj: Any, table: dict[str, _Attributes]) -> _Attributes | None:
    """The entry of the nearest class of ``obj`` (its own, else a base's) in ``table``."""
    for klass in type(obj).__mro__:
        entry = table.get(f"{klass.__module__}.{klass.__qualname__}")
        if entry is not None:
            return entry
    return None


def _unknown_attributes(obj: Any, known: frozenset[str]) -> list[str]:
    return sorted(name for name in vars(obj) if name not in known)


def _wrapper_saver(wrapper: gym.Wrapper[Any, Any, Any, Any]) -> _Saver | str:
    name = type(wrapper).__qualname__
    attributes = _known_class(wrapper, _GYMNASIUM_WRAPPERS) or _Attributes()
    unknown = _unknown_attributes(wrapper, _WRAPPER_BASE | attributes.known())
    if unknown:
        return (
            f"wrapper {name} keeps attributes pycollect does not know how to save "
            f"({', '.join(unknown)}); {_PROTOCOL_HINT} (a wrapper's get_state saves only its own attributes)"
        )
    if not attributes.state and not attributes.clocks:
        return _PassThrough()
    return _AttributeSaver(attributes, random_stream=False)


# -- the env inside ------------------------------------------------------------------------

_ENV_BASE = frozenset(
    {
        "spec",
        "render_mode",
        "metadata",
        "action_space",
        "observation_space",
        "reward_range",
        "_np_random",
        "_np_random_seed",
        "_ezpickle_args",
        "_ezpickle_kwargs",
    }
)
"""Attributes of every ``gymnasium.Env`` (the random stream is saved apart)."""

_SCREEN = ("screen", "clock", "isopen")
_CLASSIC = "gymnasium.envs.classic_control"
_TOY = "gymnasium.envs.toy_text"

# Pure-Python envs whose state is a few attributes and their random stream (gymnasium 1.x).
_GYMNASIUM_ENVS: dict[str, _Attributes] = {
    f"{_CLASSIC}.cartpole.CartPoleEnv": _Attributes(
        state=("state", "steps_beyond_terminated"),
        config=(
            "_sutton_barto_reward",
            "gravity",
            "masscart",
            "masspole",
            "total_mass",
            "length",
            "polemass_length",
            "force_mag",
            "tau",
            "kinematics_integrator",
            "theta_threshold_radians",
            "x_threshold",
        ),
        render=("screen_width", "screen_height", *_SCREEN),
    ),
    f"{_CLASSIC}.pendulum.PendulumEnv": _Attributes(
        state=("state", "last_u"),
        config=("max_speed", "max_torque", "dt", "g", "m", "l"),
        render=("screen_dim", *_SCREEN),
    ),
    f"{_CLASSIC}.mountain_car.MountainCarEnv": _Attributes(
        state=("state",),
        config=(
            "min_position",
            "max_position",
            "max_speed",
            "goal_position",
            "goal_velocity",
            "force",
            "gravity",
            "low",
            "high",
        ),
        render=("screen_width", "screen_height", *_SCREEN),
    ),
    f"{_CLASSIC}.continuous_mountain_car.Continuous_MountainCarEnv": _Attributes(
        state=("state",),
        config=(
            "min_action",
            "max_action",
            "min_position",
            "max_position",
            "max_speed",
            "goal_position",
            "goal_velocity",
            "power",
            "low_state",
            "high_state",
        ),
        render=("screen_width", "screen_height", *_SCREEN),
    ),
    f"{_CLASSIC}.acrobot.AcrobotEnv": _Attributes(state=("state",), render=_SCREEN),
    f"{_TOY}.frozen_lake.FrozenLakeEnv": _Attributes(
        state=("s", "lastaction"),
        config=("desc", "nrow", "ncol", "initial_state_distrib", "P"),
        render=(
            "window_size",
            "cell_size",
            "window_surface",
            "clock",
            "hole_img",
            "cracked_hole_img",
            "ice_img",
            "elf_images",
            "goal_img",
            "start_img",
            # gymnasium 1.4's images
            "agent_img",
            "goal_flag_img",
            "ice_crack_imgs",
            "letter_g_img",
            "letter_s_img",
        ),
    ),
    f"{_TOY}.taxi.TaxiEnv": _Attributes(
        state=("s", "lastaction", "fickle_step", "taxi_orientation"),
        config=(
            "desc",
            "locs",
            "locs_colors",
            "rainy_probability",
            "_rainy_lateral_probability",
            "fickle_probability",
            "fickle_passenger",
            "max_row",
            "max_col",
            "initial_state_distrib",
            "P",
        ),
        render=(
            "window",
            "clock",
            "cell_size",
            "taxi_imgs",
            "passenger_img",
            "destination_img",
            "median_horiz",
            "median_vert",
            "background_img",
            # gymnasium 1.4's images
            "house_img",
            "taxi_full_imgs",
        ),
    ),
    f"{_TOY}.cliffwalking.CliffWalkingEnv": _Attributes(
        state=("s", "lastaction"),
        config=("shape", "start_state_index", "nS", "nA", "is_slippery", "_cliff", "P", "initial_state_distrib"),
        render=(
            "cell_size",
            "window_size",
            "window_surface",
            "clock",
            "elf_images",
            "start_img",
            "goal_img",
            "cliff_img",
            "mountain_bg_img",
            "near_cliff_img",
            "tree_img",
            # gymnasium 1.4's images
            "agent_img",
            "cliff_imgs",
            "goal_flag_img",
            "ground_img",
        ),
    ),
    f"{_TOY}.blackjack.BlackjackEnv": _Attributes(
        state=("dealer", "player", "dealer_top_card_suit", "dealer_top_card_value_str"), config=("natural", "sab")
    ),
}


def _env_saver(env: Any) -> _Saver | str:
    klass = type(env)
    name, module = klass.__qualname__, klass.__module__
    qualified = f"{module}.{name}"
    attributes = _GYMNASIUM_ENVS.get(qualified)
    if attributes is not None:
        unknown = _unknown_attributes(env, _ENV_BASE | attributes.known())
        if unknown:
            return f"env {name} keeps attributes pycollect does not know how to save ({', '.join(unknown)})"
        return _AttributeSaver(attributes, random_stream=True)
    if qualified == "ale_py.env.AtariEnv":
        unknown = _unknown_attributes(env, _ENV_BASE | _ALE_CONFIG)
        if unknown:
            return f"Atari env {name} keeps attributes pycollect does not know how to save ({', '.join(unknown)})"
        return _AleSaver()
    if module.startswith("gymnasium.envs.mujoco.") and module != "gymnasium.envs.mujoco.mujoco_py_env":
        return _MujocoSaver()
    if module.startswith("gymnasium.envs.box2d."):
        return (
            f"env {name} is a Box2D env: a Box2D world's contacts and solver state cannot be read or written "
            "from Python, so it cannot be snapshot"
        )
    kind = "env" if isinstance(env, gym.Env) else "object (not a gymnasium Env or Wrapper)"
    return (
        f"{kind} {name} ({module}) is not one pycollect knows how to save (gymnasium's classic control, toy "
        f"text and MuJoCo envs, ALE's Atari envs and gymnasium's own wrappers); {_PROTOCOL_HINT}"
    )


# -- ALE -----------------------------------------------------------------------------------

_ALE_CONFIG = frozenset(
    {
        "ale",
        "_game",
        "_game_mode",
        "_game_difficulty",
        "_frameskip",
        "_obs_type",
        "sound_obs",
        "_action_set",
        "continuous",
        "continuous_action_threshold",
    }
)


class _AleSaver(_Saver):
    """An ALE Atari env without ALE's sticky actions: the emulator with its random generator, and ``np_random``."""

    def get(self, obj: Any) -> Any:
        return {
            "game": obj._game,
            "ale": obj.ale.cloneState(include_rng=True),
            "_np_random": rng_state(vars(obj).get("_np_random")),
            "_np_random_seed": vars(obj).get("_np_random_seed"),
        }

    def refusal(self, obj: Any) -> str | None:
        sticky = float(obj.ale.getFloat("repeat_action_probability"))
        if sticky <= 0:
            return None
        # ALE repeats the last action it took (StellaEnvironment's m_actions), which neither
        # cloneState nor any other call reads or writes: a restored env would repeat another.
        return (
            f"Atari env {obj._game!r} has ALE's sticky actions (repeat_action_probability={sticky:g}), and ALE keeps "
            "the action it repeats outside the state it saves, so a restored env would repeat another one; build "
            "it with repeat_action_probability=0 and wrap it in gymnasium.wrappers.StickyAction for sticky "
            "actions pycollect can save"
        )

    def mismatch(self, obj: Any, part: Any) -> str | None:
        if part["game"] != obj._game:
            return f"it is of ALE game {part['game']!r}, this env plays {obj._game!r}"
        return None

    def set(self, obj: Any, part: Any) -> None:
        obj.ale.restoreState(part["ale"])
        own = vars(obj)
        own["_np_random"] = set_rng_state(own.get("_np_random"), part["_np_random"])
        own["_np_random_seed"] = part["_np_random_seed"]


# -- MuJoCo --------------------------------------------------------------------------------

_MUJOCO_ENV_STATE = ("goal", "goal_pos", "cylinder_pos")
"""Attributes some of gymnasium's MuJoCo envs draw at reset (Reacher, Pusher); the others are set when built."""


class _MujocoSaver(_Saver):
    """One of gymnasium's MuJoCo envs: the simulation's data, the random stream, the targets drawn at reset.

    The whole of ``MjData`` is saved, not only the integration state (``qpos``, ``qvel``, ``act``,
    time, warm start, controls, ...): an env may read quantities the last step computed
    (positions of bodies, contact forces) before it steps again, and those would differ if they
    were recomputed from the restored state. What varies in size with the contacts (constraint
    rows) is the next step's to recompute, and is restored only where it fits.
    """

    def get(self, obj: Any) -> Any:
        import mujoco

        model, data = obj.model, obj.data
        spec = mujoco.mjtState.mjSTATE_INTEGRATION
        integration = np.empty(mujoco.mj_stateSize(model, spec), np.float64)
        mujoco.mj_getState(model, data, integration, spec)
        own = vars(obj)
        return {
            "model": _model_sizes(model),
            "integration": integration,
            "data": _data_arrays(data),
            "attributes": {name: _copy(own[name]) for name in _MUJOCO_ENV_STATE if name in own},
            "_np_random": rng_state(own.get("_np_random")),
            "_np_random_seed": own.get("_np_random_seed"),
        }

    def mismatch(self, obj: Any, part: Any) -> str | None:
        sizes = _model_sizes(obj.model)
        if part["model"] != sizes:
            return f"it is of a MuJoCo model of sizes {part['model']}, this env's has {sizes}"
        return None

    def set(self, obj: Any, part: Any) -> None:
        import mujoco

        _set_data_arrays(obj.data, part["data"])
        mujoco.mj_setState(obj.model, obj.data, part["integration"], mujoco.mjtState.mjSTATE_INTEGRATION)
        own = vars(obj)
        for name, value in part["attributes"].items():
            own[name] = _copy(value)
        own["_np_random"] = set_rng_state(own.get("_np_random"), part["_np_random"])
        own["_np_random_seed"] = part["_np_random_seed"]


def _model_sizes(model: Any) -> dict[str, int]:
    return {name: int(getattr(model, name)) for name in ("nq", "nv", "nu", "na", "nbody", "ngeom", "nsite")}


def _data_array_names(data: Any) -> list[str]:
    names = [name for name in dir(data) if not name.startswith("_")]
    return [name for name in names if isinstance(getattr(data, name, None), np.ndarray)]


def _data_arrays(data: Any) -> dict[str, np.ndarray]:
    arrays = {}
    for name in _data_array_names(data):
        array = getattr(data, name)
        if array.size:
            arrays[name] = array.copy()
    return arrays


def _set_data_arrays(data: Any, arrays: dict[str, np.ndarray]) -> None:
    for name, saved in arrays.items():
        target = getattr(data, name, None)
        if isinstance(target, np.ndarray) and target.shape == saved.shape:
            target[...] = saved
