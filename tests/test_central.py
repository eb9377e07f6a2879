"""engine="central": workers step envs, the trainer runs the policy once per step for all of them.

The comparison tests hold every batch of ``engine="central"`` against ``engine="workers"`` for
the same seed and deterministic policies, key by key; then weights, faults and bad input.
"""

from __future__ import annotations

import copy
import os
import signal
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode
from policies import lstm_actor
from tensordict import TensorDictBase
from torch import nn

from pycollect import Collector, ConfigError, PolicyError, WorkerCrashedError, env_seeds
from pycollect._rollout.seeding import traj_id_start
from pycollect._steps.group import EnvGroup
from pycollect._steps.spaces import SpaceLayout
from pycollect.default_plugins import Central
from pycollect.testing import wait_until
from pycollect.testing.envs import CountingEnv, HangingEnv, SpacesEnv
from pycollect.testing.policies import argmax_mlp

pytestmark = pytest.mark.timeout(300)


# -- the group's episode limit (what the workers apply for max_frames_per_traj) ----------------


class _InfoCountingEnv(CountingEnv):
    """A CountingEnv whose step info is never empty: its steps take the group's Python path."""

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, _ = super().step(action)
        return obs, reward, terminated, truncated, {"t": self._t}


def _group(envs: list[gym.Env[Any, Any]], limit: int | None) -> EnvGroup:
    observation = SpaceLayout(envs[0].observation_space, "observation")
    action = SpaceLayout(envs[0].action_space, "action")
    k = len(envs)
    flags = [np.zeros(k, bool), np.zeros(k, bool)]
    return EnvGroup(
        envs,
        AutoresetMode.SAME_STEP,
        observation,
        action,
        observation.empty(k),
        np.zeros(k),
        *flags,
        observation.empty(k),
        max_episode_steps=limit,
    )


@pytest.mark.parametrize("env", [CountingEnv, _InfoCountingEnv], ids=["native", "python"])
def test_a_group_truncates_episodes_at_max_episode_steps_and_resets_them_in_the_same_step(env: Any) -> None:
    envs = [env(length=1000), env(length=4)]  # env 1 terminates at step 4, before the limit
    group = _group(envs, limit=3)
    group.reset(seeds=[1, 2])
    seen = []
    for _ in range(7):
        group.step([np.zeros(2, np.int64)])
        (obs,), (final,) = group._out, group._final_out  # type: ignore[misc]
        seen.append(
            (group.truncated.tolist(), group.terminated.tolist(), final[4][:, 1].tolist(), obs[4][:, 1].tolist())
        )
    truncated = [s[0] for s in seen]
    assert truncated == [[False, False], [False, False], [True, True]] * 2 + [[False, False]]
    assert [s[1] for s in seen][2] == [False, False]  # the limit truncates; nothing terminated
    assert seen[2][2] == [3.0, 3.0] and seen[2][3] == [0.0, 0.0]  # final: step 3; observation: the reset one
    assert seen[5][2] == [3.0, 3.0] and seen[6][3] == [1.0, 1.0]  # counted again from each reset


def test_an_episode_that_terminates_at_the_limit_is_both_terminated_and_truncated() -> None:
    group = _group([CountingEnv(length=3)], limit=3)  # as EnvRunner marks it for max_frames_per_traj
    group.reset(seeds=[0])
    for _ in range(3):
        group.step([np.zeros(1, np.int64)])
    assert group.terminated.tolist() == [True] and group.truncated.tolist() == [True]


def test_without_a_limit_the_group_never_truncates_and_a_limit_needs_same_step_mode() -> None:
    group = _group([CountingEnv(length=1000)], limit=None)
    group.reset(seeds=[0])
    for _ in range(50):
        group.step([np.zeros(1, np.int64)])
        assert not group.truncated.any()
    observation = SpaceLayout(CountingEnv().observation_space, "observation")
    action = SpaceLayout(CountingEnv().action_space, "action")
    with pytest.raises(ConfigError, match="max_episode_steps=3: a positive limit, in autoreset_mode SAME_STEP only"):
        EnvGroup(
            [CountingEnv()],
            AutoresetMode.NEXT_STEP,
            observation,
            action,
            observation.empty(1),
            np.zeros(1),
            np.zeros(1, bool),
            np.zeros(1, bool),
            max_episode_steps=3,
        )


# -- the comparison with engine="workers" ----------------------------------------------------


class _Argmax(nn.Module):
    def __init__(self, inputs: int = 4, actions: int = 2) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(inputs, 16), nn.Tanh(), nn.Linear(16, actions))

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return self.net(observation).argmax(-1)


def _dict_policy(td: TensorDictBase) -> torch.Tensor:
    """A deterministic function of a Dict observation, for SpacesEnv's Discrete(5, start=2) actions."""
    inner = td["observation", "inner"]
    return 2 + (inner["count"] + inner["bits"].sum(-1).long()) % 5


def _keys(batch: TensorDictBase) -> set[Any]:
    return {k if isinstance(k, str) else tuple(k) for k in batch.keys(True, True)}


