"""The pettingzoo env backend: ways in, groups, engines, crashes, and what is refused before any worker starts."""

from __future__ import annotations

import os
import signal
from typing import Any

import marl_factories as f
import pytest
import torch
from tensordict import TensorDictBase

import pycollect
from pycollect import Collector, ConfigError, EnvOutputError, UnsupportedSpaceError
from pycollect.plugins import resolve_env
from pycollect.testing import check_env_backend, wait_until
from pycollect.testing.multiagent import DyingAgentsEnv
from pycollect_pettingzoo import PettingZoo, PettingZooBackend

pytestmark = pytest.mark.usefixtures("pycollect_no_leftovers")


def _one_batch(env: Any, policy: Any = None, **kwargs: Any) -> TensorDictBase:
    with Collector(env, policy, **kwargs) as collector:
        return collector.next_batch()


def test_the_conformance_checks_pass() -> None:
    check_env_backend(PettingZooBackend, "marl_factories:spread", unknown_target="marl_factories:nothing")


def test_a_factory_of_a_parallel_env_is_adopted_by_the_callable_backend() -> None:
    source = resolve_env(f.spread)
    assert source.backend.name == "callable"
    assert PettingZooBackend in [type(a) for a in source.adopters]
    batch = _one_batch(f.spread, frames_per_batch=20, envs_per_worker=2, seed=0)
    assert batch["agents", "observation"].shape == (2, 10, 3, 18)
    assert batch["next", "agents", "reward"].shape == (2, 10, 3, 1)
    assert batch["agents", "action"].dtype == torch.int64 and batch["agents", "action"].shape == (2, 10, 3)


def test_an_env_class_with_env_kwargs_and_an_import_path_target() -> None:
    batch = _one_batch(
        DyingAgentsEnv, frames_per_batch=8, env_kwargs={"min_life": 50, "max_steps": 100, "n_agents": 4}, seed=0
    )
    assert batch["agents", "observation"].shape == (1, 8, 4, 4)
    batch = _one_batch("pettingzoo:mpe2.simple_spread_v3:parallel_env", frames_per_batch=8, seed=0)
    assert batch["next", "agents", "done"].shape == (1, 8, 3, 1)


def test_an_aec_env_is_converted_and_steps_as_its_parallel_twin() -> None:
    ours = _one_batch(f.spread_aec, f.categorical_policy("agents", 5), frames_per_batch=30, seed=4)
    twin = _one_batch(f.spread, f.categorical_policy("agents", 5), frames_per_batch=30, seed=4)
    assert (ours == twin).all()


def test_groups_by_type_and_per_agent() -> None:
    batch = _one_batch(PettingZoo(f.hetero, use_mask=True), frames_per_batch=8, seed=0)  # default: by type
    assert batch["scout", "observation"].shape == (1, 8, 2, 4) and batch["tank", "observation"].shape == (1, 8, 1, 5)
    assert batch["scout", "action"].dtype == torch.int64 and batch["tank", "action"].shape == (1, 8, 1, 2)
    assert batch["scout", "mask"].shape == (1, 8, 2)
    batch = _one_batch(PettingZoo(f.dying, group_map="one_group_per_agent", use_mask=True), frames_per_batch=8)
    assert {"walker_0", "walker_1", "walker_2"} <= set(batch.keys())
    groups = {"a": ["walker_0"], "b": ["walker_2", "walker_1"]}
    batch = _one_batch(PettingZoo(f.dying, group_map=groups), frames_per_batch=4)
    assert batch["b", "observation"].shape == (1, 4, 2, 4)
    # TorchRL's MarlGroupMapType names work as well
    from torchrl.envs.utils import MarlGroupMapType

    env = PettingZoo(f.dying, group_map=MarlGroupMapType.ONE_GROUP_PER_AGENT)()
    try:
        assert list(env.groups) == ["walker_0", "walker_1", "walker_2"]
    finally:
        env.close()


