"""Checking that an env's saved state round-trips: restored, the env's future is the same.

:func:`check_env_state` is the conformance check of an env's (or an env backend's)
``get_state``/``set_state`` (docs/env-state.md): it steps an env, saves its state, records what
the env returns for the next steps, then restores the state into envs with other histories and
checks that the same actions give the same observations, rewards, flags and infos, byte for
byte, naming the first difference. :func:`first_difference` is its comparison, for tests that
compare such values themselves.

Values are compared in a canonical form taken when they are returned (an env may reuse and
overwrite its arrays): arrays by dtype, shape and bytes, floats by their exact bits, mappings
in their order (dm_control's observations are ordered dicts), lists and tuples item by
item.
"""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import numpy as np

from pycollect.envs.backend import EnvBackend
from pycollect.envs.state import get_env_state, set_env_state, snapshot_refusal
from pycollect.exceptions import ConformanceError

__all__ = ["check_env_state", "first_difference"]

_SHOWN = 160  # characters of a value in a message
_RESET = "the reset after step"  # how a reset's entry in a record is labelled


def check_env_state(
    make: Callable[[], Any],
    backend: EnvBackend | None = None,
    *,
    before: int = 5,
    after: int = 60,
    seed: int = 3,
    action_seed: int = 7,
    min_episodes: int = 1,
    ignore_keys: Collection[str] = (),
    also_into: Sequence[Callable[[], Any]] = (),
) -> Any:
    """Check that restoring an env's saved state makes its following steps identical.

    An env from ``make()`` is reset with ``seed`` and stepped ``before`` random actions; its
    state is taken, pickled and unpickled (as checkpoints and workers move it); the env is
    stepped ``after`` more actions, resetting (unseeded) after each episode end, and what it
    returns is recorded. The state is then restored into, in turn: the same env; a fresh env
    reset with another seed and stepped; that env again (a state is not used up); a fresh env
    never reset; and an env from each of ``also_into``. After each restore the same ``after``
    actions must give the recorded steps, byte for byte.

    Args:
        make: Builds the env (called once per env the check restores into).
        backend: The env backend whose ``snapshot_refusal``/``get_state``/``set_state`` to
            check; ``None`` checks :mod:`pycollect.envs.state`'s functions (what
            :class:`~pycollect.envs.EnvBackend`'s methods call by default).
        before: Steps before the state is taken.
        after: Steps recorded after it; they must cross ``min_episodes`` episode ends.
        seed: The seed of the first reset (the fresh env is reset with ``seed + 1000``).
        action_seed: The seed of the random actions (sampled from a copy of
            ``env.action_space``).
        min_episodes: Episode ends the recorded steps must cross, so that resets after a
            restore are checked too.
        ignore_keys: Keys of mappings (in observations and infos) whose values are not
            compared, such as the wall-clock ``"t"`` of ``RecordEpisodeStatistics``'
            ``info["episode"]``.
        also_into: More envs to restore into, each built by the caller in a state of its
            choosing (an env whose episode is over, one stepped far ahead).

    Returns:
        The state, as it came out of pickle, for further checks.

    Raises:
        ConformanceError: The env refuses snapshots, the state does not pickle, the steps
            after ``before`` cross fewer than ``min_episodes`` episode ends, or a restored env
            differs (the message names the env restored into, the step and the value).

    Example:
        >>> import gymnasium as gym
        >>> state = check_env_state(lambda: gym.make("CartPole-v1"))
    """
    get_state, set_state, refusal = _functions(backend)
    ignore = frozenset(ignore_keys)
    opened: list[Any] = []

    def build() -> Any:
        env = make()
        opened.append(env)
        return env

    try:
        env = build()
        why = refusal(env)
        if why is not None:
            raise ConformanceError(f"the env refuses to be saved: {why}")
        env.reset(seed=seed)
        actions = _random_actions(env.action_space, before + after, action_seed)
        _record(env, actions[:before], ignore)
        state = _pickled(get_state(env))
        expected = _record(env, actions[before:], ignore)
        ends = sum(1 for label, _ in expected if label.startswith(_RESET))
        if ends < min_episodes:
            raise ConformanceError(
                f"the {after} steps after the state cross {ends} episode ends, fewer than min_episodes="
                f"{min_episodes}: raise after or shorten the env's episodes, so that resets are checked too"
            )

        def restored(into: Any, what: str) -> None:
            set_state(into, state)
            _expect_same(expected, _record(into, actions[before:], ignore), f"restored into {what}")

        restored(env, "the same env")
        fresh = build()
        fresh.reset(seed=seed + 1000)  # another history: the restore must not depend on it
        _record(fresh, actions[:2], ignore)
        restored(fresh, f"a fresh env reset with seed {seed + 1000} and stepped twice")
        restored(fresh, "that env a second time (a state must restore more than once)")
        restored(build(), "a fresh env never reset")
        for index, also in enumerate(also_into):
            target = also()
            opened.append(target)
            restored(target, f"also_into[{index}]'s env")
        return state
    finally:
        for opened_env in opened:
            close = getattr(opened_env, "close", None)
            if callable(close):
                close()