def _assert_same(central: TensorDictBase, workers: TensorDictBase, where: str) -> None:
    assert _keys(central) == _keys(workers), where
    assert central.batch_size == workers.batch_size and central.names == workers.names, where
    for key in _keys(workers):
        a, b = central.get(key), workers.get(key)
        assert a.dtype == b.dtype and a.shape == b.shape, f"{where}: {key}"
        assert torch.equal(a, b), f"{where}: {key} differs"


def _sync_batches(engine: Any, env: Any, policy: Any, count: int, **kwargs: Any) -> list[TensorDictBase]:
    with Collector(env, policy, engine=engine, **kwargs) as collector:
        return [collector.next_batch() for _ in range(count)]


SYNC_CASES: dict[str, tuple[Any, Callable[[], Any], dict[str, Any]]] = {
    "mlp-max_frames_per_traj": ("CartPole-v1", _Argmax, {"max_frames_per_traj": 7}),
    "mlp-stack-split_trajs": ("CartPole-v1", _Argmax, {"cat_results": "stack", "split_trajs": True}),
    "mlp-warmup-set_truncated": ("CartPole-v1", _Argmax, {"init_random_frames": 100, "set_truncated": True}),
    "lstm": ("CartPole-v1", lstm_actor, {"exploration_type": "deterministic", "max_frames_per_traj": 9}),
    "random-dict-info_keys": (
        SpacesEnv,
        lambda: None,
        {"env_kwargs": {"observation": "dict"}, "info_keys": ("t", "pair"), "max_frames_per_traj": 4},
    ),
    "function-dict-reset_at_each_iter": (
        SpacesEnv,
        lambda: _dict_policy,
        {"env_kwargs": {"observation": "dict", "max_length": 9}, "reset_at_each_iter": True},
    ),
}


@pytest.mark.parametrize("groups", [1, 2, 3])
@pytest.mark.parametrize("case", list(SYNC_CASES))
def test_sync_batches_equal_the_workers_engines_key_by_key(case: str, groups: int) -> None:
    # One group writes straight into the batch; several write their observations into its rows
    # and interleave the rest: all compared.
    env, make_policy, extra = SYNC_CASES[case]
    kwargs = {"frames_per_batch": 96, "envs_per_worker": 3, "num_workers": 2, "seed": 7, **extra}
    central = _sync_batches(Central(groups=groups), env, make_policy(), 4, **kwargs)
    workers = _sync_batches("workers", env, make_policy(), 4, **kwargs)
    for n, (a, b) in enumerate(zip(central, workers, strict=True)):
        _assert_same(a, b, f"{case}, batch {n}")
    assert any(bool(b["next", "done"].any()) for b in workers)  # episodes ended: resets were compared too


@pytest.mark.parametrize("groups", [1, 2])
def test_a_stochastic_policy_samples_the_same_for_the_same_seed_and_leaves_the_trainers_generator_alone(
    groups: int,
) -> None:
    # Two workers per group: the groups' streams are their first workers'; the runs must repeat.
    kwargs = {"frames_per_batch": 96, "envs_per_worker": 3, "num_workers": 4, "seed": 11}
    runs, after = [], []
    for _ in range(2):
        with Collector("CartPole-v1", lstm_actor(), engine=Central(groups=groups), **kwargs) as collector:
            state = torch.get_rng_state()
            runs.append([collector.next_batch() for _ in range(3)])
            assert torch.equal(torch.get_rng_state(), state)  # the trainer's generator, untouched
            after.append(torch.rand(3))
    for n, (a, b) in enumerate(zip(*runs, strict=True)):
        _assert_same(a, b, f"batch {n}")
    assert torch.equal(after[0], after[1])
    actions = torch.cat([batch["action"] for batch in runs[0]])
    assert 0.2 < actions.float().mean() < 0.8  # sampled: both actions taken, not a fixed argmax


@pytest.mark.parametrize(
    ("make_policy", "seed", "streamed"),
    [(lstm_actor, 3, True), (_Argmax, 3, False), (lstm_actor, None, False)],
    ids=["sampling", "argmax", "no-seed"],
)
def test_only_a_seeded_policy_that_draws_gets_streams(
    make_policy: Callable[[], Any], seed: int | None, streamed: bool
) -> None:
    # An argmax draws nothing: its calls need no stream swapping. Without a seed nothing repeats anyway.
    kwargs = {"frames_per_batch": 16, "envs_per_worker": 2, "num_workers": 2, "seed": seed}
    with Collector("CartPole-v1", make_policy(), engine="central", **kwargs) as collector:
        assert (collector._engine.streams is not None) is streamed  # type: ignore[attr-defined]
        collector.next_batch()


def test_a_replay_buffer_and_postproc_get_the_same_data() -> None:
    from torchrl.data import LazyTensorStorage, ReplayBuffer

    buffers = {}
    for engine in ("central", "workers"):
        buffer = ReplayBuffer(storage=LazyTensorStorage(1000))
        with Collector(
            "CartPole-v1",
            _Argmax(),
            engine=engine,
            frames_per_batch=64,
            total_frames=192,
            envs_per_worker=2,
            num_workers=2,
            seed=1,
            replay_buffer=buffer,
            postproc=lambda td: td.reshape(-1),
        ) as collector:
            assert list(collector) == [None, None, None]
        buffers[engine] = buffer[:]
    _assert_same(buffers["central"], buffers["workers"], "replay buffer")


