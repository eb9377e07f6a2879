"""Info entries as fields (``pycollect._steps.info_fields``) give exactly gymnasium's vector infos.

Each test builds the infos of one step both ways: gymnasium's ``VectorEnv._add_info``, env by
env, over what each env returned; and pycollect's, where every entry that fits a field is
written there (:meth:`InfoArrays.split`, the Python side of what the native stepper does) and
the rest travels as material, merged by :class:`InfoMerger`. Keys, dtypes, values and masks
must be equal, also where an entry's value is of another kind than its field's on some env
(that key is rebuilt env by env).
"""

from __future__ import annotations

import threading
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pycollect import PyCollectWarning
from pycollect._steps.info_fields import InfoArrays, InfoField, InfoKind, info_field, probe_info_fields
from pycollect._steps.infos import InfoMerger


class _Gymnasium(gym.vector.VectorEnv[Any, Any, Any]):
    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs


def gymnasium_infos(infos: list[dict[str, Any] | None]) -> dict[str, Any]:
    vector = _Gymnasium(len(infos))
    out: dict[str, Any] = {}
    for env, info in enumerate(infos):
        if info:
            out = vector._add_info(out, info, env)
    return out


def assert_same_infos(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    assert set(ours) == set(theirs), (sorted(ours), sorted(theirs))
    for key, value in theirs.items():
        mine = ours[key]
        if isinstance(value, dict):
            assert_same_infos(mine, value)
            continue
        assert isinstance(mine, np.ndarray) and (mine.dtype, mine.shape) == (value.dtype, value.shape), key
        if value.dtype == object:
            assert list(mine) == list(value), key
        else:
            np.testing.assert_array_equal(mine, value, err_msg=key)


def pycollect_infos(fields: tuple[InfoField, ...], infos: list[dict[str, Any] | None]) -> dict[str, Any]:
    arrays = InfoArrays.allocate(fields, len(infos), finals=False, info_keys=None)
    material = []
    for env, info in enumerate(infos):
        arrays.clear(env)
        if info:
            left = arrays.split(dict(info), env)
            if left:
                material.append((env, left, None))
    return InfoMerger(len(infos)).merge([(0, material)] if material else [], fields=arrays)


VALUES = st.one_of(
    st.integers(-5, 5),
    st.integers(2**63, 2**64),  # too large for an int64 field
    st.floats(-3, 3, allow_nan=False),
    st.booleans(),
    st.sampled_from([np.float32(1.5), np.int16(-3), np.uint8(7), np.bool_(True)]),
    st.sampled_from([np.arange(3, dtype=np.float32), np.ones((2, 2), np.int64), np.zeros(3, np.float64)]),
    st.sampled_from(["text", None]),
)
# An entry is a dict on every env or on none (gymnasium's merge of a dict and a number is no array).
INFO = st.fixed_dictionaries(
    {}, optional={"lives": VALUES, "x": VALUES, "frame": VALUES, "episode": st.just({"r": 1.0, "l": 3})}
)


@settings(max_examples=300, deadline=None)
@given(
    infos=st.lists(st.none() | INFO, min_size=1, max_size=5),
    probe=st.lists(INFO, max_size=3),
)
def test_fields_and_material_merge_to_gymnasiums_infos(
    infos: list[dict[str, Any] | None], probe: list[dict[str, Any]]
) -> None:
    """Whatever the fields (found from other infos) and whatever each env returns, the same infos."""
    fields: dict[str, InfoField | None] = {}
    for info in probe:
        for key, value in info.items():
            field = info_field(key, value)
            fields[key] = field if fields.get(key, field) == field else None
    found = tuple(field for field in fields.values() if field is not None)
    try:
        theirs = gymnasium_infos(infos)
    except (AttributeError, OverflowError, TypeError, ValueError):  # gymnasium cannot merge these (an int too large...)
        return
    assert_same_infos(pycollect_infos(found, infos), theirs)


def test_a_value_of_another_kind_than_its_field_is_rebuilt_env_by_env() -> None:
    fields = (InfoField("lives", InfoKind.INT, np.dtype(np.int64)),)
    # env 0's value is a float: gymnasium makes a float64 array from it, and env 2's int goes in
    infos = [{"lives": 2.5}, None, {"lives": 3}]
    ours = pycollect_infos(fields, infos)
    assert ours["lives"].dtype == np.float64
    assert_same_infos(ours, gymnasium_infos(infos))


@pytest.mark.parametrize(
    ("value", "kind", "dtype", "shape"),
    [
        (3, InfoKind.INT, np.int64, ()),
        (0.5, InfoKind.FLOAT, np.float64, ()),
        (True, InfoKind.BOOL, np.bool_, ()),
        (np.float32(1), InfoKind.SCALAR, np.float32, ()),
        (np.zeros((2, 3), np.uint8), InfoKind.ARRAY, np.uint8, (2, 3)),
    ],
)
def test_the_kinds_of_fields(value: Any, kind: InfoKind, dtype: Any, shape: tuple[int, ...]) -> None:
    field = info_field("k", value)
    assert field is not None and (field.kind, field.dtype, field.shape) == (kind, np.dtype(dtype), shape)
    assert field.fits(value)


@pytest.mark.parametrize(
    "value",
    [2**63, "text", None, {"r": 1}, [1, 2], np.bool_(True), np.complex64(1), np.zeros(5000), np.zeros(2, object)],
    ids=["huge-int", "str", "none", "dict", "list", "numpy-bool", "complex", "large-array", "objects"],
)
def test_values_gymnasium_keeps_in_object_arrays_or_that_are_too_large_have_no_field(value: Any) -> None:
    assert info_field("k", value) is None


class _InfoEnv(gym.Env[np.ndarray, int]):
    """Infos with a fixed entry, one whose kind changes, one that is a dict, one only at episode ends."""

    observation_space = gym.spaces.Box(-1, 1, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        self.t = 0
        return np.zeros(1, np.float32), {"lives": 3, "changes": 1, "nested": {"a": 1}}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.t += 1
        end = self.t == 2
        info: dict[str, Any] = {"lives": 3 - self.t, "changes": 1.5, "nested": {"a": 2}}
        if end:
            info["episode"] = {"r": 1.0}
        return np.zeros(1, np.float32), 0.0, end, False, info


def test_probing_finds_the_entries_of_one_kind_and_keeps_to_info_keys() -> None:
    fields = probe_info_fields(_InfoEnv(), None, timeout_s=60)
    assert [(f.key, f.kind) for f in fields] == [("lives", InfoKind.INT)]
    assert probe_info_fields(_InfoEnv(), ("changes", "nested"), timeout_s=60) == ()
    assert probe_info_fields(_InfoEnv(), (), timeout_s=60) == ()


def test_a_probe_that_raises_gives_no_fields() -> None:
    class Broken(_InfoEnv):
        def step(self, action: int) -> Any:
            raise RuntimeError("no")

    assert probe_info_fields(Broken(), None, timeout_s=60) == ()


def test_fields_pickle_with_numpys_own_dtype_objects() -> None:
    import pickle

    field = InfoField("x", InfoKind.ARRAY, np.dtype(np.float32), (2,))
    again = pickle.loads(pickle.dumps(field))
    assert again == field and again.dtype is np.dtype(np.float32)


def test_a_probe_that_does_not_end_in_time_gives_no_fields_and_says_so() -> None:
    release = threading.Event()

    class Stuck(_InfoEnv):
        def step(self, action: int) -> Any:
            release.wait(60)  # a stuck simulator (released at the end, so that no thread is left behind)
            return super().step(action)

    try:
        with pytest.warns(PyCollectWarning, match=r"did not end within 0.2 s: every info entry travels pickled"):
            assert probe_info_fields(Stuck(), None, timeout_s=0.2) == ()
    finally:
        release.set()