def first_difference(expected: Any, got: Any, *, ignore_keys: Collection[str] = ()) -> str | None:
    """Where two values first differ, byte for byte and dtype included, or ``None``.

    Args:
        expected: A value (arrays, numbers, strings, ``None``, and mappings, lists and tuples
            of them): an observation, an info, a step's result, a state.
        got: The value to compare with it.
        ignore_keys: Keys of mappings whose values are not compared.

    Returns:
        ``None`` when they are the same; else the path to the first difference and both
        values (``"['position']: array([1.5]) instead of array([1.25])"``).

    Raises:
        ConformanceError: A value of a kind it cannot compare (named, with its path).

    Example:
        >>> import numpy as np
        >>> first_difference({"x": np.zeros(2)}, {"x": np.zeros(2, np.float32)})
        "['x']: float32 array([0., 0.], dtype=float32) instead of float64 array([0., 0.])"
    """
    ignore = frozenset(ignore_keys)
    return _difference(_canonical(expected, ignore, "expected"), _canonical(got, ignore, "got"), "")


# -- the steps ---------------------------------------------------------------------------------


def _functions(
    backend: EnvBackend | None,
) -> tuple[Callable[[Any], Any], Callable[[Any, Any], None], Callable[[Any], str | None]]:
    """``get_state``, ``set_state`` and ``snapshot_refusal``: the backend's, or the module's."""
    if backend is None:
        return get_env_state, set_env_state, snapshot_refusal
    return backend.get_state, backend.set_state, backend.snapshot_refusal


def _pickled(state: Any) -> Any:
    try:
        return pickle.loads(pickle.dumps(state))
    except Exception as exc:
        raise ConformanceError(f"the state must pickle: {type(exc).__name__}: {exc}") from exc


def _random_actions(space: Any, count: int, seed: int) -> list[Any]:
    space = copy.deepcopy(space)  # seeding the env's own space would change what it samples later
    space.seed(seed)
    return [space.sample() for _ in range(count)]


def _record(env: Any, actions: Sequence[Any], ignore: frozenset[str]) -> list[tuple[str, Any]]:
    """Step ``env`` with ``actions``, resetting (unseeded) after each episode end: what it returned.

    Each entry is a label (``"step 3"``, ``"the reset after step 3"``) and its fields, by name, in
    canonical form.
    """
    record: list[tuple[str, Any]] = []
    for step, action in enumerate(actions, 1):
        observation, reward, terminated, truncated, info = env.step(action)
        fields = {"observation": observation, "reward": reward, "terminated": terminated, "truncated": truncated}
        record.append(_entry(f"step {step}", {**fields, "info": info}, ignore))
        if terminated or truncated:
            observation, info = env.reset()  # unseeded: the env's random stream goes on
            record.append(_entry(f"{_RESET} {step}", {"observation": observation, "info": info}, ignore))
    return record


def _entry(label: str, fields: dict[str, Any], ignore: frozenset[str]) -> tuple[str, Any]:
    return label, tuple((name, _canonical(value, ignore, f"{label}, {name}")) for name, value in fields.items())


