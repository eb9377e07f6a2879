"""engine="device": one device env stepped in the trainer, rollouts kept on its device, no host copy per step.

The reference is the host engine over the same env: :class:`HostCartPole` is :class:`TorchCartPole`
stepped on the CPU and handed to ``engine="inprocess"`` as a numpy batched env, so the two engines'
batches must be equal value for value (keys, dtypes, shapes, observations, flags, trajectory ids,
truncation, recurrent state) wherever the policy decides the actions.

CUDA: every test that takes ``device`` runs on each device this machine has (the CPU, and CUDA where
it is available), so nothing is skipped where CUDA is absent (CI fails a run with a skipped test)
and the CUDA runs happen wherever a GPU is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule

import pycollect
from pycollect import Collector, CollectorConfig
from pycollect.default_plugins.builtin_engines import Device
from pycollect.engines import Engine
from pycollect.envs import DeviceBatchedEnv, EnvBackend, is_device_env
from pycollect.envs.device import device_env_refusal
from pycollect.envs.source import EnvSource
from pycollect.envs.specs import specs_from_spaces
from pycollect.exceptions import (
    ConfigError,
    ConformanceError,
    EnvCreationError,
    EnvOutputError,
    EnvStateError,
    PolicyError,
)
from pycollect.testing.device_envs import (
    HostCartPole,
    TorchCartPole,
    TorchPointMass,
    forbid_host_transfers,
)
from pycollect.testing.device_envs import (
    SeededArgmax as Argmax,
)

pytestmark = pytest.mark.timeout(120)

DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]
N, T = 6, 40


class PushRight(torch.nn.Module):
    """Always action 1 (and an extra output, a TensorDict policy's ``value``), whatever the observation."""

    def __init__(self) -> None:
        super().__init__()
        self.bias = torch.nn.Parameter(torch.zeros(()))

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return torch.ones(observation.shape[0], dtype=torch.int64, device=observation.device)


def valued_actor() -> TensorDictModule:
    """A TensorDict policy with an extra output: the action and a float ``value``."""

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = Argmax()

        def forward(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return self.net(observation), observation.sum(-1, keepdim=True)

    return TensorDictModule(Net(), in_keys=["observation"], out_keys=["action", "value"])


def lstm_actor() -> Any:
    from policies import lstm_actor as make

    return make()


def device_collector(
    policy: Any = None, *, env: Any = TorchCartPole, device: str = "cpu", **settings: Any
) -> Collector:
    settings.setdefault("frames_per_batch", N * T)
    settings.setdefault("seed", 0)
    kwargs = {"num_envs": N, "device": device, **settings.pop("env_kwargs", {})}
    return Collector(env, policy, engine="device", envs_per_worker=N, env_kwargs=kwargs, **settings)


def host_collector(policy: Any = None, **settings: Any) -> Collector:
    settings.setdefault("frames_per_batch", N * T)
    settings.setdefault("seed", 0)
    return Collector(HostCartPole, policy, envs_per_worker=N, env_kwargs={"num_envs": N}, **settings)


def batches(collector: Collector, count: int) -> list[TensorDictBase]:
    with collector:
        return [collector.next_batch() for _ in range(count)]


def engine(policy: Any = None, *, env: Any = TorchCartPole, device: str = "cpu", **settings: Any) -> Engine:
    """The engine alone, as a collector starts it (its next_batch is what the host-copy checks watch)."""
    settings.setdefault("seed", 0)
    config, source = pycollect.plugins.resolve(
        CollectorConfig(frames_per_batch=N * T, envs_per_worker=N, engine="device", **settings),
        env,
        {"num_envs": N, "device": device},
    )
    assert isinstance(config.engine, Device)
    return config.engine.start(config, source, policy, policy if isinstance(policy, torch.nn.Module) else None)


def leaves(batch: TensorDictBase) -> dict[Any, torch.Tensor]:
    return {
        key if isinstance(key, tuple) else (key,): batch.get(key)
        for key in batch.keys(include_nested=True, leaves_only=True)
    }


def assert_same_layout(device_batch: TensorDictBase, host_batch: TensorDictBase) -> None:
    ours, theirs = leaves(device_batch), leaves(host_batch)
    assert sorted(map(str, ours)) == sorted(map(str, theirs))
    for key, value in theirs.items():
        assert ours[key].dtype == value.dtype, key
        assert ours[key].shape == value.shape, key
    assert device_batch.batch_size == host_batch.batch_size
    assert device_batch.names == host_batch.names == [None, "time"]


def assert_equal(device_batches: Sequence[TensorDictBase], host_batches: Sequence[TensorDictBase]) -> None:
    for n, (ours, theirs) in enumerate(zip(device_batches, host_batches, strict=True)):
        assert_same_layout(ours, theirs)
        for key, value in leaves(theirs).items():
            assert torch.equal(leaves(ours)[key], value), f"batch {n}, {key}"


# -- the batches ------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_batches_have_the_keys_dtypes_and_shapes_of_inprocess_batches_of_gymnasium_cartpole(device: str) -> None:
    (ours,) = batches(device_collector(device=device), 1)
    with Collector("CartPole-v1", None, frames_per_batch=N * T, envs_per_worker=N, seed=0) as collector:
        theirs = collector.next_batch()
    assert_same_layout(ours, theirs)
    assert ours.device == torch.device(device) or ours.device.type == device
    assert all(value.device.type == device for value in leaves(ours).values())


@pytest.mark.parametrize(
    ("policy", "settings"),
    [
        (Argmax, {}),
        (Argmax, {"max_frames_per_traj": 7}),
        (Argmax, {"reset_at_each_iter": True, "max_frames_per_traj": 30}),
        (valued_actor, {"max_frames_per_traj": 11}),
        (lstm_actor, {}),
        (lstm_actor, {"max_frames_per_traj": 9}),
    ],
    ids=["module", "module-limit", "module-reset-each-iter", "tensordict-extra-output", "lstm", "lstm-limit"],
)
def test_batches_equal_the_inprocess_engines_over_the_same_env_value_for_value(policy: Any, settings: Any) -> None:
    # A long enough run that episodes end by termination, by the limit, and across batches
    ours = batches(device_collector(policy(), **settings), 4)
    theirs = batches(host_collector(policy(), **settings), 4)
    assert_equal(ours, theirs)
    done = torch.stack([batch["next", "done"] for batch in ours])
    assert done.any()


def test_a_dict_observation_and_a_box_action_have_the_layout_a_host_engine_gives_those_spaces() -> None:
    with device_collector(env=TorchPointMass, max_frames_per_traj=20) as collector:
        batch = collector.next_batch()
        fields = {field.key: field for field in collector.fields}
    assert set(leaves(batch)) == set(fields)
    for key, value in leaves(batch).items():
        field = fields[key]
        assert value.shape == (N, T, *field.shape), key
        assert value.dtype == torch.from_numpy(np.empty(0, field.dtype)).dtype, key
    assert ("observation", "position") in fields and ("next", "observation", "velocity") in fields
    action = batch["action"]
    assert action.dtype == torch.float32 and bool((action.abs() <= 1).all()) and action.std() > 0.1


def test_the_collector_counts_the_episodes_the_inprocess_engine_counts() -> None:
    with (
        device_collector(Argmax(), max_frames_per_traj=15) as ours,
        host_collector(Argmax(), max_frames_per_traj=15) as theirs,
    ):
        for _ in range(3):
            ours.next_batch()
            theirs.next_batch()
        assert ours.episodes.count == theirs.episodes.count > 0
        assert ours.episodes.return_sum == theirs.episodes.return_sum


class BitPatterns(DeviceBatchedEnv):
    """Sub-envs that never end, whose observations are fixed arbitrary bytes: step ``k`` returns ``frames[k]``.

    A Dict of three leaves whose frames the engine moves as different element types: float32
    ``(4,)`` (16 bytes), float64 ``(3,)`` (24 bytes) and uint8 ``(5,)``; the float bits include NaN
    payloads, signalling NaNs, infinities, denormals and ``-0.0``.
    """

    final_observation_complete = True
    built: ClassVar[list[BitPatterns]] = []

    def __init__(self, num_envs: int, device: str = "cpu", steps: int = 2 * T + 1) -> None:
        BitPatterns.built.append(self)
        self.num_envs, self.device = num_envs, torch.device(device)
        self.single_observation_space = gym.spaces.Dict(
            {
                "f32": gym.spaces.Box(-np.inf, np.inf, (4,), np.float32),
                "f64": gym.spaces.Box(-np.inf, np.inf, (3,), np.float64),
                "u8": gym.spaces.Box(0, 255, (5,), np.uint8),
            }
        )
        self.single_action_space = gym.spaces.Discrete(2)
        generator = torch.Generator().manual_seed(7)
        special = torch.tensor([0x7FA00001, 0x7FC12345, -(2**31), 1, 0x7F800000, -8388608, 0x7F800001, -1])
        self.frames = []
        for _ in range(steps):
            f32 = torch.randint(-(2**31), 2**31, (num_envs, 4), generator=generator, dtype=torch.int32)
            f32.view(-1)[: len(special)] = special.to(torch.int32)
            f64 = torch.randint(-(2**63), 2**63 - 1, (num_envs, 3), generator=generator, dtype=torch.int64)
            f64[0, 0] = 0x7FF0000000000001  # a signalling NaN
            u8 = torch.randint(0, 256, (num_envs, 5), generator=generator, dtype=torch.uint8)
            self.frames.append({"f32": f32.view(torch.float32), "f64": f64.view(torch.float64), "u8": u8})
        self.frames = [{k: v.to(self.device) for k, v in frame.items()} for frame in self.frames]
        self._step = 0
        self._flags = torch.zeros(num_envs, dtype=torch.bool, device=self.device)

    def reset(self, seeds: Sequence[int] | None = None) -> Any:
        self._step = 0
        return self.frames[0]

    def step(self, actions: torch.Tensor) -> Any:
        self._step += 1
        frame = self.frames[self._step]
        return frame, torch.zeros(self.num_envs, device=self.device), self._flags, self._flags, frame

    def reset_envs(self, mask: torch.Tensor) -> Any:
        return self.frames[self._step]


def bits(value: torch.Tensor) -> torch.Tensor:
    """A tensor's bytes, as integers of its element size (NaNs compare as their bits)."""
    return value.cpu().view({1: torch.uint8, 4: torch.int32, 8: torch.int64}[value.element_size()])


@pytest.mark.parametrize("device", DEVICES)
def test_observations_are_stored_bit_for_bit_whatever_their_dtype(device: str) -> None:
    with device_collector(env=BitPatterns, device=device) as collector:
        runs = [collector.next_batch() for _ in range(2)]
        env = BitPatterns.built[-1]
    for n, batch in enumerate(runs):
        for name in ("f32", "f64", "u8"):
            stored = batch["observation", name]
            following = batch["next", "observation", name]
            for t in range(T):
                assert torch.equal(bits(stored[:, t]), bits(env.frames[n * T + t][name])), (n, name, t)
                assert torch.equal(bits(following[:, t]), bits(env.frames[n * T + t + 1][name])), (n, name, t)


def test_batches_are_contiguous_and_their_memory_is_reused_only_once_the_caller_let_go() -> None:
    with device_collector(Argmax()) as collector:
        first = collector.next_batch()
        assert all(value.is_contiguous() for value in leaves(first).values())
        first.view(-1)  # as another engine's batch
        kept = first["next", "observation"][:, :3]  # a view of one leaf keeps the whole batch's memory
        expected = kept.clone()
        addresses = {value.data_ptr() for value in leaves(first).values()}
        seen = set(addresses)
        del first
        for _ in range(4):
            batch = collector.next_batch()
            held = {value.data_ptr() for value in leaves(batch).values()}
            assert not addresses & held
            seen |= held
        assert torch.equal(kept, expected)
        del kept, batch
        reused = {value.data_ptr() for value in leaves(collector.next_batch()).values()}
        assert reused <= seen  # nothing of the earlier batches is held now: their memory is handed out again


# -- seeds, trajectories, limits, random actions -------------------------------------------


def test_the_same_seed_gives_the_same_batches_and_another_seed_others() -> None:
    first = batches(device_collector(Argmax(), init_random_frames=N * T, seed=5), 3)
    again = batches(device_collector(Argmax(), init_random_frames=N * T, seed=5), 3)
    other = batches(device_collector(Argmax(), init_random_frames=N * T, seed=6), 3)
    for a, b in zip(first, again, strict=True):
        assert all(torch.equal(x, y) for x, y in zip(leaves(a).values(), leaves(b).values(), strict=True))
    assert not torch.equal(first[0]["observation"], other[0]["observation"])
    assert not torch.equal(first[0]["action"], other[0]["action"])


def test_each_sub_env_starts_from_its_own_seed_whatever_the_others() -> None:
    seeds = pycollect.env_seeds(0, N)
    alone = TorchCartPole(1)
    batched = TorchCartPole(N)
    assert torch.equal(alone.reset([seeds[2]])[0], batched.reset(seeds)[2])


def test_trajectory_ids_change_exactly_after_a_done_and_are_handed_out_in_step_then_env_order() -> None:
    runs = batches(device_collector(None, max_frames_per_traj=25), 4)
    ids = torch.cat([batch["collector", "traj_ids"] for batch in runs], dim=1)
    done = torch.cat([batch["next", "done"][..., 0] for batch in runs], dim=1)
    assert torch.equal(ids[:, 1:] != ids[:, :-1], done[:, :-1])
    assert torch.equal(ids[:, 0], torch.arange(N))
    # Each id belongs to one sub-env, and new ids come in order: by step, then by sub-env
    starts = [(t + 1, env) for t in range(ids.shape[1] - 1) for env in range(N) if done[env, t]]
    assert [int(ids[env, t]) for t, env in starts] == list(range(N, N + len(starts)))


def test_max_frames_per_traj_truncates_every_trajectory_at_the_limit() -> None:
    limit = 6
    runs = batches(device_collector(PushRight(), max_frames_per_traj=limit, env_kwargs={"max_episode_steps": None}), 3)
    ids = torch.cat([batch["collector", "traj_ids"] for batch in runs], dim=1)
    truncated = torch.cat([batch["next", "truncated"][..., 0] for batch in runs], dim=1)
    terminated = torch.cat([batch["next", "terminated"][..., 0] for batch in runs], dim=1)
    _, lengths = torch.unique_consecutive(ids.flatten(), return_counts=True)
    assert int(lengths.max()) <= limit
    cut = truncated & ~terminated
    assert cut.any()
    for env, t in cut.nonzero().tolist():
        assert int((ids[env, : t + 1] == ids[env, t]).sum()) == limit  # cut exactly at the limit
    # The frame after a cut starts from a fresh state (the env's reset_envs), not the cut one's next
    for env, t in cut.nonzero().tolist():
        if t + 1 < ids.shape[1]:
            observation = torch.cat([batch["observation"] for batch in runs], dim=1)
            assert bool((observation[env, t + 1].abs() <= 0.05).all())


def test_random_actions_first_then_the_policy() -> None:
    with device_collector(PushRight(), init_random_frames=2 * N * T) as collector:
        first, second, third, fourth = (collector.next_batch() for _ in range(4))
    for batch in (first, second):
        actions = batch["action"]
        assert set(actions.unique().tolist()) == {0, 1}
    for batch in (third, fourth):
        assert bool((batch["action"] == 1).all())


class PickingCartPole(TorchCartPole):
    """TorchCartPole that does not declare its final observations complete: the engine picks per row."""

    final_observation_complete = False


class MarkedCartPole(TorchCartPole):
    """TorchCartPole whose final observation is a marker in the rows of sub-envs that did not end."""

    def __init__(self, num_envs: int, device: str = "cpu", complete: bool = False) -> None:
        super().__init__(num_envs, device, max_episode_steps=10)
        self.final_observation_complete = complete

    def step(self, actions: torch.Tensor) -> Any:
        observation, reward, terminated, truncated, final = super().step(actions)
        final = torch.where((terminated | truncated)[:, None], final, torch.full_like(final, 1234.0))
        return observation, reward, terminated, truncated, final


def test_final_observation_complete_is_off_by_default_and_true_of_the_testing_envs() -> None:
    class Minimal(DeviceBatchedEnv):
        def reset(self, seeds: Sequence[int] | None = None) -> Any: ...
        def step(self, actions: torch.Tensor) -> Any: ...
        def reset_envs(self, mask: torch.Tensor) -> Any: ...

    assert Minimal.final_observation_complete is False
    assert TorchCartPole.final_observation_complete and TorchPointMass.final_observation_complete
    # What it promises: a row of final_observation is the step's own observation where no episode ended
    cartpole, pointmass = TorchCartPole(64, max_episode_steps=20), TorchPointMass(64, max_episode_steps=15)
    cartpole.reset(list(range(64)))
    pointmass.reset(list(range(64)))
    generator = torch.Generator().manual_seed(0)
    ends = 0
    for _ in range(60):
        observation, _, terminated, truncated, final = cartpole.step(torch.randint(0, 2, (64,), generator=generator))
        going = ~(terminated | truncated)
        assert torch.equal(final[going], observation[going])
        observation, _, terminated, truncated, final = pointmass.step(torch.rand(64, 2, generator=generator) * 2 - 1)
        going = ~(terminated | truncated)
        for name in ("position", "velocity"):
            assert torch.equal(final[name][going], observation[name][going])
        ends += int((~going).sum())
    assert ends > 0


@pytest.mark.parametrize(
    ("policy", "settings"),
    [(Argmax, {"max_frames_per_traj": 7}), (lstm_actor, {}), (None, {"max_frames_per_traj": 9})],
    ids=["module-limit", "lstm", "random-limit"],
)
def test_an_env_without_complete_final_observations_gives_the_same_batches(policy: Any, settings: Any) -> None:
    picked = batches(device_collector(policy and policy(), env=PickingCartPole, **settings), 3)
    copied = batches(device_collector(policy and policy(), env=TorchCartPole, **settings), 3)
    assert_equal(picked, copied)
    if policy is not None:  # and the in-process engine's, value for value
        assert_equal(picked, batches(host_collector(policy(), **settings), 3))


@pytest.mark.parametrize("complete", [False, True])
def test_the_flag_decides_whether_final_observation_is_stored_as_it_is(complete: bool) -> None:
    (batch,) = batches(device_collector(Argmax(), env=MarkedCartPole, env_kwargs={"complete": complete}), 1)
    done = batch["next", "done"][..., 0]
    following = batch["next", "observation"]
    assert done.any() and not done.all()
    marked = (following == 1234.0).all(-1)
    if complete:  # every row as the env returned it: the markers too
        assert torch.equal(marked, ~done)
    else:  # the step's observation where no episode ended: the next frame's
        assert not marked.any()
        going = ~done[:, :-1]
        assert torch.equal(following[:, :-1][going], batch["observation"][:, 1:][going])


# -- whole rollouts: random actions, T steps in one env call ---------------------------------


class SteppedCartPole(TorchCartPole):
    """TorchCartPole without a rollout: the engine steps it one step at a time."""

    rollout = DeviceBatchedEnv.rollout


class SteppedPointMass(TorchPointMass):
    """TorchPointMass without a rollout."""

    rollout = DeviceBatchedEnv.rollout


def test_an_env_has_a_rollout_where_its_class_overrides_the_base_classs() -> None:
    assert pycollect.envs.device.has_rollout(TorchCartPole(2)) and pycollect.envs.device.has_rollout(TorchPointMass(2))
    assert not pycollect.envs.device.has_rollout(SteppedCartPole(2))
    # The base class's rollout is T steps, stacked: the meaning every override keeps
    rolled, stepped = TorchCartPole(4, max_episode_steps=9), TorchCartPole(4, max_episode_steps=9)
    rolled.reset([1, 2, 3, 4])
    stepped.reset([1, 2, 3, 4])
    actions = torch.randint(0, 2, (30, 4), generator=torch.Generator().manual_seed(0))
    steps = [stepped.step(row) for row in actions]
    for n, value in enumerate(rolled.rollout(actions)):
        assert torch.equal(value, torch.stack([step[n] for step in steps])), n
    assert bool(torch.stack([step[3] for step in steps]).any())  # the time limit ended episodes within it


@pytest.mark.parametrize(
    ("rolled", "stepped", "policy", "settings"),
    [
        (TorchCartPole, SteppedCartPole, None, {}),
        (TorchCartPole, SteppedCartPole, None, {"reset_at_each_iter": True}),
        (PickingCartPole, SteppedCartPole, None, {"env_kwargs": {"max_episode_steps": 13}}),
        (TorchPointMass, SteppedPointMass, None, {"env_kwargs": {"max_episode_steps": 17}}),
        (TorchCartPole, SteppedCartPole, valued_actor, {"init_random_frames": 2 * N * T}),
        (TorchCartPole, SteppedCartPole, lstm_actor, {"init_random_frames": 2 * N * T}),
    ],
    ids=["random", "random-reset-each-iter", "picking", "dict-box", "extra-output", "lstm"],
)
def test_a_rollout_gives_the_batches_of_the_step_by_step_path_value_for_value(
    rolled: Any, stepped: Any, policy: Any, settings: Any, monkeypatch: Any
) -> None:
    calls: list[int] = []
    rollout = rolled.rollout

    def counted(self: Any, actions: torch.Tensor) -> Any:
        calls.append(actions.shape[0])
        return rollout(self, actions)

    monkeypatch.setattr(rolled, "rollout", counted)
    ours = batches(device_collector(policy and policy(), env=rolled, **settings), 4)
    assert calls == ([T, T] if policy is not None else [T] * 4)  # random batches only, T steps per call
    theirs = batches(device_collector(policy and policy(), env=stepped, **settings), 4)
    assert_equal(ours, theirs)
    done = torch.stack([batch["next", "done"] for batch in ours])
    assert done[:2].any()  # episodes ended within the rolled-out batches


def test_a_trajectory_limit_or_a_policy_steps_one_step_at_a_time(monkeypatch: Any) -> None:
    def refuse(self: Any, actions: torch.Tensor) -> Any:
        raise AssertionError("rollout called")

    monkeypatch.setattr(TorchCartPole, "rollout", refuse)
    batches(device_collector(None, max_frames_per_traj=50), 2)  # a limit may cut within a batch: reset_envs
    batches(device_collector(Argmax()), 2)  # actions that depend on the observations


class Still(DeviceBatchedEnv):
    """Sub-envs that never move nor end, with any action space: the actions are the collector's draws alone.

    Each step's actions, as the env got them, are kept in :attr:`taken`.
    """

    final_observation_complete = True
    taken: ClassVar[list[torch.Tensor]] = []

    def __init__(self, num_envs: int, action_space: gym.Space[Any], device: str = "cpu") -> None:
        self.num_envs, self.device = num_envs, torch.device(device)
        self.single_observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.single_action_space = action_space
        self._observation = torch.zeros(num_envs, 1, device=self.device)
        self._flags = torch.zeros(num_envs, dtype=torch.bool, device=self.device)
        Still.taken = []

    def reset(self, seeds: Sequence[int] | None = None) -> torch.Tensor:
        return self._observation

    def step(self, actions: torch.Tensor) -> Any:
        Still.taken.append(actions.clone())
        zero = torch.zeros(self.num_envs, device=self.device)
        return self._observation, zero, self._flags, self._flags, self._observation

    def reset_envs(self, mask: torch.Tensor) -> torch.Tensor:
        return self._observation


INT64 = np.iinfo(np.int64)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "space",
    [
        gym.spaces.Discrete(2),
        gym.spaces.Discrete(3, start=-1),
        gym.spaces.Discrete(8, start=5),
        gym.spaces.MultiDiscrete([3, 5, 2]),
        gym.spaces.MultiDiscrete(np.full((2, 2), 4)),
        gym.spaces.MultiBinary(5),
        gym.spaces.MultiBinary([2, 3]),
        gym.spaces.Box(0, 6, (2,), np.int32),
        gym.spaces.Box(-128, 127, (3,), np.int8),
        gym.spaces.Box(np.array([0, -(2**62)]), np.array([3, 2**62]), (2,), np.int64),
        gym.spaces.Box(INT64.min, INT64.max, (2,), np.int64),
    ],
    ids=lambda space: repr(space),
)
def test_random_integer_actions_are_uniform_in_the_bounds_in_the_spaces_dtype(device: str, space: Any) -> None:
    envs, steps = 64, 64
    spec = specs_from_spaces(gym.spaces.Box(-1, 1, (1,)), space).action
    kwargs = {"num_envs": envs, "action_space": space}
    runs = [
        batches(
            Collector(
                Still,
                None,
                engine="device",
                envs_per_worker=envs,
                env_kwargs={**kwargs, "device": device},
                frames_per_batch=envs * steps,
                seed=seed,
            ),
            2,
        )
        for seed in (0, 0, 1)
    ]
    actions = runs[0][0]["action"]
    assert actions.shape == (envs, steps, *spec.shape) and actions.device.type == device
    assert actions.dtype == torch.from_numpy(np.empty(0, spec.dtype)).dtype
    # the env got each step's actions as the batch stores them
    assert torch.equal(torch.stack(Still.taken[-steps:], 1), runs[2][1]["action"])
    assert torch.equal(actions, runs[1][0]["action"]) and torch.equal(runs[0][1]["action"], runs[1][1]["action"])
    assert not torch.equal(actions, runs[2][0]["action"]) and not torch.equal(actions, runs[0][1]["action"])
    values = actions.reshape(-1, *spec.shape).cpu().to(torch.float64).numpy()
    low, high = np.broadcast_to(spec.low, spec.shape), np.broadcast_to(spec.high, spec.shape)
    assert (values >= low).all() and (values <= high).all()
    draws = values.shape[0]
    for index in np.ndindex(*spec.shape):
        column, lo, hi = values[(slice(None), *index)], low[index], high[index]
        if hi - lo < 256:  # every value, about as often as the others (a loose chi-square bound)
            counts = np.array([(column == v).sum() for v in range(int(lo), int(hi) + 1)])
            expected = draws / len(counts)
            assert ((counts - expected) ** 2 / expected).sum() < 3 * len(counts) + 30, (index, counts)
        else:  # many values: spread over the range
            assert len(np.unique(column)) > draws // 2
            assert column.min() < lo + (hi - lo) / 4 and column.max() > hi - (hi - lo) / 4


# -- zero host copies ----------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("env", "policy", "settings"),
    [
        (TorchCartPole, Argmax, {}),
        (TorchCartPole, valued_actor, {"max_frames_per_traj": 5, "reset_at_each_iter": True}),
        (TorchCartPole, lstm_actor, {"max_frames_per_traj": 5}),
        (TorchPointMass, None, {"max_frames_per_traj": 5}),
        (TorchPointMass, None, {}),
        (TorchCartPole, lstm_actor, {"random_actions": True}),
    ],
    ids=["module", "tensordict-limit-reset", "lstm-limit", "dict-random", "dict-rollout", "lstm-rollout"],
)
def test_next_batch_converts_nothing_for_the_host_and_moves_nothing_off_the_device(
    device: str, env: Any, policy: Any, settings: Any
) -> None:
    module = None if policy is None else policy()
    if isinstance(module, torch.nn.Module):
        module.to(device)
    random = settings.pop("random_actions", module is None)  # random actions with a policy: init_random_frames
    started = engine(module, env=env, device=device, **settings)
    try:
        started.next_batch(random_actions=random, policy_version=0)  # the first reset takes the seeds
        with forbid_host_transfers(device):
            # numpy, cpu, item, tolist, bool/int/float, numpy.asarray, host-reading aten ops, cross-device copies
            out = [started.next_batch(random_actions=random, policy_version=n) for n in (1, 2, 3)]
    finally:
        started.close()
    here = torch.device(device)
    for batch in out:
        assert all(value.device.type == here.type for value in leaves(batch).values())
    assert out[-1]["policy_version"].unique().tolist() == [3]


