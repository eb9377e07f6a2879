"""The native action writer (``_core.ActionWriter``) against the Python checks it shortcuts.

``ActionChecker.writer(out)`` writes a batch natively when it is the common case, and leaves
everything else to :meth:`ActionChecker.check`. Whatever the writer accepts must be exactly
what the checks would have written (same values, same dtype after the cast), and whatever the
checks refuse the writer must refuse too, so that the error the user sees is always the
Python one, naming the value.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pycollect import ActionError, _core
from pycollect._steps.spaces import ELEMENT_CODES, ActionChecker, SpaceLayout

SPACES = {
    "discrete": gym.spaces.Discrete(5, start=-2),
    "box-f32": gym.spaces.Box(-1.5, 2.0, (3,), np.float32),
    "box-f64-unbounded": gym.spaces.Box(-np.inf, np.inf, (2,), np.float64),
    "box-f32-unbounded": gym.spaces.Box(-np.inf, np.inf, (2,), np.float32),
    "box-i8": gym.spaces.Box(-100, 100, (2,), np.int8),
    "box-u8": gym.spaces.Box(0, 255, (2, 2), np.uint8),
    "multidiscrete": gym.spaces.MultiDiscrete([3, 4]),
    "multibinary": gym.spaces.MultiBinary(3),
}
INPUT_DTYPES = [np.dtype(name) for name in ("bool", "int8", "int32", "int64", "uint8", "uint64", "float32", "float64")]
SPECIALS = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 255.0, 300.0, 1e300, -1e300, np.inf, -np.inf, np.nan, 0.5, 2**63]


def _native_and_python(space: gym.Space[Any], actions: Any, num_envs: int) -> tuple[Any, Any]:
    """What the native writer does with ``actions`` (``None``: refused) and what the checks do (an error or arrays)."""
    layout = SpaceLayout(space, "action")
    checker = ActionChecker(layout, num_envs)
    out = layout.empty(num_envs)
    field = layout.leaves[0].field
    writer = _core.ActionWriter(
        out[0],
        [num_envs, *field.shape],
        [float(b) for b in np.ravel(field.low)],
        [float(b) for b in np.ravel(field.high)],
        ELEMENT_CODES[out[0].dtype],
        list(ELEMENT_CODES.items()),
        np.ndarray,
    )
    native = out[0].copy() if writer.write(actions) else None
    try:
        python: Any = checker.check(actions)[0]
    except ActionError as exc:
        python = exc
    return native, python


@settings(max_examples=400, deadline=None)
@given(
    space=st.sampled_from(sorted(SPACES)),
    dtype=st.sampled_from(INPUT_DTYPES),
    num_envs=st.integers(1, 4),
    data=st.data(),
)
def test_the_native_writer_writes_exactly_what_the_checks_accept_and_refuses_the_rest(
    space: str, dtype: np.dtype[Any], num_envs: int, data: st.DataObject
) -> None:
    gym_space = SPACES[space]
    shape = (num_envs, *SpaceLayout(gym_space, "action").leaves[0].field.shape)
    count = int(np.prod(shape))
    if dtype.kind == "f":
        values = data.draw(st.lists(st.sampled_from(SPECIALS) | st.floats(-400, 400), min_size=count, max_size=count))
    else:
        info = np.iinfo(dtype) if dtype.kind in "iu" else None
        low, high = (int(info.min), int(info.max)) if info is not None else (0, 1)
        elements = st.integers(max(low, -300), min(high, 300)) | st.sampled_from([low, high])
        values = data.draw(st.lists(elements, min_size=count, max_size=count))
    with np.errstate(all="ignore"):
        actions = np.array(values, dtype=np.float64 if dtype.kind == "f" else object).astype(dtype).reshape(shape)
    native, python = _native_and_python(gym_space, actions, num_envs)
    if isinstance(python, ActionError):
        assert native is None, f"the native writer accepted what the checks refuse: {python}"
    else:  # an exact, C-contiguous array the checks accept is the native writer's common case
        assert native is not None, f"the native writer refused {actions!r}, which the checks accept"
        assert native.dtype == python.dtype
        np.testing.assert_array_equal(native, python)


@pytest.mark.parametrize(
    "actions",
    [
        [0, 1],  # a list: the checks convert it
        np.array([0, 1], np.int64)[::-1],  # not C-contiguous (negative stride)
        np.zeros((2, 1), np.int64),  # another shape
        np.array([0, 1], dtype=">i8"),  # another byte order
        np.array([0, 1], object),  # objects
    ],
    ids=["list", "strided", "shape", "byte-order", "object"],
)
def test_what_is_not_the_common_case_is_left_to_the_checks(actions: Any) -> None:
    native, python = _native_and_python(gym.spaces.Discrete(3), actions, 2)
    assert native is None
    assert isinstance(python, ActionError | np.ndarray)


def test_the_writer_of_a_vector_env_casts_and_refuses_as_the_checks() -> None:
    layout = SpaceLayout(gym.spaces.Box(-1, 1, (2,), np.float32), "action")
    out = layout.empty(3)
    write = ActionChecker(layout, 3).writer(out)
    write(np.full((3, 2), 0.25))  # float64, native
    assert out[0].dtype == np.float32 and (out[0] == 0.25).all()
    write([[0.5, 0.5]] * 3)  # a list, through the checks
    assert (out[0] == 0.5).all()
    with pytest.raises(ActionError, match=r"action of env 1 is array\(\[2\., 0\.\]"):
        write(np.array([[0, 0], [2, 0], [0, 0]], np.float64))


@pytest.mark.parametrize("space", ["box-f32", "multidiscrete", "discrete"])
def test_actions_of_the_leafs_own_dtype_are_checked_then_copied_whole(space: str) -> None:
    """The common case of all: each value still checked against its own element's bounds, then one copy."""
    gym_space = SPACES[space]
    layout = SpaceLayout(gym_space, "action")
    checker = ActionChecker(layout, 4)
    out = layout.empty(4)
    write = checker.writer(out)
    actions = np.stack([gym_space.sample() for _ in range(4)]).astype(out[0].dtype)
    write(actions)
    np.testing.assert_array_equal(out[0], actions)
    write(out[0])  # the writer's own array as the actions: an overlapping copy, values unchanged
    np.testing.assert_array_equal(out[0], actions)
    for bad in (np.asarray(layout.leaves[0].field.high) + 1, np.asarray(layout.leaves[0].field.low) - 1):
        outside = actions.copy()
        outside[2] = bad if outside.ndim == 1 else np.broadcast_to(bad, outside[2].shape)
        with pytest.raises(ActionError, match="action of env 2"):
            write(outside)