def _by_worker(collector: Collector, rollouts: int, num_workers: int) -> dict[int, list[TensorDictBase]]:
    """Async batches sorted by the worker that made them (trajectory ids tell), ``rollouts`` each."""
    got: dict[int, list[TensorDictBase]] = {w: [] for w in range(num_workers)}

    def enough() -> bool:
        batch = collector.next_batch()
        got[int(batch["collector", "traj_ids"][0, 0]) % num_workers].append(batch)
        return all(len(batches) >= rollouts for batches in got.values())

    wait_until(enough, timeout_s=120, what=f"{rollouts} rollouts of every worker")
    return {w: batches[:rollouts] for w, batches in got.items()}


@pytest.mark.parametrize(
    ("policy", "extra"),
    [
        (_Argmax, {"max_frames_per_traj": 6}),
        (lambda: None, {"init_random_frames": 0}),
        (lstm_actor, {"exploration_type": "deterministic", "max_frames_per_traj": 5}),
    ],
    ids=["mlp", "random", "lstm"],
)
def test_async_rollouts_equal_the_workers_engines_worker_by_worker(policy: Any, extra: dict[str, Any]) -> None:
    kwargs = {"frames_per_batch": 32, "envs_per_worker": 2, "num_workers": 2, "seed": 4, "sync": False, **extra}
    runs = {}
    for engine in ("central", "workers"):
        with Collector("CartPole-v1", policy(), engine=engine, **kwargs) as collector:
            runs[engine] = _by_worker(collector, 3, 2)
    for w in range(2):
        for n, (a, b) in enumerate(zip(runs["central"][w], runs["workers"][w], strict=True)):
            assert a.batch_size == torch.Size([2, 16])
            _assert_same(a, b, f"worker {w}, rollout {n}")


@pytest.mark.parametrize(("groups", "calls"), [(1, {12: 10}), (2, {6: 20}), (3, {3: 20, 6: 10}), (8, {3: 40})])
def test_the_policy_is_called_once_per_step_for_the_envs_of_each_group(groups: int, calls: dict[int, int]) -> None:
    """3 workers of 4 envs: one call of 12 per step; two groups (envs 0-1 and 2-3 of every worker): two of 6;
    three groups (envs 0, 1-2 and 3): 3, 6 and 3; more groups than envs: one group per env of every worker."""
    sizes: list[int] = []

    class Counting(_Argmax):
        def forward(self, observation: torch.Tensor) -> torch.Tensor:
            sizes.append(len(observation))
            return super().forward(observation)

    engine = Central(groups=groups)
    with Collector(
        "CartPole-v1", Counting(), engine=engine, frames_per_batch=3 * 4 * 10, envs_per_worker=4, num_workers=3
    ) as collector:
        sizes.clear()  # the calls that checked the policy when the collector was built
        collector.next_batch()
    assert Counter(sizes) == calls


class _PidEnv(CountingEnv):
    """A CountingEnv whose observation is the id of the process that steps it."""

    def _obs(self) -> np.ndarray:
        return np.array([os.getpid(), self._t], np.float32)


def test_with_4_workers_of_2_envs_every_policy_call_covers_envs_of_all_4_workers() -> None:
    pids_per_call: list[set[int]] = []

    def policy(td: TensorDictBase) -> torch.Tensor:
        observation = td["observation"]
        pids_per_call.append({int(pid) for pid in observation[:, 0].tolist()})
        return torch.zeros(len(observation), dtype=torch.int64)

    kwargs = {"frames_per_batch": 4 * 2 * 5, "envs_per_worker": 2, "num_workers": 4}
    with Collector(_PidEnv, policy, engine=Central(groups=2), **kwargs) as collector:
        pids_per_call.clear()  # the calls that checked the policy
        collector.next_batch()
        workers = {w.pid for w in collector.stats().workers}
    assert len(pids_per_call) == 10  # two groups (env 0, env 1 of every worker) x 5 steps
    assert all(pids == workers for pids in pids_per_call)


def test_groups_must_be_a_positive_int() -> None:
    with pytest.raises(ConfigError, match=r"Central\(groups=0\): groups must be an int of 1 or more, or None"):
        Central(groups=0)


@pytest.mark.parametrize(
    ("has_policy", "device", "cpus", "flops", "groups"),
    [
        (True, None, 2, 72_000, 1),  # the workers take both CPUs and the call is small (a 64-wide MLP's)
        (True, "cpu", 2, 150_000_000, 2),  # ... but the call's work halves with its batch (the Nature CNN's)
        (True, "cpu", 3, 0, 2),  # a CPU left for the call
        (True, "cuda:0", 2, 0, 2),  # the call runs on the GPU meanwhile
        (False, "cuda:0", 8, 0, 1),  # random actions: no call to overlap
    ],
)
def test_the_default_groups_double_buffer_where_overlapping_the_policy_with_the_steps_pays(
    monkeypatch: pytest.MonkeyPatch, has_policy: bool, device: str | None, cpus: int, flops: int, groups: int
) -> None:
    from pycollect._engines.central import engine

    monkeypatch.setattr(engine, "_usable_cpus", lambda: cpus)
    counted: list[int] = []

    def call_flops() -> int:
        counted.append(flops)
        return flops

    on = None if device is None else torch.device(device)
    assert engine.default_groups(has_policy, on, 2, call_flops)[0] == groups
    assert len(counted) == (1 if has_policy and cpus == 2 and device in (None, "cpu") else 0)  # counted only then