def test_the_host_transfer_guard_catches_what_would_stall_a_gpu() -> None:
    x, mask = torch.ones(3), torch.tensor([True, False, True])
    for read in (
        lambda: x.numpy(),
        lambda: x.cpu(),
        lambda: x.sum().item(),
        lambda: x.tolist(),
        lambda: bool(mask.any()),
        lambda: np.asarray(x),
        lambda: x[mask],
        lambda: mask.nonzero(),
        lambda: x.to("meta"),
    ):
        with forbid_host_transfers("cpu"), pytest.raises(ConformanceError):
            read()
    with forbid_host_transfers("cpu"):
        torch.where(mask, x, 0.0).cumsum(0)
    assert x.numpy().tolist() == [1.0, 1.0, 1.0]  # everything put back


# -- weights, state, shutdown -------------------------------------------------------------


def test_the_policy_is_the_trainers_object_and_updates_reach_the_next_batch() -> None:
    policy = Argmax()
    with device_collector(policy) as collector:
        collector.next_batch()
        with torch.no_grad():
            policy.linear.bias.copy_(torch.tensor([0.0, 1e6]))  # action 1 from now on
        collector.update_policy_weights_()
        batch = collector.next_batch()
        assert bool((batch["action"] == 1).all())
        assert batch["policy_version"].unique().tolist() == [1]
        learner = Argmax()
        with torch.no_grad():
            learner.linear.bias.copy_(torch.tensor([1e6, 0.0]))
        collector.update_policy_weights_(learner)
        batch = collector.next_batch()
        assert bool((batch["action"] == 0).all())
        assert batch["policy_version"].unique().tolist() == [2]