def test_masks_and_padding_of_agents_that_left() -> None:
    batch = _one_batch(
        PettingZoo(f.dying, use_mask=True, done_on_any=False),
        frames_per_batch=320,
        seed=2,
        envs_per_worker=4,
        env_kwargs={"max_steps": 20},
    )
    mask, next_mask = batch["agents", "mask"], batch["next", "agents", "mask"]
    left = ~next_mask & mask  # the step at which an agent leaves: its last observation, then the mask says so
    gone = ~mask  # it had left before this step: padded as TorchRL pads it
    assert left.any() and gone.any()
    assert (batch["next", "agents", "observation"][left] != 0).any()
    assert (batch["next", "agents", "observation"][gone] == 0).all()
    assert (batch["next", "agents", "reward"][gone] == 0).all()
    assert batch["next", "agents", "terminated"][gone].all() and batch["next", "agents", "truncated"][gone].all()
    # the episode ends when every agent is done (done_on_any=False), at varied lengths
    lengths = set()
    for i in range(4):
        ends = batch["next", "done"][i, :, 0].nonzero().flatten().tolist()
        lengths |= {b - a for a, b in zip([-1, *ends], ends, strict=False)}
        assert all(batch["next", "agents", "done"][i, t].all() for t in ends)
    assert len(lengths) > 1


def test_info_entries_a_group_cannot_stack_are_left_out_and_a_changed_one_is_an_error() -> None:
    batch = _one_batch(PettingZoo(f.OddInfosEnv, use_mask=True), frames_per_batch=8, seed=0)
    assert set(batch["agents", "info"].keys()) == {"left", "offset", "lucky", "grows"}
    assert batch["next", "agents", "info", "grows"].shape == (1, 8, 3, 2)
    assert batch["agents", "info"].batch_size == (1, 8, 3)
    with pytest.raises(EnvOutputError, match=r"agent 'walker_0' .* info entry 'grows' .* float32 of shape \(2,\)"):
        # Seeded: unseeded, the dying agents' random episodes left it unraised in 1 run of 18.
        _one_batch(PettingZoo(f.OddInfosEnv, use_mask=True), frames_per_batch=8, seed=0, env_kwargs={"grow_at": 3})


def test_an_agent_leaving_without_use_mask_is_an_error_naming_it() -> None:
    with pytest.raises(EnvOutputError, match=r"agent 'walker_\d' .* left the episode.*use_mask=True"):
        _one_batch(PettingZoo(f.dying, done_on_any=False), frames_per_batch=60, seed=0)


@pytest.mark.parametrize("engine", ["workers", "central"])
def test_async_batches_are_one_worker_rollout(engine: str) -> None:
    with Collector(
        PettingZoo(f.dying, use_mask=True),
        frames_per_batch=24,
        num_workers=2,
        envs_per_worker=2,
        sync=False,
        engine=engine,
        seed=1,
    ) as collector:
        batches = [collector.next_batch() for _ in range(3)]
    for batch in batches:
        assert batch.shape == (2, 12)  # one worker's K envs
        assert batch["agents", "observation"].shape == (2, 12, 3, 4)
        assert batch["next", "agents", "reward"].shape == (2, 12, 3, 1)


@pytest.mark.parametrize(
    "settings",
    [{}, {"num_workers": 2}, {"num_workers": 2, "sync": False}, {"num_workers": 2, "engine": "central"}],
    ids=["in-process", "workers", "workers-async", "central"],
)
def test_group_sub_tensordicts_carry_the_agent_dimension_for_the_policy_and_in_batches(
    settings: dict[str, Any],
) -> None:
    # TorchRL's layout: a group's sub-TensorDict has batch size [..., n_agents], for the policy
    # ([K, n]) and in batches ([K, T, n], at the root and under "next").
    with Collector(
        PettingZoo(f.dying, use_mask=True),
        f.group_dims_policy,
        frames_per_batch=24,
        envs_per_worker=2,
        seed=0,
        **settings,
    ) as collector:
        batch = collector.next_batch()
    rows, steps = batch.batch_size
    assert batch["agents"].batch_size == batch["next", "agents"].batch_size == (rows, steps, 3)
    assert batch["agents"].names == [None, "time", None]
    assert batch["agents", "seen_batch_dims"].shape == (rows, steps, 3)
    assert (batch["agents", "seen_batch_dims"] == 2).all()  # the policy saw [K, 3]
    assert batch["collector"].batch_size == (rows, steps)  # other sub-TensorDicts are as they were
    flat = batch.reshape(-1)  # what a training loop does: the agent dimension stays
    assert flat["agents"].batch_size == (rows * steps, 3)