@pytest.mark.parametrize(("width", "groups"), [(8, 1), (2048, 2)])
def test_the_default_central_engine_counts_the_policys_work_where_the_workers_take_every_cpu(
    monkeypatch: pytest.MonkeyPatch, width: int, groups: int
) -> None:
    # 4 envs of 2 workers a group of two: 4 x (4*w + w*w + 2*w) multiply-adds, 2 FLOPs each.
    from pycollect._engines.central import engine

    monkeypatch.setattr(engine, "_usable_cpus", lambda: 2)
    torch.manual_seed(0)
    policy, _ = argmax_mlp(4, width, width, 2)
    before = torch.get_rng_state()
    kwargs = {"frames_per_batch": 2 * 4 * 3, "envs_per_worker": 4, "num_workers": 2}
    with Collector("CartPole-v1", policy, engine="central", **kwargs) as collector:
        assert len(collector._engine.runners) == groups  # type: ignore[attr-defined]
        collector.next_batch()
    assert torch.equal(torch.get_rng_state(), before)  # counting drew nothing from the trainer's stream


def test_a_policy_whose_flops_cannot_be_counted_gets_two_groups_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    from pycollect._engines.central import engine

    monkeypatch.setattr(engine, "_usable_cpus", lambda: 2)
    groups, why = engine.default_groups(True, None, 2, lambda: None)
    assert groups == 2 and "could not count" in why


class _ParamsInATensorDict(nn.Module):
    """A policy whose weights are a ``TensorDictParams`` (as TorchRL's multi-agent MLPs keep theirs)."""

    def __init__(self) -> None:
        super().__init__()
        from tensordict import TensorDict
        from tensordict.nn import TensorDictParams

        self.params = TensorDictParams(TensorDict({"w": torch.ones(4, 2)}, []))

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return (observation @ self.params["w"]).argmax(-1)


def test_the_flops_of_a_policy_with_its_weights_in_a_tensordict_are_counted() -> None:
    """torch's counter tracks modules by walking their attributes, and a TensorDict refuses to be
    a truth value there (it failed the MAPPO example's collector): the count is taken without
    that tracking."""
    from pycollect._rollout.policy import PolicyRunner
    from pycollect.envs.specs import specs_from_spaces

    env = gym.make("CartPole-v1")
    specs = specs_from_spaces(env.observation_space, env.action_space)
    runner = PolicyRunner(_ParamsInATensorDict(), specs, 8, torch.device("cpu"), np.random.default_rng(0))
    assert runner.call_flops() == 2 * 8 * 4 * 2


def test_the_policy_runner_counts_the_flops_of_a_call() -> None:
    from pycollect._rollout.policy import PolicyRunner
    from pycollect.envs.specs import specs_from_spaces

    env = gym.make("CartPole-v1")
    policy, _ = argmax_mlp(4, 64, 2)
    runner = PolicyRunner(
        policy,
        specs_from_spaces(env.observation_space, env.action_space),
        8,
        torch.device("cpu"),
        np.random.default_rng(0),
    )
    assert runner.call_flops() == 2 * 8 * (4 * 64 + 64 * 2)


class _BuiltHere(CountingEnv):
    """Counts the envs built in the process that counts (the trainer); workers build theirs elsewhere."""

    built = 0

    def __init__(self) -> None:
        super().__init__()
        _BuiltHere.built += 1


def test_the_trainer_builds_one_probe_env_for_every_group_and_backend() -> None:
    _BuiltHere.built = 0
    with Collector(_BuiltHere, engine="central", frames_per_batch=16, envs_per_worker=2, num_workers=4) as collector:
        assert _BuiltHere.built == 1  # the probe: the groups' plans and both backends read it
        collector.next_batch()
    assert _BuiltHere.built == 1


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "2"])
def test_policy_threads_must_be_a_positive_int_or_none(value: Any) -> None:
    with pytest.raises(ConfigError, match=rf"Central\(policy_threads={value!r}\): policy_threads must be an int"):
        Central(policy_threads=value)