def test_state_dict_continues_the_trajectory_numbering() -> None:
    with device_collector(None) as collector:
        collector.next_batch()
        collector.next_batch()
        state = collector.state_dict(env_states=False)  # fresh episodes, the numbering carried on
        last = int(collector.next_batch()["collector", "traj_ids"].max())
    assert state["runner"]["next_traj_id"] > N
    with device_collector(None) as resumed:
        resumed.load_state_dict(state)
        first = resumed.next_batch()["collector", "traj_ids"][:, 0]
    assert torch.equal(first, torch.arange(N) + state["runner"]["next_traj_id"])
    assert last >= state["runner"]["next_traj_id"] - 1
    with host_collector(None) as host:  # another engine's state, over another env: refused by name
        host.next_batch()
        host_state = host.state_dict()
    with device_collector(None) as resumed, pytest.raises(ConfigError, match=r"engine: saved 'inprocess'"):
        resumed.load_state_dict(host_state)


POLICIES: dict[str, Any] = {"random": lambda: None, "argmax": Argmax, "lstm": lstm_actor}
RESUMES: dict[str, dict[str, Any]] = {
    "random": {},
    "argmax with a trajectory limit": {"policy": "argmax", "max_frames_per_traj": 7},
    "lstm": {"policy": "lstm"},
    "point mass": {"env": TorchPointMass},
    "random first, reset at each batch": {
        "policy": "argmax",
        "init_random_frames": 2 * N * T,
        "reset_at_each_iter": True,
    },
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", sorted(RESUMES))
@pytest.mark.parametrize("done", [0, 3])
def test_a_resumed_run_makes_the_batches_of_the_uninterrupted_one(device: str, case: str, done: int) -> None:
    settings = dict(RESUMES[case])
    make_policy = POLICIES[settings.pop("policy", "random")]
    env = settings.pop("env", TorchCartPole)
    whole = batches(device_collector(make_policy(), env=env, device=device, **settings), 6)
    with device_collector(make_policy(), env=env, device=device, **settings) as first:
        assert_equal([first.next_batch() for _ in range(done)], whole[:done])
        state = first.state_dict(env_states=True)  # mid-episode: env, observations, streams, ids
    resumed = device_collector(make_policy(), env=env, device=device, resume=state, **settings)
    assert_equal(batches(resumed, 6 - done), whole[done:])


class StatelessCartPole(TorchCartPole):
    """A device env that does not save its state: the base class's refusing methods."""

    get_state = DeviceBatchedEnv.get_state
    set_state = DeviceBatchedEnv.set_state


def test_env_states_of_a_device_env_that_cannot_save_them_are_refused_by_name(tmp_path: Any) -> None:
    with pytest.raises(
        EnvStateError, match=r"env 'callable:StatelessCartPole' cannot: StatelessCartPole of 6 .*get_state"
    ):
        device_collector(None, env=StatelessCartPole, snapshots=True)
    with pytest.raises(EnvStateError, match=r"snapshots=False keeps checkpoints without env states"):
        device_collector(None, env=StatelessCartPole, checkpoint_dir=tmp_path)  # checkpoints save env states
    with device_collector(None, env=StatelessCartPole, checkpoint_dir=tmp_path, snapshots=False) as collector:
        collector.next_batch()  # checkpoints of the counters and weights only, as asked
    with device_collector(None, env=StatelessCartPole) as collector:
        collector.next_batch()
        with pytest.raises(ConfigError, match="keeps no env states"):
            collector.state_dict(env_states=True)
        assert "env_snapshot" not in collector.state_dict()  # the trajectory numbering only, as before


def test_a_state_of_another_env_is_refused_and_nothing_changes() -> None:
    env, other = TorchCartPole(4), TorchCartPole(3)
    env.reset([1, 2, 3, 4])
    before = env.get_state()
    with pytest.raises(
        EnvStateError, match="a state of TorchCartPole of 3 sub-envs cannot be restored into a TorchCartPole of 4"
    ):
        env.set_state(other.get_state())
    with pytest.raises(EnvStateError, match="a state of TorchPointMass of 4 sub-envs cannot be restored"):
        env.set_state(TorchPointMass(4).get_state())
    assert all(torch.equal(env.get_state()[k], v) for k, v in before.items() if isinstance(v, torch.Tensor))


def test_shutdown_closes_the_env_once() -> None:
    built: list[TorchCartPole] = []

    def make(**kwargs: Any) -> TorchCartPole:
        built.append(TorchCartPole(**kwargs))
        return built[-1]

    collector = Collector(
        make, None, engine=Device(), envs_per_worker=N, env_kwargs={"num_envs": N}, frames_per_batch=N
    )
    collector.next_batch()
    collector.shutdown()
    collector.shutdown()
    assert len(built) == 1 and built[0].closed


# -- a backend that builds device envs -----------------------------------------------------


class CartPoleBackend(EnvBackend):
    """A backend with make_device (and no host envs): ``target`` is ignored, the device is recorded."""

    name = "torch-cartpole"
    device_env = True
    asked: ClassVar[list[tuple[int, torch.device | None]]] = []

    def make(self, target: Any, env_kwargs: Any) -> Any:
        raise NotImplementedError("device envs only")

    def make_device(self, target: Any, env_kwargs: Any, num_envs: int, device: torch.device | None) -> TorchCartPole:
        type(self).asked.append((num_envs, device))
        return TorchCartPole(num_envs, device or "cpu", **env_kwargs)


def test_a_backend_with_make_device_builds_the_env_with_envs_per_worker_sub_envs_on_the_device_asked() -> None:
    source = EnvSource(CartPoleBackend(), "CartPole-v1", {"max_episode_steps": 20})
    CartPoleBackend.asked.clear()
    with Collector(source, None, engine="device", envs_per_worker=N, frames_per_batch=N * T, device="cpu") as collector:
        batch = collector.next_batch()
    assert CartPoleBackend.asked == [(N, torch.device("cpu"))]
    assert batch.shape == (N, T) and bool(batch["next", "truncated"].any())  # its 20-step limit


def test_the_base_backend_builds_no_device_env() -> None:
    class HostOnly(EnvBackend):
        name = "host-only"

        def make(self, target: Any, env_kwargs: Any) -> Any:
            return gym.make("CartPole-v1")

    assert not HostOnly.device_env
    with pytest.raises(NotImplementedError, match="host-only"):
        HostOnly().make_device("x", {}, 2, None)


# -- refusals, before the env steps --------------------------------------------------------


class CountingFactory:
    """A factory of device envs that counts what it builds (nothing must be built for a refused config)."""

    def __init__(self) -> None:
        self.built: list[TorchCartPole] = []
        self.__qualname__ = "CountingFactory"

    def __call__(self, **kwargs: Any) -> TorchCartPole:
        self.built.append(TorchCartPole(**kwargs))
        return self.built[-1]


def test_workers_are_refused_by_name_before_any_env_is_built() -> None:
    factory = CountingFactory()
    with pytest.raises(ConfigError, match=r"engine='device' steps one device env in this process.*num_workers=2"):
        Collector(factory, None, engine="device", num_workers=2, envs_per_worker=N, frames_per_batch=N)
    assert factory.built == []


@pytest.mark.parametrize(
    ("env", "kwargs", "built"),
    [
        ("CartPole-v1", {}, r"built a CartPoleEnv|built a TimeLimit"),
        (HostCartPole, {"num_envs": N}, "built a HostCartPole"),
        ("gymnasium-vector:CartPole-v1", {}, "builds numpy batched envs"),
    ],
    ids=["gymnasium-id", "host-batched-factory", "batched-backend"],
)
def test_an_env_that_is_no_device_env_is_refused_naming_it_and_the_engines_that_step_it(
    env: Any, kwargs: Any, built: str
) -> None:
    with pytest.raises(ConfigError, match=built) as raised:
        Collector(env, None, engine="device", envs_per_worker=N, env_kwargs=kwargs, frames_per_batch=N)
    message = str(raised.value)
    assert "engine='device' cannot step env" in message and "engine='inprocess'" in message
    assert "DeviceBatchedEnv" in message


def test_another_count_of_sub_envs_than_envs_per_worker_is_refused_and_the_env_closed() -> None:
    factory = CountingFactory()
    with pytest.raises(ConfigError, match=r"device env of 4 sub-envs.*envs_per_worker is 8.*envs_per_worker=4"):
        Collector(factory, None, engine="device", envs_per_worker=8, env_kwargs={"num_envs": 4}, frames_per_batch=8)
    assert len(factory.built) == 1 and factory.built[0].closed


@pytest.mark.parametrize("setting", ["storing_device", "device", "policy_device"])
def test_a_device_setting_other_than_the_envs_device_is_refused_naming_both(setting: str) -> None:
    # The env on "meta" (no data, no CUDA needed) stands for an env on a GPU with a setting naming the CPU
    factory = CountingFactory()
    with pytest.raises(ConfigError, match=rf"{setting}='cpu', but device env .* is on meta"):
        Collector(
            factory,
            None,
            engine="device",
            envs_per_worker=N,
            env_kwargs={"num_envs": N, "device": "meta"},
            frames_per_batch=N,
            **{setting: "cpu"},
        )
    assert factory.built[0].closed


def test_a_policy_on_another_device_than_the_envs_is_refused() -> None:
    with pytest.raises(PolicyError, match=r"parameters are on cpu, but device env .* is on meta.*policy.to\('meta'\)"):
        Collector(
            TorchCartPole,
            Argmax(),
            engine="device",
            envs_per_worker=N,
            env_kwargs={"num_envs": N, "device": "meta"},
            frames_per_batch=N,
        )


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({"info_keys": ["x"]}, "info_keys=.*device env's step returns no info dict"),
        ({"weight_sync": "shared_memory"}, "weight_sync='shared_memory': engine='device'"),
        ({"device_policy": "round_robin"}, "device_policy='round_robin': engine='device'"),
    ],
)
def test_settings_without_meaning_for_a_device_env_are_refused(settings: Any, match: str) -> None:
    factory = CountingFactory()
    with pytest.raises(ConfigError, match=match):
        Collector(
            factory,
            None,
            engine="device",
            envs_per_worker=N,
            env_kwargs={"num_envs": N},
            frames_per_batch=N,
            **settings,
        )
    assert factory.built == []