def test_stacked_workers_and_split_trajectories_keep_the_agent_dimension() -> None:
    env = PettingZoo(f.dying, use_mask=True)
    batch = _one_batch(env, frames_per_batch=24, num_workers=2, envs_per_worker=2, cat_results="stack", seed=0)
    assert batch.batch_size == (2, 2, 6) and batch["next", "agents"].batch_size == (2, 2, 6, 3)
    assert batch["agents"].names == [None, None, "time", None]
    batch = _one_batch(env, frames_per_batch=48, envs_per_worker=2, split_trajs=True, seed=0)
    n_traj, t_max = batch.batch_size
    assert batch["agents"].batch_size == batch["next", "agents"].batch_size == (n_traj, t_max, 3)
    assert batch["agents"].names == [None, "time", None]
    padded = ~batch["collector", "mask"]
    assert padded.any() and (batch["next", "agents", "observation"][padded] == 0).all()


def test_set_truncated_marks_every_agent_at_the_end_of_each_rollout() -> None:
    batch = _one_batch(f.spread, frames_per_batch=20, envs_per_worker=2, set_truncated=True, seed=0)
    assert batch["next", "truncated"][:, -1].all() and batch["next", "agents", "truncated"][:, -1].all()
    assert batch["next", "agents", "done"][:, -1].all()


def test_max_frames_per_traj_truncates_every_agent() -> None:
    batch = _one_batch(f.spread, frames_per_batch=12, max_frames_per_traj=5, seed=0)
    cut = batch["next", "truncated"][0, :, 0]
    assert cut.nonzero().flatten().tolist() == [4, 9]
    assert batch["next", "agents", "truncated"][0, cut].all() and batch["next", "agents", "done"][0, cut].all()
    assert not batch["next", "agents", "done"][0, ~cut].any()


def test_a_killed_worker_cuts_every_agents_trajectory_and_is_restarted() -> None:
    long_lived = {"min_life": 10_000, "max_steps": 10_000}
    with Collector(
        PettingZoo(f.dying, use_mask=True),
        frames_per_batch=40,
        envs_per_worker=2,
        num_workers=2,
        seed=0,
        env_kwargs=long_lived,
    ) as c:
        c.next_batch()
        wait_until(lambda: c._engine.consumers[1].available() == 2, timeout_s=60, what="worker 1's ring to fill")
        victim = c.stats().workers[1].pid
        os.kill(victim, signal.SIGKILL)
        wait_until(
            lambda: any(e.kind == "exited" and e.worker == 1 for e in c.stats().events),
            timeout_s=60,
            what="the supervisor to report worker 1's exit",
        )
        batches = [c.next_batch() for _ in range(4)]
        stats = c.stats()
    assert stats.restarts == 1 and stats.workers[1].generation == 2
    old = [b for b in batches if not (b["collector", "traj_ids"][2:] >= 1 << 32).any()]
    cut = [b for b in old if b["next", "truncated"][2:, -1].all()]
    assert cut, "the last rollout of the killed generation ends truncated"
    for b in cut:
        assert b["next", "agents", "truncated"][2:, -1].all() and b["next", "agents", "done"][2:, -1].all()
        assert not b["next", "agents", "done"][2:, :-1].any()  # nobody died before: only the cut ends them
    assert any((b["collector", "traj_ids"][2:] >= 1 << 32).any() for b in batches), "the restarted worker delivered"


# -- refused before any worker starts ---------------------------------------------------------


def test_agents_whose_spaces_differ_inside_a_requested_group_are_refused_naming_them() -> None:
    with pytest.raises(ConfigError, match=r"group 'agents' .*'scout_0' and 'tank_0' have different observation spaces"):
        Collector(PettingZoo(f.hetero, group_map="all_in_one_group"), frames_per_batch=8, num_workers=2)
    with pytest.raises(ConfigError, match=r"group 'g' .*'scout_1' and 'tank_0'"):
        Collector(PettingZoo(f.hetero, group_map={"g": ["scout_1", "tank_0"], "h": ["scout_0"]}), frames_per_batch=8)


def test_an_object_that_is_not_a_pettingzoo_env_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"marl_factories:not_pettingzoo.*not a PettingZoo ParallelEnv or AECEnv"):
        Collector("pettingzoo:marl_factories:not_pettingzoo", frames_per_batch=8, num_workers=2)
    with pytest.raises(ConfigError, match=r"not_pettingzoo.*built a .*not a PettingZoo ParallelEnv or AECEnv"):
        Collector(PettingZoo(f.not_pettingzoo), frames_per_batch=8, num_workers=2)