class _ThreadsSeen(nn.Module):
    """Records torch's intra-op threads at every call, with the thread it ran in."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 2)
        self.seen: list[tuple[str, int]] = []

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        self.seen.append((threading.current_thread().name, torch.get_num_threads()))
        return self.linear(observation).argmax(-1)


@pytest.mark.parametrize(("engine", "expected"), [(Central(policy_threads=1), 1), ("central", 1)])
def test_a_cpu_policy_runs_with_policy_threads_and_the_trainers_setting_comes_back(engine: Any, expected: int) -> None:
    # On this 2-CPU machine the default leaves 1 thread: 2 CPUs, less 2 workers, at least 1.
    policy = _ThreadsSeen()
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with Collector(
            "CartPole-v1", policy, engine=engine, frames_per_batch=40, envs_per_worker=2, num_workers=2
        ) as collector:
            policy.seen.clear()  # the calls that checked the policy
            collector.next_batch()
            assert torch.get_num_threads() == 2
        threads = {name for name, _ in policy.seen}
        assert threads == {threading.current_thread().name}  # both groups' calls, in the caller's thread
        assert {count for _, count in policy.seen} == {expected}
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize(("cpus", "workers", "threads"), [(2, 2, 1), (16, 8, 8), (4, 8, 1), (3, 1, 2)])
def test_the_default_policy_threads_are_the_cpus_the_workers_leave(
    monkeypatch: pytest.MonkeyPatch, cpus: int, workers: int, threads: int
) -> None:
    from pycollect._engines.central import engine

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cpus)))
    assert engine._free_cpus(workers) == threads  # one policy call at a time, whatever the groups


def test_worker_stats_number_the_workers_of_every_group_as_the_collector_does() -> None:
    engine = Central(groups=2)
    with Collector("CartPole-v1", engine=engine, frames_per_batch=40, envs_per_worker=2, num_workers=4) as collector:
        collector.next_batch()
        stats = collector.stats().workers
        assert [w.worker for w in stats] == [0, 1, 2, 3]
        assert len({w.pid for w in stats}) == 4 and all(w.generation == 1 for w in stats)
    assert [w.worker for w in collector.stats().workers] == [0, 1, 2, 3]  # after shutdown too


def test_async_batches_come_one_worker_at_a_time_in_worker_order() -> None:
    with Collector(
        CountingEnv, frames_per_batch=10, envs_per_worker=2, num_workers=3, sync=False, engine="central", seed=0
    ) as collector:
        workers = [int(collector.next_batch()["collector", "traj_ids"][0, 0]) % 3 for _ in range(6)]
    assert workers == [0, 1, 2, 0, 1, 2]


# -- weights ----------------------------------------------------------------------------------


class _Threshold(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.tensor(-1.0))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return (obs[:, 0] * 0 + self.bias > 0).long()  # 0 while bias < 0, 1 after


@pytest.mark.parametrize("sync", [True, False])
def test_frames_carry_the_version_that_chose_their_action(sync: bool) -> None:
    policy = _Threshold()
    with Collector(
        "CartPole-v1", policy, engine="central", frames_per_batch=16, envs_per_worker=2, num_workers=2, sync=sync
    ) as collector:
        first = collector.next_batch()
        with torch.no_grad():
            policy.bias.fill_(1.0)
        collector.update_policy_weights_()
        after = [collector.next_batch() for _ in range(2 if sync else 3)]
    assert (first["action"] == 0).all() and (first["policy_version"] == 0).all()
    for batch in after:
        version = batch["policy_version"]
        assert torch.equal(batch["action"] == 1, (version == 1).expand_as(batch["action"]))
    if sync:  # the next policy call uses the new weights
        assert all((b["policy_version"] == 1).all() for b in after)
    else:  # the round's other rollout was chosen before the update; the next round after it
        assert [int(b["policy_version"].unique()) for b in after] == [0, 1, 1]


def test_update_policy_weights_loads_given_weights_into_the_policy_called() -> None:
    policy = _Threshold()
    with Collector(
        "CartPole-v1", policy, engine="central", frames_per_batch=8, envs_per_worker=2, num_workers=2
    ) as collector:
        collector.next_batch()
        collector.update_policy_weights_({"bias": torch.tensor(2.0)})
        batch = collector.next_batch()
    assert (batch["action"] == 1).all() and (batch["policy_version"] == 1).all() and collector.policy_version == 1


# -- faults -----------------------------------------------------------------------------------


def test_a_killed_worker_is_restarted_and_its_envs_trajectories_are_cut_where_it_died() -> None:
    k, seed = 2, 3
    with Collector(
        CountingEnv,
        engine="central",
        frames_per_batch=40,
        envs_per_worker=k,
        num_workers=2,
        seed=seed,
        env_kwargs={"length": 1000},
        backoff_initial_s=0.01,
    ) as collector:
        before = collector.next_batch()
        victim = collector.stats().workers[1].pid
        os.kill(victim, signal.SIGKILL)
        after = collector.next_batch()
        later = collector.next_batch()
        stats = collector.stats()
    assert stats.restarts == 1 and stats.workers[1].generation == 2 and stats.workers[1].pid != victim
    # Worker 0 went on undisturbed; worker 1's episodes were cut at the first step after the kill.
    ids, truncated = after["collector", "traj_ids"], after["next", "truncated"][..., 0]
    assert not truncated[:k].any() and truncated[k:, 0].all() and not truncated[k:, 1:].any()
    assert torch.equal(ids[:k], before["collector", "traj_ids"][:k, -1:].expand(k, 10))
    new_ids = [traj_id_start(1, 2, 2) + 2 * j for j in range(k)]
    assert ids[k:, 1].tolist() == new_ids and ids[k:, 0].tolist() == before["collector", "traj_ids"][k:, -1].tolist()
    # The new generation's envs were reset with that generation's seeds, as the workers engine seeds them.
    for j, env_seed in enumerate(env_seeds(seed, k, 1, 2)):
        expected, _ = CountingEnv(length=1000).reset(seed=env_seed)
        assert after["observation"][k + j, 1].tolist() == expected.tolist()
    assert after["next", "observation"][k:, 0].tolist() == before["next", "observation"][k:, -1].tolist()
    assert not later["next", "truncated"].any()


class _SlowEnv(CountingEnv):
    """A CountingEnv whose steps take 20 ms: long enough to be killed in the middle of one."""

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        time.sleep(0.02)
        return super().step(action)


@pytest.mark.parametrize(("k", "groups"), [(2, None), (2, 2), (3, 3)])
def test_a_worker_killed_in_the_middle_of_a_rollout_cuts_its_trajectories_there_and_collection_goes_on(
    k: int, groups: int | None
) -> None:
    # With several groups, the group that finds the worker dead cuts its envs there, and every
    # other group cuts its own at its next step.
    with Collector(
        _SlowEnv,
        engine=Central(groups=groups),
        frames_per_batch=4 * 60,
        envs_per_worker=k,
        num_workers=2,
        seed=0,
        env_kwargs={"length": 1000},
        backoff_initial_s=0.01,
    ) as collector:
        collector.next_batch()
        victim = collector.stats().workers[0].pid
        killer = threading.Timer(0.4, os.kill, (victim, signal.SIGKILL))  # about step 20 of 60
        killer.start()
        try:
            batch = collector.next_batch()
        finally:
            killer.join()
        stats = collector.stats()
    assert stats.restarts == 1 and stats.workers[0].generation == 2
    truncated, ids = batch["next", "truncated"][..., 0], batch["collector", "traj_ids"]
    assert not truncated[k:].any()  # worker 0's envs only
    # Each env of worker 0 (one per group) is cut once: at the first step its group took after the
    # worker died. The group that found it dead cut there; the other groups' envs, one step later at most.
    cuts = [truncated[i].nonzero()[:, 0].tolist() for i in range(k)]
    assert all(len(steps) == 1 for steps in cuts), cuts
    assert max(steps[0] for steps in cuts) - min(steps[0] for steps in cuts) <= 1, cuts
    for i, [cut] in enumerate(cuts):
        assert cut < 59
        assert (ids[i, cut + 1 :] >= traj_id_start(0, 2, 2)).all() and (
            ids[i, : cut + 1] < traj_id_start(0, 2, 2)
        ).all()
        assert batch["next", "reward"][i, cut] == 0


def test_a_hung_worker_is_killed_by_the_supervisor_and_the_policy_loop_goes_on_without_waiting_longer() -> None:
    with Collector(
        HangingEnv,
        engine="central",
        frames_per_batch=2 * 8,
        envs_per_worker=1,
        num_workers=2,
        env_kwargs={"hang_at": 6},  # every generation hangs at step 6 of its first episode
        max_frames_per_traj=None,
        heartbeat_timeout_s=1.0,
        backoff_initial_s=0.01,
    ) as collector:
        batch = collector.next_batch()
        stats = collector.stats()
    assert stats.restarts >= 2  # both workers hung at step 6
    assert batch["next", "truncated"][:, 5, 0].all() and (batch["next", "reward"][:, 5] == 0).all()


def test_a_killed_worker_with_restart_never_raises_worker_crashed_error() -> None:
    with Collector(
        CountingEnv, engine="central", frames_per_batch=8, envs_per_worker=2, num_workers=2, restart="never"
    ) as collector:
        collector.next_batch()
        os.kill(collector.stats().workers[0].pid, signal.SIGKILL)
        with pytest.raises(WorkerCrashedError):
            collector.next_batch()


class _IndexedEnv(CountingEnv):
    """A CountingEnv whose observation is its index among its worker's envs (group ``g`` of 2
    steps env ``g``), and that raises at step ``fail_at`` in env ``fail_in``, if given."""

    made = 0

    def __init__(self, fail_in: int | None = None, fail_at: int = 3) -> None:
        super().__init__(length=1000)
        self.index = type(self).made
        type(self).made += 1
        self.fail_in, self.fail_at = fail_in, fail_at

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.index == self.fail_in and self._t + 1 == self.fail_at:
            raise ZeroDivisionError(f"env {self.index} failed at step {self.fail_at}")
        return super().step(action)

    def _obs(self) -> np.ndarray:
        return np.array([self.index, self._t], np.float32)


class _GroupPolicyError(Exception):
    pass


@pytest.mark.parametrize("group", [0, 1])
def test_a_policy_error_in_either_group_reaches_the_caller_as_itself(group: int) -> None:
    """The group that fails first decides what the caller sees: never a generic error of the
    other group's round in its place."""
    steps = {"n": 0}

    def policy(td: TensorDictBase) -> torch.Tensor:
        observation = td["observation"]
        steps["n"] += 1
        if steps["n"] > 8 and (observation[:, 0] == group).all():
            raise _GroupPolicyError(f"the policy failed on group {group}'s observations")
        return torch.zeros(len(observation), dtype=torch.int64)

    kwargs = {"frames_per_batch": 2 * 2 * 10, "envs_per_worker": 2, "num_workers": 2}
    with Collector(_IndexedEnv, policy, engine=Central(groups=2), **kwargs) as collector:
        with pytest.raises(_GroupPolicyError, match=f"group {group}'s observations") as info:
            collector.next_batch()
        assert any(entry.name == "policy" for entry in info.traceback)  # its own traceback, down to the raise