def test_a_failing_factory_is_an_env_creation_error_naming_it() -> None:
    def broken(**kwargs: Any) -> DeviceBatchedEnv:
        raise RuntimeError("no simulator here")

    with pytest.raises(EnvCreationError, match=r"broken.*RuntimeError: no simulator here"):
        Collector(broken, None, engine="device", envs_per_worker=N, frames_per_batch=N)


def test_a_device_env_is_told_apart_and_other_engines_refuse_it() -> None:
    env = TorchCartPole(N)
    assert is_device_env(env) and not is_device_env(HostCartPole(N)) and not is_device_env(gym.make("CartPole-v1"))
    message = device_env_refusal(env, "callable:make")
    assert "'callable:make' built a device env (TorchCartPole of 6 sub-envs on cpu)" in message
    assert f"engine='device', envs_per_worker={N}" in message
    for workers in (0, 2):  # refused where it is built (the probe), before any worker starts
        with pytest.raises(ConfigError, match=r"built a device env \(TorchCartPole.*only engine='device' steps one"):
            Collector(
                TorchCartPole,
                None,
                envs_per_worker=N,
                num_workers=workers,
                env_kwargs={"num_envs": N},
                frames_per_batch=N * max(1, workers),
            )
    with pytest.raises(ConfigError, match=r"built a device env \(TorchCartPole"):
        pycollect.make_vec(TorchCartPole, N, num_workers=0, env_kwargs={"num_envs": N})


