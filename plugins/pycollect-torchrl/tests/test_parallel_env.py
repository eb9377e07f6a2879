"""pycollect.torchrl.ParallelEnv: TorchRL's ParallelEnv semantics on pycollect's workers."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
import torch
import torchrl_factories as f
from tensordict import TensorDictBase
from torchrl.collectors import Collector, MultiSyncCollector
from torchrl.envs import ParallelEnv as TorchRLParallelEnv
from torchrl.envs import SerialEnv

import pycollect.torchrl
from pycollect import ActionError, ConfigError, WorkerCrashedError
from pycollect.testing.leaks import segment_mappings
from pycollect_torchrl import ParallelEnv

pytestmark = [pytest.mark.usefixtures("pycollect_no_leftovers"), pytest.mark.timeout(240)]


def _keys(td: TensorDictBase) -> set[Any]:
    return {k if isinstance(k, tuple) else (k,) for k in td.keys(include_nested=True, leaves_only=True)}


def _assert_equal(ours: TensorDictBase, theirs: TensorDictBase) -> None:
    assert _keys(ours) == _keys(theirs)
    for key in _keys(theirs):
        torch.testing.assert_close(ours[key], theirs[key], msg=lambda m, key=key: f"{key}: {m}")


def test_it_is_what_pycollect_torchrl_names() -> None:
    assert pycollect.torchrl.ParallelEnv is ParallelEnv


@pytest.mark.parametrize(
    ("factory", "make_policy"),
    [(f.cartpole, f.first_feature_policy), (f.transformed, f.first_feature_policy), (f.cheetah, f.squash_policy)],
)
def test_a_rollout_equals_torchrl_s_parallel_env_key_by_key(factory: Any, make_policy: Any) -> None:
    policy = make_policy()
    results = []
    for cls in (ParallelEnv, TorchRLParallelEnv):
        env = cls(2, factory)
        try:
            assert env.batch_size == torch.Size([2])
            env.set_seed(11)
            results.append((env.rollout(60, policy, break_when_any_done=False), env.full_observation_spec.clone()))
        finally:
            env.close()
    (ours, our_specs), (theirs, their_specs) = results
    assert our_specs == their_specs
    # episodes ended, and step_and_maybe_reset reset them (but cheetah-run's, which last 1000 steps)
    assert bool(theirs["next", "done"].any()) is not (factory is f.cheetah)
    _assert_equal(ours, theirs)


def test_torchrl_s_collector_over_it_equals_the_collector_over_torchrl_s() -> None:
    policy = f.first_feature_policy()
    batches = []
    for cls in (ParallelEnv, TorchRLParallelEnv):
        env = cls(2, f.transformed)
        env.set_seed(3)
        collector = Collector(env, policy, frames_per_batch=40, total_frames=80)
        try:
            batches.append([batch.clone() for batch in collector])
        finally:
            collector.shutdown()  # closes the env (TorchRL's ParallelEnv refuses a second close)
            env.close(raise_if_closed=False)
    assert len(batches[0]) == len(batches[1]) == 2
    for ours, theirs in zip(*batches, strict=True):
        assert ours.batch_size == torch.Size([2, 20])
        _assert_equal(ours, theirs)


def test_torchrl_s_multi_sync_collector_builds_it_in_its_processes() -> None:
    collector = MultiSyncCollector(
        [f.pycollect_parallel_cartpole, f.pycollect_parallel_cartpole], None, frames_per_batch=32, total_frames=64
    )
    try:
        batches = list(collector)
    finally:
        collector.shutdown()
    assert len(batches) == 2
    assert batches[0].numel() == 32 and ("next", "observation") in _keys(batches[0])


def test_a_crash_raises_with_the_env_s_traceback() -> None:
    env = ParallelEnv(2, f.crashing)
    try:
        env.reset()
        env.rand_step()
        with pytest.raises(WorkerCrashedError) as caught:
            env.rand_step()
        assert "boom at step 2" in str(caught.value.error) and "_step" in str(caught.value.error)
        with pytest.raises(WorkerCrashedError):
            env.rand_step()
    finally:
        env.close()


def test_with_restarts_a_crashed_env_reports_its_episode_truncated_and_resets() -> None:
    env = ParallelEnv(2, f.crashing, restart="permanent", backoff_initial_s=0.01)
    try:
        td = env.reset()
        td = env.rand_step(td)
        td, td_next = env.step_and_maybe_reset(env.rand_action(td))  # the second step crashes every worker
        # TinyEnv reports done and terminated only: a cut episode is done without being terminated.
        assert td["next", "done"].all() and not td["next", "terminated"].any()
        assert (td_next["count"] == 0).all()  # reset by step_and_maybe_reset, in the restarted workers
        td = env.rand_step(td_next)
        assert (td["next", "count"] == 1).all()
        assert all(worker.generation >= 2 for worker in env.workers)
    finally:
        env.close()


def test_close_is_final_until_the_next_use_and_pickles_rebuild_it() -> None:
    before = segment_mappings()
    env = ParallelEnv(2, f.tiny, max_restarts=2)
    td = env.reset()
    assert not env.is_closed and len(env.workers) == 2
    assert segment_mappings() - before
    clone = pickle.loads(pickle.dumps(env))  # how a collector's process gets it: rebuilt, not started
    assert clone.is_closed and clone.batch_size == env.batch_size
    env.close()
    env.close()
    assert env.is_closed and env.workers == ()
    assert not segment_mappings() - before  # released at close, though env (and a reset's output) are still held
    assert td.batch_size == torch.Size([2])
    td = clone.rollout(3)
    assert td.batch_size == torch.Size([2, 3])
    clone.close()


@pytest.mark.parametrize(
    ("factory", "match"),
    [(f.batched, "already batched"), (f.tiny_non_tensor, "observation 'text' is a NonTensor spec")],
)
def test_envs_that_cannot_be_laid_out_are_refused_when_it_is_made(factory: Any, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        ParallelEnv(2, factory)


def test_torchrl_s_arguments_are_accepted_and_per_worker_lists_must_agree() -> None:
    env = ParallelEnv(2, [f.tiny, f.tiny], create_env_kwargs=[{}, {}], mp_start_method="spawn", shared_memory=True)
    env.close()
    with pytest.raises(ConfigError, match="a different value per worker is not supported"):
        ParallelEnv(2, [f.tiny, f.cartpole])
    with pytest.raises(TypeError, match="unexpected argument"):
        ParallelEnv(2, f.tiny, no_such_argument=1)


def test_it_matches_serial_env_with_a_nested_env() -> None:
    results = []
    for cls in (ParallelEnv, SerialEnv):
        env = cls(2, f.tiny_nested)
        try:
            env.set_seed(0)
            torch.manual_seed(0)
            results.append(env.rollout(8, break_when_any_done=False))
        finally:
            env.close()
    _assert_equal(*results)


def test_stepping_a_done_env_without_a_reset_is_refused_before_any_worker_sees_it() -> None:
    env = ParallelEnv(2, f.tiny)  # 5-step episodes
    try:
        td = env.reset()
        for _ in range(5):
            td = env.step(env.rand_action(td))["next"]
        assert td["done"].all()
        with pytest.raises(RuntimeError, match=r"env\(s\) \[0, 1\] are done and were not reset since"):
            env.step(env.rand_action(td))
        td, _td_next = env.step_and_maybe_reset(env.rand_action(env.reset()))  # the workers live on
        assert (td["next", "count"] == 1).all()
    finally:
        env.close()


@pytest.mark.parametrize(
    ("action", "match"),
    [
        (torch.full((2, 2), 0.9), r"actions of shape \(2, 2\) and dtype float32.*OneHot\[2\].*integer"),
        (torch.zeros((2, 3), dtype=torch.int64), r"actions of shape \(2, 3\).*shape \(2, 2\) for 2 envs"),
    ],
    ids=["floats-for-one-hot", "wrong-shape"],
)
def test_actions_that_do_not_fit_are_refused_before_any_worker_sees_them(action: torch.Tensor, match: str) -> None:
    """Never cast (0.9 would become 0) nor broadcast into the workers' action area."""
    env = ParallelEnv(2, f.cartpole)
    try:
        td = env.reset()
        with pytest.raises(ActionError, match=match):
            env.step(td.set("action", action))
        env.step(env.rand_action(env.reset()))  # nothing was sent: the workers step on
    finally:
        env.close()


