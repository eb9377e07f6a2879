"""The native stepper (``_core.GroupStepper``, bound to a rollout) stores exactly what the Python loop stores.

The runner hands the common case of a step result (numpy observation leaves of their fields'
dtypes and shapes, in exact dict, OrderedDict and tuple containers for Dict and Tuple
observations, a ``float`` reward, ``bool`` flags) to Rust and checks everything else in Python.
Both paths must give the same batch, whichever envs take which path at which step.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from pycollect import Collector, ConfigError, EnvOutputError
from pycollect._native import _core
from pycollect._steps.checks import OutputChecks
from pycollect._steps.group import EnvGroup
from pycollect._steps.stepper import StepperSpec, native_stepper
from pycollect.testing.envs import CountingEnv, SpacesEnv

pytestmark = pytest.mark.timeout(120)


class LooseTypesEnv(CountingEnv):
    """A CountingEnv whose results, at some steps, are not the exact types (numpy scalars, lists).

    Args:
        every: Steps that return loose types: those whose count is a multiple of ``every``
            (1: every step; 0: never).
    """

    def __init__(self, length: int = 5, every: int = 1) -> None:
        super().__init__(length)
        self.every = every
        self._steps = 0

    def step(self, action: int) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        obs, reward, term, trunc, info = super().step(action)
        self._steps += 1
        if self.every and self._steps % self.every == 0:
            return obs.tolist(), np.float64(reward), np.bool_(term), np.bool_(trunc), info
        return obs, reward, term, trunc, info


class OddLooseEnv(LooseTypesEnv):
    """Loose types at every step in every other env (the 2nd, 4th, ... built): at one step, some
    episodes end in the native path and some in the Python one."""

    built = 0

    def __init__(self, length: int = 5) -> None:
        super().__init__(length, every=OddLooseEnv.built % 2)
        OddLooseEnv.built += 1


class NestedArraysEnv(gym.Env[Any, np.int64]):
    """A Dict observation with a nested Dict and a Tuple, every leaf an exact numpy array.

    Args:
        container: ``"dict"`` or ``"ordered"`` (``collections.OrderedDict``, as dm_control returns).
        length: Steps per episode.
        loose_every: Steps whose count is a multiple of it return one leaf as a list (0: never),
            so those steps take the Python path.
        with_tuple: Whether the observation has the Tuple (vector envs take Tuple spaces, a
            Collector does not).
    """

    def __init__(self, container: str = "dict", length: int = 4, loose_every: int = 0, with_tuple: bool = True) -> None:
        spaces: dict[str, gym.Space[Any]] = {
            "position": gym.spaces.Box(-100, 100, (2,), np.float32),
            "inner": gym.spaces.Dict({"velocity": gym.spaces.Box(-100, 100, (3,), np.float64)}),
        }
        if with_tuple:
            spaces["pair"] = gym.spaces.Tuple(
                (gym.spaces.Box(0, 100, (1,), np.int64), gym.spaces.Box(0, 255, (2, 2), np.uint8))
            )
        self.observation_space = gym.spaces.Dict(spaces)
        self.with_tuple = with_tuple
        self.action_space = gym.spaces.Discrete(2)
        self.mapping = OrderedDict if container == "ordered" else dict
        self.length, self.loose_every = length, loose_every
        self._t, self._base, self._steps = 0, 0, 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self._t, self._base = 0, int(self.np_random.integers(0, 50))
        return self._obs(), {}

    def step(self, action: np.int64) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self._t += 1
        self._steps += 1
        end = self._t >= self.length
        obs = self._obs(int(action))
        if self.loose_every and self._steps % self.loose_every == 0:
            obs["inner"]["velocity"] = obs["inner"]["velocity"].tolist()
        return obs, float(self._t + int(action)), end and self._base % 2 == 0, end and self._base % 2 == 1, {}

    def _obs(self, action: int = 0) -> Any:
        t, base, mapping = self._t, self._base, self.mapping
        obs = mapping(
            position=np.array([t, base], np.float32),
            inner=mapping(velocity=np.array([t / 2, base / 3, action], np.float64)),
        )
        if self.with_tuple:
            obs["pair"] = (np.array([t * base], np.int64), np.full((2, 2), (t + base) % 256, np.uint8))
        return obs


def _batches(every: int, **kwargs: Any) -> list[Any]:
    env_kwargs = {"length": 5, "every": every}
    with Collector(LooseTypesEnv, seed=5, frames_per_batch=24, envs_per_worker=3, env_kwargs=env_kwargs, **kwargs) as c:
        return [c.next_batch() for _ in range(3)]


@pytest.mark.parametrize("every", [1, 2, 3])
@pytest.mark.parametrize("limit", [None, 3])
def test_native_and_python_paths_store_the_same_batches(every: int, limit: int | None) -> None:
    exact = _batches(0, max_frames_per_traj=limit)
    mixed = _batches(every, max_frames_per_traj=limit)
    for a, b in zip(exact, mixed, strict=True):
        assert set(a.keys(True, True)) == set(b.keys(True, True))
        for key in a.keys(True, True):
            assert torch.equal(a[key], b[key]), key


def test_a_limit_truncates_in_the_native_path() -> None:
    (batch, *_) = _batches(0, max_frames_per_traj=3)
    truncated = batch["next", "truncated"][0, :, 0].tolist()
    assert truncated == [False, False, True] * 2 + [False, False]
    assert batch["next", "observation"][0, :, 1].tolist() == [1, 2, 3] * 2 + [1, 2]


class WrongShapeEnv(CountingEnv):
    """Returns an observation of the wrong shape at step 3: the Python checks must name it."""

    def step(self, action: int) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, term, trunc, info = super().step(action)
        if self._t == 3:
            return np.zeros(3, np.float32), reward, term, trunc, info
        return obs, reward, term, trunc, info


def test_an_odd_result_still_gets_the_python_checks() -> None:
    with (
        Collector(WrongShapeEnv, frames_per_batch=8, env_kwargs={"length": 9}) as collector,
        pytest.raises(EnvOutputError, match="shape"),
    ):
        collector.next_batch()


def _flags(steps: int, envs: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.zeros((steps, envs)), np.zeros((steps, envs), bool), np.zeros((steps, envs), bool)


def _leaf(frames: np.ndarray, path: tuple[Any, ...] = ()) -> tuple[Any, np.ndarray, tuple[int, ...], np.dtype[Any]]:
    """A leaf as ``_NativeStep`` takes it: its frames are ``[K, T, *shape]``."""
    return path, frames, frames.shape[2:], frames.dtype


class _Stepped:
    """An env that is only its ``step`` (a rollout's group resets nothing)."""

    def __init__(self, step: Any) -> None:
        self.step = step

    def reset(self, **kwargs: Any) -> Any:
        raise AssertionError("a rollout's group resets no env: the runner does")


class _NativeStep:
    """A rollout's group (``EnvGroup.for_rollout``) bound to these arrays, and its native step alone.

    Called with ``(t, actions)``: the native stepper's step ``t`` of every env, as
    ``EnvGroup.step_column`` makes it before the Python path: the stored envs whose episode ended,
    and the others with their results (both in env order).
    """

    def __init__(
        self,
        steps: list[Any],
        leaves: list[tuple[Any, np.ndarray, tuple[int, ...], np.dtype[Any]]],
        rewards: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
    ) -> None:
        described = [(path, n, dtype, shape) for n, (path, _, shape, dtype) in enumerate(leaves)]
        checks = OutputChecks((), "env", None)
        self.group = EnvGroup.for_rollout(
            [_Stepped(step) for step in steps], described, checks, max_frames_per_traj=None, keeps_info=False
        )
        self.group.bind_rollout([frames for _, frames, _, _ in leaves], rewards, terminated, truncated)
        assert self.group._native is not None, "arrays the native stepper cannot write: the Python path"

    def __call__(self, t: int, actions: Any) -> tuple[list[int], list[tuple[int, Any]]]:
        native = self.group._native
        left = native.step(actions, 0, None, t)
        return native.take_ended(), [] if left is None else [(i, raw) for i, _, raw in left]


def test_the_stepper_refuses_arrays_it_cannot_write() -> None:
    env = gym.make("CartPole-v1")
    steps, frames = [env.step], np.zeros((1, 4, 4), np.float32)
    with pytest.raises(AssertionError, match="the Python path"):  # the group checks what the stepper cannot take
        _NativeStep(steps, [((), frames[:, ::2], (4,), frames.dtype)], *_flags(2, 1))
    with pytest.raises(ConfigError, match="rows of leaf 1 holds 64 bytes, not 1 envs x 3 steps x 16 bytes"):
        _NativeStep(steps, [_leaf(np.zeros((1, 3, 4), np.float32)), _leaf(frames)], *_flags(3, 1))
    with pytest.raises(ConfigError, match="an observation has at least one leaf"):
        _NativeStep(steps, [], *_flags(4, 1))
    rewards, terminated, truncated = _flags(4, 1)
    with pytest.raises(ConfigError, match="rewards must have buffer format"):
        _NativeStep(steps, [_leaf(frames)], rewards.astype(np.float32), terminated, truncated)
    terminated.flags.writeable = False
    with pytest.raises(AssertionError, match="the Python path"):
        _NativeStep(steps, [_leaf(frames)], rewards, terminated, truncated)
    env.close()


def test_the_stepper_stores_each_result_where_it_belongs() -> None:
    envs = [CountingEnv(length=2) for _ in range(2)]
    for env in envs:
        env.reset(seed=0)
    frames = np.full((2, 3, 2), -1.0, np.float32)
    rewards, terminated, truncated = _flags(3, 2)
    stepper = _NativeStep([env.step for env in envs], [_leaf(frames)], rewards, terminated, truncated)
    assert stepper(1, np.zeros(2, np.int64)) == ([], [])
    assert frames[:, 1, 1].tolist() == [1.0, 1.0] and (frames[:, [0, 2]] == -1).all()
    assert rewards[1].tolist() == [1.0, 1.0] and not rewards[[0, 2]].any()
    assert not terminated.any() and not truncated.any()
    assert stepper(2, np.zeros(2, np.int64)) == ([0, 1], [])  # both episodes ended, both stored
    assert terminated[2].tolist() == [True, True] and not truncated.any()  # as the envs returned them
    assert frames[:, 2, 1].tolist() == [2.0, 2.0]
    assert stepper(2, np.zeros(2, np.int64))[0] == [0, 1]  # ended again: the flags were taken, not kept
    with pytest.raises(ConfigError, match="step column 3 of arrays with 3 columns"):
        stepper(3, np.zeros(2, np.int64))
    with pytest.raises(ConfigError, match="1 actions for envs 0..2"):
        stepper(0, np.zeros(1, np.int64))


# -- the contract of the two step paths ------------------------------------------------------
#
# The native step (EnvGroup's native stepper) is a strict subset of its Python path (EnvGroup.finish):
# it stores only the common case, returns the stored envs whose episode ended and every other
# env with its result, and counts nothing; the trajectory limit is applied in Python after either
# path.


class _Sub(np.ndarray):
    """An ndarray subclass: not exactly ``numpy.ndarray``, so not the common case."""


def _returning(result: object) -> Any:
    return lambda action: result


def test_the_native_step_returns_exactly_the_envs_it_does_not_store() -> None:
    obs = np.array([1.0, 2.0], np.float32)
    results: dict[str, Any] = {
        "exact": (obs, 0.5, False, False, {}),
        "float64 observation": (obs.astype(np.float64), 0.5, False, False, {}),
        "byte-swapped observation": (obs.astype(">f4"), 0.5, False, False, {}),  # equal values, other dtype
        "numpy float reward": (obs, np.float64(0.5), False, False, {}),
        "int reward": (obs, 1, False, False, {}),
        "numpy bool flag": (obs, 0.5, np.bool_(True), False, {}),
        "int flag": (obs, 0.5, False, 0, {}),
        "dict observation": ({"observation": obs}, 0.5, False, False, {}),
        "list observation": ([1.0, 2.0], 0.5, False, False, {}),
        "strided observation": (np.array([1, 0, 2, 0], np.float32)[::2], 0.5, False, False, {}),
        "wrong shape": (np.zeros(3, np.float32), 0.5, False, False, {}),
        "ndarray subclass": (obs.view(_Sub), 0.5, False, False, {}),
        "a list, not a tuple": [obs, 0.5, False, False, {}],
        "four items": (obs, 0.5, False, {}),
        "terminated": (obs * 2, 2.0, True, False, {}),
        "truncated": (obs * 3, 3.0, False, True, {}),
        "both": (obs * 4, 4.0, True, True, {}),
    }
    stored, ends = {"exact", "terminated", "truncated", "both"}, ["terminated", "truncated", "both"]
    names = list(results)
    steps, k = 2, len(names)
    frames = np.full((k, steps, 2), -1.0, np.float32)
    rewards, terminated, truncated = np.full((steps, k), -7.0), np.zeros((steps, k), bool), np.zeros((steps, k), bool)
    stepper = _NativeStep([_returning(results[n]) for n in names], [_leaf(frames)], rewards, terminated, truncated)
    ended, left = stepper(1, np.zeros(k, np.int64))
    assert [names[i] for i in ended] == ends
    assert [names[i] for i, _ in left] == [n for n in names if n not in stored]  # in env order
    assert all(result is results[names[i]] for i, result in left)  # the env's own result, untouched
    for i, name in enumerate(names):
        if name in stored:
            observation, reward, term, trunc, _ = results[name]
            assert frames[i, 1].tolist() == observation.tolist() and rewards[1, i] == reward
            assert (terminated[1, i], truncated[1, i]) == (term, trunc)  # as returned: nothing counted
        else:  # nothing written for an env left to Python
            assert (frames[i] == -1).all() and rewards[1, i] == -7.0 and not terminated[1, i] and not truncated[1, i]
    assert (frames[:, 0] == -1).all() and (rewards[0] == -7.0).all()  # and nothing at another step


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))

    class Argmax(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def forward(self, observation: torch.Tensor) -> torch.Tensor:
            return self.net(observation).argmax(-1)

    return Argmax()


def _lstm() -> Any:
    """A recurrent actor (carried state, is_init, a log-prob output); torchrl imported only here."""
    pytest.importorskip("torchrl")
    from tensordict.nn import TensorDictModule, TensorDictSequential
    from torch.distributions import Categorical
    from torchrl.modules import LSTMModule, ProbabilisticActor

    torch.manual_seed(0)
    lstm = LSTMModule(input_size=4, hidden_size=8, in_key="observation", out_key="embed")
    head = TensorDictModule(torch.nn.Linear(8, 2), in_keys=["embed"], out_keys=["logits"])
    body = TensorDictSequential(lstm, head)
    return ProbabilisticActor(body, in_keys=["logits"], distribution_class=Categorical, return_log_prob=True)


def _collect(monkeypatch: pytest.MonkeyPatch, native: bool, env: Any, policy: Any, **kwargs: Any) -> list[Any]:
    """Three in-process batches, with the native stepper allowed or not (checked to be used where allowed)."""
    from pycollect._rollout import runner

    used: list[bool] = []
    bind = EnvGroup.bind_rollout

    def spy(self: EnvGroup, *args: Any, **kwargs: Any) -> None:
        bind(self, *args, **kwargs)
        used.append(self._native is not None)

    with monkeypatch.context() as patch:
        patch.setattr(runner.EnvRunner, "native", native)
        patch.setattr(EnvGroup, "bind_rollout", spy)
        with Collector(env, policy, seed=3, **kwargs) as collector:
            batches = [collector.next_batch() for _ in range(3)]
    assert used == [native] * 3
    return batches


@pytest.mark.parametrize(
    ("env", "policy", "kwargs"),
    [
        ("CartPole-v1", None, {"max_frames_per_traj": 9}),
        ("CartPole-v1", _mlp, {"max_frames_per_traj": 13}),
        ("CartPole-v1", _lstm, {}),  # carried state, is_init and a log-prob output
        (CountingEnv, None, {"env_kwargs": {"length": 4}}),
        (LooseTypesEnv, None, {"env_kwargs": {"length": 5, "every": 3}, "max_frames_per_traj": 3}),
        (OddLooseEnv, None, {"env_kwargs": {"length": 4}}),  # ends of both paths at one step, reset in env order
        (NestedArraysEnv, None, {"env_kwargs": {"with_tuple": False}, "max_frames_per_traj": 3}),
        (
            NestedArraysEnv,
            None,
            {"env_kwargs": {"container": "ordered", "length": 5, "loose_every": 3, "with_tuple": False}},
        ),
        (SpacesEnv, None, {"env_kwargs": {"observation": "dict"}}),  # an int leaf: every step in Python
    ],
    ids=[
        "cartpole-random-limit",
        "cartpole-mlp-limit",
        "cartpole-lstm",
        "counting",
        "loose-types-limit",
        "odd-loose",
        "nested-dict-limit",
        "nested-ordered-dict-loose",
        "spaces-dict",
    ],
)
def test_the_python_path_alone_gives_the_native_paths_batches(
    monkeypatch: pytest.MonkeyPatch, env: Any, policy: Any, kwargs: dict[str, Any]
) -> None:
    make = (lambda: None) if policy is None else policy
    native = _collect(monkeypatch, True, env, make(), frames_per_batch=3 * 20, envs_per_worker=3, **kwargs)
    python = _collect(monkeypatch, False, env, make(), frames_per_batch=3 * 20, envs_per_worker=3, **kwargs)
    ended = False
    for a, b in zip(native, python, strict=True):
        assert set(a.keys(True, True)) == set(b.keys(True, True))
        for key in a.keys(True, True):
            assert torch.equal(a[key], b[key]), key
        ended |= bool(a["next", "done"][:, :-1].any())
    assert ended  # episodes end inside the rollouts, so the resets are compared too


@pytest.mark.parametrize("native", [True, False])
def test_the_limit_counts_a_trajectory_across_rollouts(monkeypatch: pytest.MonkeyPatch, native: bool) -> None:
    batches = _collect(
        monkeypatch, native, CountingEnv, None, frames_per_batch=7, env_kwargs={"length": 100}, max_frames_per_traj=5
    )
    truncated = torch.cat([b["next", "truncated"][0, :, 0] for b in batches])
    steps = torch.cat([b["next", "observation"][0, :, 1] for b in batches])
    assert torch.nonzero(truncated).flatten().tolist() == [4, 9, 14, 19]  # every 5th step, across batches
    assert steps.tolist() == [1, 2, 3, 4, 5] * 4 + [1]
    assert not any(b["next", "terminated"].any() for b in batches)


class BadAtStepEnv(CountingEnv):
    """Env 1 of a collector returns a bad reward at step 3 and env 2 a bad observation at step 3."""

    instances = 0

    def __init__(self) -> None:
        super().__init__(length=100)
        self.index = BadAtStepEnv.instances
        BadAtStepEnv.instances += 1

    def step(self, action: int) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        obs, reward, term, trunc, info = super().step(action)
        if self._t == 3 and self.index % 3 == 2:
            return np.zeros(3, np.float32), reward, term, trunc, info
        if self._t == 3 and self.index % 3 == 1:
            return obs, "bad", term, trunc, info
        return obs, reward, term, trunc, info


def test_both_paths_raise_the_same_error(monkeypatch: pytest.MonkeyPatch) -> None:
    messages = []
    for native in (True, False):
        BadAtStepEnv.instances = 0
        with pytest.raises(EnvOutputError) as raised:
            _collect(monkeypatch, native, BadAtStepEnv, None, frames_per_batch=3 * 8, envs_per_worker=3)
        messages.append(str(raised.value))
    assert messages[0] == messages[1]
    assert "env 1" in messages[0] and "at step 3 of this rollout" in messages[0] and "reward" in messages[0]


def test_a_rollout_stepper_stores_a_step_whatever_its_info_dict_holds() -> None:
    obs = np.array([1.0, 2.0], np.float32)

    def env(info: Any) -> Any:
        return lambda action: (obs, 0.5, False, False, info)

    steps = [env({}), env({"lives": 3, "episode": {"r": 1.0}}), env({}), env(None)]
    frames = np.zeros((4, 1, 2), np.float32)
    rollout = _NativeStep(steps, [_leaf(frames)], *_flags(1, 4))
    ended, left = rollout(0, np.zeros(4, np.int64))
    assert ended == [] and [i for i, _ in left] == [3]  # a rollout keeps no info entry: every dict is stored
    assert (frames[:3, 0] == obs).all() and not frames[3].any()  # an info that is no dict: the Python path's


def test_the_stepper_stores_every_leaf_of_a_nested_observation_or_none() -> None:
    f32, f64, i64, u8 = (np.dtype(t) for t in (np.float32, np.float64, np.int64, np.uint8))
    position, velocity = np.full((6, 1, 2), -1, f32), np.full((6, 1, 3), -1, f64)
    count, image = np.full((6, 1, 1), -1, i64), np.full((6, 1, 2, 2), 9, u8)
    leaves = [
        _leaf(position, ("position",)),
        _leaf(velocity, ("inner", "velocity")),
        _leaf(count, ("pair", 0)),
        _leaf(image, ("pair", 1)),
    ]

    def obs(mapping: Any = dict, **replace: Any) -> Any:
        parts = {
            "position": np.array([1, 2], f32),
            "inner": mapping(velocity=np.array([3.0, 4.0, 5.0])),
            "pair": (np.array([6]), np.zeros((2, 2), u8)),
            "extra": "ignored, as the Python path ignores it",
            **replace,
        }
        return mapping(parts)

    class Mapping(dict):  # type: ignore[type-arg]  # a dict subclass may look keys up its own way
        pass

    results = {
        "dict": obs(),
        "ordered": obs(OrderedDict),
        "missing key": {k: v for k, v in obs().items() if k != "position"},
        "list leaf": obs(pair=(np.array([6]), [[0, 0], [0, 0]])),
        "list, not tuple": obs(pair=[np.array([6]), np.zeros((2, 2), u8)]),
        "dict subclass": obs(Mapping),
    }
    names = list(results)
    rewards, terminated, truncated = _flags(1, len(names))
    steps = [_returning((results[n], 1.0, False, False, {})) for n in names]
    stepper = _NativeStep(steps, leaves, rewards, terminated, truncated)
    ended, left = stepper(0, np.zeros(len(names), np.int64))
    assert ended == [] and [names[i] for i, _ in left] == [
        "missing key",
        "list leaf",
        "list, not tuple",
        "dict subclass",
    ]
    for i in (0, 1):
        assert position[i, 0].tolist() == [1, 2] and velocity[i, 0].tolist() == [3, 4, 5]
        assert count[i, 0].tolist() == [6] and (image[i, 0] == 0).all()
    # Nothing of an env left to Python is written, not even the leaves that would have fitted.
    assert (position[2:] == -1).all() and (velocity[2:] == -1).all() and (count[2:] == -1).all()
    assert (image[2:] == 9).all() and rewards[0].tolist() == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]