def test_actions_of_no_element_are_written() -> None:
    layout = SpaceLayout(gym.spaces.Box(-1, 1, (0,), np.float32), "action")
    out = layout.empty(3)
    writer = _core.ActionWriter(
        out[0], [3, 0], [], [], ELEMENT_CODES[out[0].dtype], list(ELEMENT_CODES.items()), np.ndarray
    )
    assert writer.write(np.zeros((3, 0), np.float32))


def test_a_writer_released_on_another_thread_is_freed_without_complaint() -> None:
    """The garbage collector may free a writer on any thread (a probe's daemon thread did, in CI)."""
    import sys
    import threading

    layout = SpaceLayout(gym.spaces.Discrete(3), "action")
    out = layout.empty(2)
    holder: list[Any] = [
        _core.ActionWriter(
            out[0], [2], [0.0], [2.0], ELEMENT_CODES[out[0].dtype], list(ELEMENT_CODES.items()), np.ndarray
        )
    ]
    complaints: list[Any] = []
    previous = sys.unraisablehook
    sys.unraisablehook = complaints.append
    try:
        freer = threading.Thread(target=holder.clear)
        freer.start()
        freer.join(30)
    finally:
        sys.unraisablehook = previous
    assert not freer.is_alive()
    assert not complaints, [str(c.exc_value) for c in complaints]