def _expect_same(expected: list[tuple[str, Any]], got: list[tuple[str, Any]], what: str) -> None:
    for (label, want), (got_label, value) in zip(expected, got, strict=False):
        if label != got_label:  # a reset where there was none: the flags before it differ already
            raise ConformanceError(f"{what}: {got_label} instead of {label}")
        for (name, want_field), (_, got_field) in zip(want, value, strict=True):
            difference = _difference(want_field, got_field, name)
            if difference is not None:
                raise ConformanceError(f"{what}: {label} after the restore differs, {difference}")
    if len(expected) != len(got):
        raise ConformanceError(f"{what}: {len(got)} steps and resets instead of {len(expected)}")


# -- the canonical form ------------------------------------------------------------------------


def _canonical(value: Any, ignore: frozenset[str], where: str) -> Any:
    """``value`` as nested tuples that compare equal only when it is the same, byte for byte."""
    if isinstance(value, bool | int | str | None):
        return (type(value).__name__, value)
    if isinstance(value, float):
        return ("float", value.hex())
    if isinstance(value, np.generic):
        return ("scalar", value.dtype.str, value.tobytes())
    if isinstance(value, Mapping):
        kept = [(key, item) for key, item in value.items() if key not in ignore]
        return ("dict", tuple((key, _canonical(item, ignore, f"{where}[{key!r}]")) for key, item in kept))
    if isinstance(value, list | tuple):
        return (type(value).__name__, tuple(_canonical(item, ignore, f"{where}[{i}]") for i, item in enumerate(value)))
    if not isinstance(value, np.ndarray) and hasattr(value, "__array__"):  # a torch or jax array
        value = np.asarray(value)
    if isinstance(value, np.ndarray):
        if value.dtype == object:  # the bytes of an object array are addresses
            items = tuple(_canonical(item, ignore, f"{where}[...]") for item in value.ravel())
            return ("objects", value.shape, items)
        return ("ndarray", value.dtype.str, value.shape, value.tobytes())
    raise ConformanceError(
        f"{where}: cannot compare a value of type {type(value).__qualname__} ({_shown(repr(value))})"
    )


def _difference(want: Any, got: Any, path: str) -> str | None:
    """The first place where two canonical forms differ, as ``"PATH: GOT instead of WANT"``."""
    if want == got:
        return None
    if want[0] == got[0] == "dict":
        want_keys, got_keys = [key for key, _ in want[1]], [key for key, _ in got[1]]
        if want_keys != got_keys:
            return f"{path or 'the mapping'}: keys {got_keys} instead of {want_keys}"
        for (key, want_item), (_, got_item) in zip(want[1], got[1], strict=True):
            found = _difference(want_item, got_item, f"{path}[{key!r}]")
            if found is not None:
                return found
    if want[0] == got[0] and want[0] in ("list", "tuple") and len(want[1]) == len(got[1]):
        for index, (want_item, got_item) in enumerate(zip(want[1], got[1], strict=True)):
            found = _difference(want_item, got_item, f"{path}[{index}]")
            if found is not None:
                return found
    return f"{path or 'the value'}: {_show(got)} instead of {_show(want)}"


def _show(form: Any) -> str:
    """A canonical form as the value it was, for a message."""
    kind = form[0]
    if kind == "ndarray":
        _, dtype, shape, data = form
        array = np.frombuffer(data, dtype=np.dtype(dtype)).reshape(shape)
        with np.printoptions(threshold=8, edgeitems=2):
            return _shown(f"{array.dtype} {array!r}")
    if kind == "scalar":
        _, dtype, data = form
        scalar = np.frombuffer(data, dtype=np.dtype(dtype))[0]
        return f"{scalar.dtype} {scalar!r}"
    if kind == "float":
        return repr(float.fromhex(form[1]))
    if kind in ("dict", "list", "tuple", "objects"):
        return f"a {kind} of {len(form[-1])} items"
    return _shown(repr(form[1]))


def _shown(text: str) -> str:
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."