def test_the_plugin_uses_only_pycollects_public_api() -> None:
    """The plugin (ParallelEnv: start_backend, StepBackend) imports only names pycollect's public modules export."""
    import ast
    import importlib
    from pathlib import Path

    import pycollect_torchrl

    private = []
    for path in sorted(Path(pycollect_torchrl.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "pycollect":
                module = node.module or ""
                exported = getattr(importlib.import_module(module), "__all__", ())
                for alias in node.names:
                    if any(part.startswith("_") for part in module.split(".")) or alias.name not in exported:
                        private.append(f"{path.name}:{node.lineno}: from {module} import {alias.name}")
            elif isinstance(node, ast.Import):
                private += [f"{path.name}:{node.lineno}: import {a.name}" for a in node.names if "._" in a.name]
    assert not private, private


def test_stats_count_every_step_of_the_workers_and_stay_readable_after_close() -> None:
    env = ParallelEnv(2, f.tiny)
    assert env.stats().metrics is None  # no worker started yet
    env.rollout(40, break_when_any_done=False)
    metrics = env.stats().metrics
    assert metrics is not None and len(metrics.workers) == 2
    assert all(worker.steps >= 40 and worker.frames == worker.steps for worker in metrics.workers)
    assert metrics.trainer.batches == 40 and metrics.trainer.frames == 80
    env.close()
    after = env.stats().metrics
    assert after is not None and after.trainer.frames == 80