def test_an_aec_env_that_cannot_be_converted_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"'turns_v0' .* AEC env whose metadata does not say is_parallelizable"):
        Collector(f.turn_based, frames_per_batch=8, num_workers=2)


def test_bad_group_maps_are_refused() -> None:
    with pytest.raises(ConfigError, match="group_map='by_colour' is not one of"):
        Collector(PettingZoo(f.dying, group_map="by_colour"), frames_per_batch=8)
    with pytest.raises(ConfigError, match=r"leaves out agents \['walker_2'\]"):
        Collector(PettingZoo(f.dying, group_map={"a": ["walker_0", "walker_1"]}), frames_per_batch=8)
    with pytest.raises(ConfigError, match="group name 'next'"):
        Collector(PettingZoo(f.dying, group_map={"next": ["walker_0", "walker_1", "walker_2"]}), frames_per_batch=8)


def test_without_the_plugin_a_pettingzoo_env_is_refused_not_stepped_as_one_agent() -> None:
    source = pycollect.envs.source.EnvSource(resolve_env(f.spread).backend, f.spread)  # no adopters
    with pytest.raises(ConfigError, match="PettingZoo ParallelEnv.*pip install pycollect-pettingzoo"):
        source.make()


def test_unsupported_spaces_are_named() -> None:
    import gymnasium as gym

    class TextAgents(DyingAgentsEnv):
        def observation_space(self, agent: str) -> gym.Space[Any]:
            return gym.spaces.Discrete(4)

    with pytest.raises(UnsupportedSpaceError, match="agent 'walker_0'"):
        PettingZoo(TextAgents)()


@pytest.mark.timeout(180)
def test_the_central_engine_marks_each_agents_flags_where_the_trajectory_limit_cuts_as_the_workers_do() -> None:
    """``max_frames_per_traj``: the central engine's workers cut the episodes; the trainer marks the agents' flags."""

    def batches(engine: str) -> list[TensorDictBase]:
        env = PettingZoo(f.hetero, use_mask=True, done_on_any=False, group_map="one_group_per_type")
        with Collector(
            env,
            f.hetero_policy(),
            frames_per_batch=2 * 2 * 20,
            num_workers=2,
            envs_per_worker=2,
            seed=5,
            engine=engine,
            max_frames_per_traj=7,
        ) as collector:
            return [collector.next_batch() for _ in range(3)]  # the limit counted across rollouts

    workers, central = batches("workers"), batches("central")
    for ours, theirs in zip(central, workers, strict=True):
        for key in theirs.keys(True, True):
            assert torch.equal(ours[key], theirs[key]), key
    cut = sum(int(b["next", "tank", "truncated"].sum()) for b in workers)
    assert cut > 0  # the limit cut episodes, and the agents' own flags say so


@pytest.mark.timeout(240)
def test_a_resumed_central_run_marks_the_agents_flags_at_the_trajectory_limit_as_the_uninterrupted_one() -> None:
    """The trainer's count of each episode's steps is in the checkpoint: episodes cross the resume."""
    settings: dict[str, Any] = {
        "frames_per_batch": 2 * 2 * 10,
        "num_workers": 2,
        "envs_per_worker": 2,
        "seed": 3,
        "engine": "central",
        "snapshots": True,
        "max_frames_per_traj": 7,  # cuts every episode (max_cycles 25), across batches of 10 steps
    }

    def collector(**extra: Any) -> Collector:
        return Collector(PettingZoo(f.spread), **settings, **extra)

    with collector() as whole:
        expected = [whole.next_batch() for _ in range(4)]
    with collector() as first:
        [first.next_batch() for _ in range(2)]
        state = first.state_dict(env_states=True)
    with collector(resume=state) as resumed:
        got = [resumed.next_batch() for _ in range(2)]
    for ours, theirs in zip(got, expected[2:], strict=True):
        for key in theirs.keys(True, True):
            assert torch.equal(ours[key], theirs[key]), key
    assert int(expected[3]["next", "agents", "truncated"].sum()) > 0  # the limit marked the agents' flags