@pytest.mark.parametrize("group", [0, 1])
def test_an_env_error_in_either_group_with_restart_never_is_the_first_calls_worker_crashed_error(group: int) -> None:
    kwargs = {"frames_per_batch": 2 * 2 * 10, "envs_per_worker": 2, "num_workers": 2}
    with (
        Collector(
            _IndexedEnv,
            engine=Central(groups=2),
            restart="never",
            env_kwargs={"fail_in": group, "fail_at": 3},
            **kwargs,
        ) as collector,
        pytest.raises(WorkerCrashedError, match=f"env {group} failed at step 3"),
    ):
        collector.next_batch()


# -- the native recorder of a group's rows ----------------------------------------------------


def _recorder_arrays(rows: int, k: int, steps: int) -> dict[str, np.ndarray]:
    return {
        "source": np.arange(rows * 2, dtype=np.float32).reshape(rows, 2),
        "finals": -np.arange(rows * 2, dtype=np.float32).reshape(rows, 2) - 1,
        "next_obs": np.zeros((k, steps, 2), np.float32),
        "obs": np.zeros((k, steps, 2), np.float32),
        "current": np.zeros((k, 2), np.float32),
        "rewards_in": np.arange(rows, dtype=np.float64) + 0.5,
        "terminated_in": np.array([False, True, False, False]),
        "truncated_in": np.array([False, False, False, True]),
        "rewards": np.zeros((steps, k)),
        "terminated": np.zeros((steps, k), bool),
        "truncated": np.zeros((steps, k), bool),
    }