def test_the_native_stepper_steps_a_vector_env_of_nested_observations() -> None:
    from pycollect import make_vec

    env = make_vec(NestedArraysEnv, 2, num_workers=0, env_kwargs={"container": "ordered"})
    try:
        assert env._backend.group._native is not None  # type: ignore[attr-defined]
        env.reset(seed=1)
        obs, *_ = env.step(np.array([1, 0]))
        assert obs["inner"]["velocity"][:, 2].tolist() == [1.0, 0.0]
        assert obs["pair"][1].shape == (2, 2, 2)
    finally:
        env.close()


def test_a_rollouts_group_truncates_at_the_limit_natively_and_resets_nothing() -> None:
    envs = [CountingEnv(length=100), CountingEnv(length=100)]
    for env in envs:
        env.reset(seed=0)
    frames = np.zeros((2, 4, 2), np.float32)
    checks = OutputChecks((), "env", None)
    group = EnvGroup.for_rollout(
        [_Stepped(env.step) for env in envs],
        [((), 0, frames.dtype, (2,))],
        checks,
        max_frames_per_traj=2,
        keeps_info=False,
    )
    rewards, terminated, truncated = _flags(4, 2)
    group.bind_rollout([frames], rewards, terminated, truncated)
    assert group._native is not None  # the native stepper applies the limit, in DISABLED mode
    assert group.step_column(0, [0, 0]) == []
    assert group.step_column(1, [0, 0]) == [0, 1]  # both reached 2 steps: cut, flagged, not reset
    assert truncated[:2].tolist() == [[False, False], [True, True]] and not terminated.any()
    group.start_episodes([0])  # the runner reset env 0 only (a _Stepped env would raise if the group did)
    assert group.step_column(2, [0, 0]) == [1]  # env 1's episode went on counting: 3 steps
    assert group.episode_lengths.tolist() == [1, 3]


def test_the_native_stepper_refuses_a_limit_in_next_step_mode() -> None:
    env = gym.make("CartPole-v1")
    frames = np.zeros((1, 1, 4), np.float32)
    rewards, terminated, truncated = _flags(1, 1)
    spec = StepperSpec(
        steps=[env.step],
        resets=[env.reset],
        leaves=[([], [4], frames.dtype, 4)],
        rows=[frames],
        finals=None,
        rewards=rewards,
        terminated=terminated,
        truncated=truncated,
        ended=np.zeros(1, bool),
        lengths=np.zeros(1, np.int64),
        mode=_core.AUTORESET_NEXT_STEP,
        max_episode_steps=3,
    )
    with pytest.raises(ConfigError, match="max_episode_steps is for SAME_STEP and DISABLED modes only"):
        native_stepper(spec)
