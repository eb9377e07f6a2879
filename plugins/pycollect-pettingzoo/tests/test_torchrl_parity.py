"""pycollect batches against TorchRL's own PettingZooEnv rollouts: same seeds, a deterministic policy, key by key."""

from __future__ import annotations

from typing import Any

import marl_factories as f
import pytest
import torch
from tensordict import TensorDictBase
from torchrl.envs.libs.pettingzoo import PettingZooWrapper

from pycollect import Collector
from pycollect._rollout.seeding import env_seeds
from pycollect_pettingzoo import PettingZoo

pytestmark = pytest.mark.usefixtures("pycollect_no_leftovers")

# What a pycollect batch holds besides TorchRL's layout: its own keys, and the team reward.
OWN_KEYS = {("policy_version",), ("collector", "traj_ids"), ("next", "reward")}


def _keys(td: TensorDictBase) -> set[Any]:
    return {k if isinstance(k, tuple) else (k,) for k in td.keys(include_nested=True, leaves_only=True)}


def _sub_tensordicts(td: TensorDictBase) -> dict[Any, TensorDictBase]:
    """Every nested TensorDict of ``td`` (the root at ``()``), by key."""
    out: dict[Any, TensorDictBase] = {(): td}
    for key in td.keys(include_nested=True):
        value = td.get(key)
        if isinstance(value, TensorDictBase):
            out[key if isinstance(key, tuple) else (key,)] = value
    return out


def _torchrl_rollout(factory: Any, options: dict[str, Any], seed: int, steps: int, policy: Any) -> TensorDictBase:
    group_map = options.get("group_map")
    if group_map is None or isinstance(group_map, str):
        from torchrl.envs.utils import MarlGroupMapType

        group_map = {
            None: MarlGroupMapType.ALL_IN_ONE_GROUP,
            "all_in_one_group": MarlGroupMapType.ALL_IN_ONE_GROUP,
            "one_group_per_agent": MarlGroupMapType.ONE_GROUP_PER_AGENT,
            "one_group_per_type": None,  # TorchRL's own default for PettingZoo: by agent type
        }[group_map]
    env = PettingZooWrapper(
        factory(),
        group_map=group_map,
        use_mask=options.get("use_mask", False),
        done_on_any=options.get("done_on_any"),
        categorical_actions=True,
    )
    try:
        td = env.reset(seed=seed)
        return env.rollout(steps, policy, auto_reset=False, tensordict=td, break_when_any_done=False)
    finally:
        env.close()


def _compare(batch: TensorDictBase, factory: Any, options: dict[str, Any], seed: int, k: int, policy: Any) -> None:
    steps = batch.shape[-1]
    workers = batch.shape[0] // k
    for w in range(workers):
        for i, env_seed in enumerate(env_seeds(seed, k, w)):
            reference = _torchrl_rollout(factory, options, int(env_seed), steps, policy)
            row = batch[w * k + i]
            assert _keys(row) - OWN_KEYS == _keys(reference), "keys"
            # every sub-TensorDict's batch size and dim names: a group's carries its agent dimension
            ours_tds, theirs_tds = _sub_tensordicts(row), _sub_tensordicts(reference)
            for key, theirs_td in theirs_tds.items():
                assert ours_tds[key].batch_size == theirs_td.batch_size, ("batch size", key)
                assert ours_tds[key].names == theirs_td.names, ("names", key)
            for key in _keys(reference):
                theirs, ours = reference[key], row[key]
                assert ours.dtype == theirs.dtype, key
                assert ours.shape == theirs.shape, key
                where = f"{key} (worker {w}, env {i})"
                torch.testing.assert_close(ours, theirs, msg=lambda m, where=where: f"{where}: {m}")
            # the team reward: the sum of the live agents' rewards
            groups = {key[1] for key in _keys(reference) if key[0] == "next" and key[-1] == "reward"}
            team = sum(reference["next", g, "reward"].sum((-2, -1)) for g in groups)
            torch.testing.assert_close(row["next", "reward"][..., 0], team)


CASES = {
    # name: (factory, options, policy, frames per env)
    "simple_spread": (f.spread, {}, f.categorical_policy("agents", 5), 60),
    "dying, done on any": (f.dying, {"use_mask": True}, f.categorical_policy("agents", 3), 40),
    "dying, done on all": (f.dying, {"use_mask": True, "done_on_any": False}, f.categorical_policy("agents", 3), 40),
    "dying, one group per agent": (
        f.dying,
        {"use_mask": True, "done_on_any": False, "group_map": "one_group_per_agent"},
        __import__("tensordict.nn", fromlist=["TensorDictSequential"]).TensorDictSequential(
            *(f.categorical_policy(f"walker_{i}", 3) for i in range(3))
        ),
        40,
    ),
    "heterogeneous groups": (
        f.hetero,
        {"use_mask": True, "done_on_any": False, "group_map": "one_group_per_type"},
        f.hetero_policy(),
        40,
    ),
    # per-agent info entries ((group, "info", name), float32) and action masks from the infos
    "infos, done on any": (f.dying_infos, {"use_mask": True}, f.categorical_policy("agents", 3), 40),
    "infos, heterogeneous groups": (
        f.hetero_infos,
        {"use_mask": True, "done_on_any": False, "group_map": "one_group_per_type"},
        f.hetero_policy(),
        40,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("num_workers", [0, 2])
def test_batches_equal_torchrl_pettingzoo_env_rollouts(case: str, num_workers: int) -> None:
    factory, options, policy, frames = CASES[case]
    k = 2
    with Collector(
        PettingZoo(factory, **options),
        policy,
        frames_per_batch=frames * k * max(num_workers, 1),
        num_workers=num_workers,
        envs_per_worker=k,
        seed=11,
    ) as collector:
        batch = collector.next_batch()
    _compare(batch, factory, options, 11, k, policy)


@pytest.mark.parametrize("case", ["heterogeneous groups", "infos, heterogeneous groups"])
def test_the_central_engine_gives_the_same_batches(case: str) -> None:
    factory, options, policy, frames = CASES[case]
    k = 2
    with Collector(
        PettingZoo(factory, **options),
        policy,
        frames_per_batch=frames * k * 2,
        num_workers=2,
        envs_per_worker=k,
        seed=5,
        engine="central",
    ) as collector:
        batch = collector.next_batch()
    _compare(batch, factory, options, 5, k, policy)