class BadCartPole(TorchCartPole):
    """Returns what a device env must not: chosen by ``fault``; stepped one step at a time (no rollout)."""

    rollout = DeviceBatchedEnv.rollout

    def __init__(self, num_envs: int, fault: str) -> None:
        super().__init__(num_envs)
        self.fault = fault

    def step(self, actions: torch.Tensor) -> Any:
        observation, reward, terminated, truncated, final = super().step(actions)
        if self.fault == "shape":
            observation = observation[:, :3]
        elif self.fault == "numpy":
            observation = np.zeros((self.num_envs, 4), np.float32)
        elif self.fault == "flags":
            terminated = terminated.to(torch.int64)
        elif self.fault == "reward":
            reward = reward[:, None]
        return observation, reward, terminated, truncated, final


class BadRollingCartPole(BadCartPole):
    """:class:`BadCartPole` with a rollout: the same faults, stacked over the rollout's steps."""

    def rollout(self, actions: torch.Tensor) -> Any:
        return DeviceBatchedEnv.rollout(self, actions)


@pytest.mark.parametrize(
    ("env", "fault", "match"),
    [
        (BadCartPole, "shape", r"observation 'observation' of shape \(6, 3\).*says a tensor of shape \(6, 4\)"),
        (BadCartPole, "numpy", r"observation 'observation' of type ndarray"),
        (BadCartPole, "flags", r"terminated of shape \(6,\) and dtype torch.int64.*must be a bool tensor"),
        (BadCartPole, "reward", r"reward of shape \(6, 1\)"),
        (
            BadRollingCartPole,
            "shape",
            r"from a rollout of T=1 steps returned observation 'observation' of shape \(1, 6, 3\).*\(1, 6, 4\)",
        ),
        (
            BadRollingCartPole,
            "flags",
            r"from a rollout of T=1 steps returned terminated of shape \(1, 6\) and dtype torch.int64",
        ),
        (
            BadRollingCartPole,
            "reward",
            r"reward of shape \(1, 6, 1\) .*rewards are a real tensor of shape \(1, 6\)",
        ),
    ],
    ids=lambda value: value.__name__ if isinstance(value, type) else None,
)
def test_what_the_env_or_its_rollout_returns_is_checked_by_shape_dtype_and_device(
    env: type[BadCartPole], fault: str, match: str
) -> None:
    with (
        Collector(
            env,
            None,
            engine="device",
            envs_per_worker=N,
            env_kwargs={"num_envs": N, "fault": fault},
            frames_per_batch=N,
        ) as collector,
        pytest.raises(EnvOutputError, match=match),
    ):
        collector.next_batch()