def _recorder(a: dict[str, np.ndarray], rows: list[int], steps: int, **placed: Any) -> Any:
    from pycollect._native import _core

    return _core.StepRecorder(
        rows,
        len(a["source"]),
        steps,
        [(a["source"], a["finals"], a["next_obs"], a["obs"], a["current"], 8)],
        (a["rewards_in"], a["terminated_in"], a["truncated_in"]),
        (a["rewards"], a["terminated"], a["truncated"]),
        **placed,
    )


def test_the_step_recorder_stores_a_groups_rows_as_a_step_column() -> None:
    a = _recorder_arrays(rows=4, k=3, steps=2)
    recorder = _recorder(a, rows=[3, 0, 1], steps=2)  # env 0 truncated, env 2 terminated
    assert recorder.record(0) == [0, 2]
    np.testing.assert_array_equal(a["next_obs"][:, 0], [a["finals"][3], a["source"][0], a["finals"][1]])
    np.testing.assert_array_equal(a["current"], a["source"][[3, 0, 1]])  # the reset observations
    # Frame 1 of obs: the reset observation where an episode ended, else the one returned
    np.testing.assert_array_equal(a["obs"][:, 1], a["source"][[3, 0, 1]])
    np.testing.assert_array_equal(a["rewards"][0], [3.5, 0.5, 1.5])
    assert a["terminated"][0].tolist() == [False, False, True] and a["truncated"][0].tolist() == [True, False, False]
    a["obs"][...] = 7
    assert recorder.record(1) == [0, 2]  # the last column: no frame t + 1 to write
    assert (a["obs"] == 7).all() and a["rewards"][1].tolist() == [3.5, 0.5, 1.5]


def test_the_step_recorder_writes_the_observations_into_the_batch_rows_of_the_groups_envs() -> None:
    a = _recorder_arrays(rows=4, k=3, steps=2)
    batch = {key: np.zeros((5, 2, 2), np.float32) for key in ("next_obs", "obs")}  # 5 rows, 3 of them the group's
    recorder = _recorder(a | batch, rows=[3, 0, 1], steps=2, out_rows=[4, 0, 2], out_envs=5)
    assert recorder.record(0) == [0, 2]
    np.testing.assert_array_equal(batch["next_obs"][[4, 0, 2], 0], [a["finals"][3], a["source"][0], a["finals"][1]])
    np.testing.assert_array_equal(batch["obs"][[4, 0, 2], 1], a["source"][[3, 0, 1]])
    assert not batch["next_obs"][[1, 3]].any() and not batch["obs"][[1, 3]].any()  # the other rows untouched
    with pytest.raises(ConfigError, match="out row 5 is not one of the 5 rows of the observations"):
        _recorder(a | batch, rows=[3, 0, 1], steps=2, out_rows=[5, 0, 2], out_envs=5)
    with pytest.raises(ConfigError, match="out_rows and out_envs go together"):
        _recorder(a | batch, rows=[3, 0, 1], steps=2, out_rows=[4, 0, 2])


def test_the_step_recorder_refuses_what_does_not_fit() -> None:
    a = _recorder_arrays(rows=4, k=3, steps=2)
    with pytest.raises(ConfigError, match="row 4 is not one of the 4 result rows"):
        _recorder(a, rows=[0, 1, 4], steps=2)
    with pytest.raises(ConfigError, match="leaf 0's next_obs holds 48 bytes, not 4 frames of 8 bytes"):
        _recorder(a, rows=[0, 1], steps=2)
    with pytest.raises(ConfigError, match="step 2 is outside the rollout's 2 steps"):
        _recorder(a, rows=[0, 1, 2], steps=2).record(2)
    a["current"] = np.zeros((2, 3), np.float32).T  # not C-contiguous
    with pytest.raises(ConfigError, match="leaf 0's current must be a writable C-contiguous buffer"):
        _recorder(a, rows=[0, 1, 2], steps=2)


# -- bad input, before any worker starts -------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"num_workers": 0}, ConfigError, r"engine='central' needs num_workers >= 1"),
        ({"policy_device": "cuda:7"}, ConfigError, r"policy_device='cuda:7'"),
        ({"weight_sync": "shared_memory"}, ConfigError, r"weight_sync='shared_memory': engine='central'"),
        ({"device_policy": "round_robin"}, ConfigError, r"device_policy='round_robin': engine='central'"),
        ({"zero_copy": True}, ConfigError, r"zero_copy=True: engine='central'"),
    ],
)
def test_bad_settings_are_refused_naming_them(kwargs: dict[str, Any], error: type[Exception], match: str) -> None:
    settings = {"frames_per_batch": 8, "envs_per_worker": 2, "num_workers": 2, **kwargs}
    with pytest.raises(error, match=match):
        Collector("CartPole-v1", _Argmax(), engine="central", **settings)


def test_a_policy_that_cannot_act_for_a_groups_envs_at_once_is_a_policy_error() -> None:
    # Right for one worker's 2 envs, wrong for the 4 envs of a group of 2 workers (4 workers, 2 groups).
    def two_actions(td: TensorDictBase) -> torch.Tensor:
        return torch.zeros(2, dtype=torch.long)

    with pytest.raises(PolicyError, match=r"\(4,\)"):
        Collector(
            "CartPole-v1", two_actions, engine=Central(groups=2), frames_per_batch=16, envs_per_worker=2, num_workers=4
        )


def test_policy_device_is_accepted_with_central_workers() -> None:
    with Collector(
        "CartPole-v1", _Argmax(), engine="central", frames_per_batch=8, num_workers=2, policy_device="cpu", device="cpu"
    ) as collector:
        assert collector.next_batch()["action"].shape == (2, 4)


def test_with_a_copy_on_policy_device_an_update_loads_the_trained_weights_into_the_copy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No GPU here: a copy made as for another device stands in for the policy_device copy.
    from pycollect._engines.central import engine as central

    copies: list[nn.Module] = []

    def copy_for_device(config: Any, policy: Any, weights_module: Any) -> tuple[Any, Any]:
        moved = copy.deepcopy(policy)
        copies.append(moved)
        return moved, moved

    monkeypatch.setattr(central, "on_policy_device", copy_for_device)
    policy = _Threshold()
    with Collector(
        "CartPole-v1", policy, engine="central", frames_per_batch=8, envs_per_worker=2, num_workers=2
    ) as collector:
        collector.next_batch()
        with torch.no_grad():
            policy.bias.fill_(1.0)
        trained_in_place = collector.next_batch()  # the copy is called, not the trained module
        collector.update_policy_weights_()
        updated = collector.next_batch()
    assert (trained_in_place["action"] == 0).all() and (trained_in_place["policy_version"] == 0).all()
    assert (updated["action"] == 1).all() and (updated["policy_version"] == 1).all()
    assert len(copies) == 1 and float(copies[0].bias.detach()) == 1.0


def test_a_function_policy_needs_no_weights_from_to_be_updated() -> None:
    net = _Argmax()
    with Collector(
        "CartPole-v1", lambda td: net(td["observation"]), engine="central", frames_per_batch=8, num_workers=2
    ) as collector:
        collector.next_batch()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            collector.update_policy_weights_()  # the function is called here: nothing to send, nothing to warn of
        assert collector.next_batch()["policy_version"].unique().tolist() == [1]


def test_trajectory_ids_continue_after_load_state_dict() -> None:
    kwargs = {"frames_per_batch": 16, "envs_per_worker": 2, "num_workers": 2, "env_kwargs": {"length": 3}}
    with Collector(CountingEnv, engine="central", **kwargs) as collector:
        collector.next_batch()
        state = collector.state_dict()
    first, second = state["central"]["traj_ids"]["next"]  # each worker's: its own, N apart
    assert first % 2 == 0 and second % 2 == 1 and first > 0
    with Collector(CountingEnv, engine="central", **kwargs) as resumed:
        resumed.load_state_dict(state)
        ids = resumed.next_batch()["collector", "traj_ids"]
    assert ids[:, 0].tolist() == [first, first + 2, second, second + 2]


def test_a_rollout_interrupted_mid_step_is_not_continued_from_a_stale_observation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Ctrl-C while the workers step: their envs stepped once more than the trainer recorded.
    with Collector(
        CountingEnv,
        engine="central",
        frames_per_batch=20,
        envs_per_worker=2,
        num_workers=2,
        env_kwargs={"length": 1000},
    ) as collector:
        backend = collector._engine.backend  # type: ignore[attr-defined]
        step_wait, calls = backend.step_wait, [0]

        def interrupted() -> Any:
            calls[0] += 1
            if calls[0] == 3:
                raise KeyboardInterrupt  # after the step was posted, before its answers were taken
            return step_wait()

        monkeypatch.setattr(backend, "step_wait", interrupted)
        with pytest.raises(KeyboardInterrupt):
            collector.next_batch()
        batch = collector.next_batch()
    steps, next_steps = batch["observation"][..., 1], batch["next", "observation"][..., 1]
    assert (next_steps - steps == 1).all()  # every transition is one step of its env