def test_a_policy_whose_actions_change_device_or_shape_is_refused_at_that_step() -> None:
    class Drifting(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.calls = 0

        def forward(self, observation: torch.Tensor) -> Any:
            self.calls += 1
            if self.calls <= 2:  # the dry run and the first step
                return torch.zeros(observation.shape[0], dtype=torch.int64)
            return np.zeros(observation.shape[0], np.int64)

    with (
        device_collector(Drifting()) as collector,
        pytest.raises(PolicyError, match=r"returned actions of type ndarray at step 2"),
    ):
        collector.next_batch()


def test_the_collectors_episode_counts_read_a_device_batch_once_through_the_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """EpisodeRecord reads ids, rewards and flags of a batch on another device with one copy each (a CUDA batch)."""
    from pycollect._batch import episodes

    calls: list[str] = []
    host = episodes._host

    def counted(tensor: torch.Tensor) -> Any:
        calls.append(tensor.device.type)
        return host(tensor)

    monkeypatch.setattr(episodes, "_host", counted)
    with Collector(
        TorchCartPole,
        None,
        engine="device",
        envs_per_worker=N,
        env_kwargs={"num_envs": N},
        frames_per_batch=N * 40,
        total_frames=N * 40,
        seed=1,
    ) as collector:
        for _ in collector:
            pass
        assert collector.episodes.count > 0
    assert calls == ["cpu"] * 3
