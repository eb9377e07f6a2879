"""The ray engine on a local Ray cluster (loopback only, see conftest)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import warnings
from typing import Any

import pytest
import torch
from ray_helpers import ActsItsWeight, InfoCountingEnv, acts_with, agents_policy, alive, batched_cartpoles
from tensordict import TensorDictBase

from pycollect import (
    Collector,
    CollectorConfig,
    ConfigError,
    CpuPolicy,
    PyCollectWarning,
    WorkerCrashedError,
)
from pycollect.default_plugins import CompileRunner
from pycollect.testing import check_engine, wait_until
from pycollect.testing.leaks import shm_segments
from pycollect.testing.settings import changed_supervision, same_setting, unchanged_settings
from pycollect_ray import RayEngine, actor_seed
from pycollect_ray.engine import ACTOR_DERIVED, actor_config

ENV = "CartPole-v1"


def _layout(batch: TensorDictBase) -> dict[Any, tuple[tuple[int, ...], torch.dtype]]:
    return {key: (tuple(value.shape[2:]), value.dtype) for key, value in batch.items(True, True)}


def test_the_engine_and_the_scheme_are_listed() -> None:
    listing = json.loads(subprocess.check_output([sys.executable, "-m", "pycollect", "plugins", "--json"]))
    assert any(item["name"] == "ray" and item["distribution"] == "pycollect-ray" for item in listing["engines"])
    assert any(item["name"] == "ray" and item["distribution"] == "pycollect-ray" for item in listing["schemes"])


def test_settings_the_actors_cannot_honour_are_refused_before_anything_runs() -> None:
    with pytest.raises(ConfigError, match="cat_results='stack'"):
        Collector(ENV, frames_per_batch=8, num_workers=1, cat_results="stack", engine="ray")
    with pytest.raises(ConfigError, match="weight_sync='shared_memory'"):
        Collector(ENV, frames_per_batch=8, num_workers=1, weight_sync="shared_memory", engine="ray")
    with pytest.raises(ConfigError, match="num_actors"):
        RayEngine(num_actors=0)


@pytest.mark.timeout(240)
def test_batches_have_the_local_format_and_each_actor_the_derived_seed(ray_cluster: None) -> None:
    engine = RayEngine(num_actors=2, num_cpus_per_actor=0.5)
    with Collector(ENV, frames_per_batch=64, total_frames=128, num_workers=1, seed=7, engine=engine) as collector:
        assert collector.frames_per_batch == 64 and len(collector) == 2
        batches = [batch.clone() for batch in collector]
    with Collector(ENV, frames_per_batch=64, total_frames=128, num_workers=2, seed=7) as local:
        local_batches = [batch.clone() for batch in local]
    assert [b.batch_size for b in batches] == [b.batch_size for b in local_batches] == [torch.Size([2, 32])] * 2
    assert _layout(batches[0]) == _layout(local_batches[0])
    assert batches[0].names == local_batches[0].names
    ids = batches[0]["collector", "traj_ids"]
    assert ids[0].unique().tolist() != ids[1].unique().tolist()  # trajectory ids unique over actors
    for index in range(2):  # actor i collects what a local collector with its derived seed collects
        with Collector(ENV, frames_per_batch=32, total_frames=64, num_workers=1, seed=actor_seed(7, index)) as alone:
            for batch, expected in zip(batches, alone, strict=True):
                for key in ("observation", "action", ("next", "reward"), ("next", "done")):
                    assert torch.equal(batch[key][index], expected[key][0]), (index, key)


def test_a_batched_env_in_each_actor_gives_the_batches_of_its_single_envs(
    ray_cluster: None, runtime_env: dict[str, Any]
) -> None:
    settings = {"frames_per_batch": 64, "total_frames": 128, "num_workers": 1, "envs_per_worker": 2, "seed": 5}
    engine = RayEngine(num_actors=2, num_cpus_per_actor=0.5, runtime_env=runtime_env)
    with Collector(batched_cartpoles, engine=engine, **settings) as collector:
        batched = [batch.clone() for batch in collector]
    with Collector(ENV, engine=RayEngine(num_actors=2, num_cpus_per_actor=0.5), **settings) as collector:
        single = [batch.clone() for batch in collector]
    for ours, theirs in zip(batched, single, strict=True):
        for key in theirs.keys(True, True):
            assert torch.equal(ours[key], theirs[key]), key


@pytest.mark.timeout(300)
def test_weights_reach_every_actor_and_a_killed_actor_is_restarted_until_max_restarts(
    ray_cluster: None, runtime_env: dict[str, Any]
) -> None:
    import ray

    net = ActsItsWeight()
    engine = RayEngine(num_actors=2, num_cpus_per_actor=0.5, max_restarts=1, runtime_env=runtime_env)
    with Collector(ENV, net, frames_per_batch=32, num_workers=1, engine=engine) as collector:
        first = collector.next_batch()
        assert (first["action"] == 0).all() and (first["policy_version"] == 0).all()

        with torch.no_grad():
            net.value.fill_(1)
        collector.update_policy_weights_()
        wait_until(lambda: acts_with(collector, 1), timeout_s=120, what="every actor on version 1")

        actors = collector._engine.actors  # type: ignore[attr-defined]
        old = ray.get(actors[0].pid.remote())
        os.kill(old, signal.SIGKILL)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", PyCollectWarning)
            reported = lambda: any("ray actor 0 died" in str(w.message) for w in caught)  # noqa: E731
            wait_until(
                lambda: collector.next_batch() is not None and reported(),
                timeout_s=120,
                what="the death of actor 0 to be reported",
            )
            # The restarted actor got the latest weights before its first rollout.
            wait_until(lambda: acts_with(collector, 1), timeout_s=120, what="the restarted actor to act with version 1")
        assert ray.get(actors[0].pid.remote()) != old

        os.kill(ray.get(actors[0].pid.remote()), signal.SIGKILL)
        gave_up = r"ray actor 0 died 2 time\(s\), past max_restarts=1"
        with pytest.raises(WorkerCrashedError, match=gave_up) as info, warnings.catch_warnings():
            warnings.simplefilter("ignore", PyCollectWarning)
            wait_until(lambda: collector.next_batch() is None, timeout_s=120, what="the give-up")
        assert info.value.worker == 0 and info.value.error


def _ray_but_no_collector(pid: int) -> bool:
    """A process Ray starts for itself (an idle worker it keeps for later tasks), not a collector actor."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            command = cmdline.read().decode(errors="replace")
    except FileNotFoundError:
        return False
    return command.startswith("ray::") and not command.startswith("ray::CollectorActor")


@pytest.mark.timeout(600)
def test_the_engine_passes_check_engine(ray_cluster: None) -> None:
    """Order, batch format, weights stamps, close leaves nothing, a crash named: as the built-in engines."""
    engine = RayEngine(num_actors=2, num_cpus_per_actor=0.5)
    check_engine(engine, num_workers=1, foreign=_ray_but_no_collector, close_timeout_s=60)


@pytest.mark.timeout(180)
def test_shutdown_leaves_no_actor_worker_or_segment(ray_cluster: None) -> None:
    import ray

    engine = RayEngine(num_actors=2, num_cpus_per_actor=0.5)
    collector = Collector(ENV, frames_per_batch=32, num_workers=1, engine=engine)
    collector.next_batch()
    metrics = [stats.metrics for stats in collector.stats().actors]  # each actor's own collection's
    assert all(m is not None and len(m.workers) == 1 and m.workers[0].frames >= 16 for m in metrics), metrics
    assert collector.stats().metrics is not None and collector.stats().metrics.trainer.frames == 32
    actors = collector._engine.actors  # type: ignore[attr-defined]
    actor_pids = ray.get([actor.pid.remote() for actor in actors])
    worker_pids = [pid for pids in ray.get([actor.worker_pids.remote() for actor in actors]) for pid in pids]
    assert len(worker_pids) == 2 and all(map(alive, actor_pids + worker_pids))
    collector.shutdown()
    wait_until(lambda: not any(map(alive, actor_pids + worker_pids)), timeout_s=60, what="actors and workers to exit")
    assert not any(shm_segments(pid) for pid in actor_pids)
    collector.shutdown()  # idempotent


_OWN_CLUSTER = """
import ray
from pycollect import Collector
from pycollect.testing import check_engine, wait_until
from pycollect.testing.leaks import child_processes
from pycollect_ray import RayEngine

engine = RayEngine(num_actors=1, init_kwargs={"num_cpus": 1, "address": "local", "log_to_driver": False})
with Collector("CartPole-v1", frames_per_batch=16, total_frames=32, num_workers=1, engine=engine) as collector:
    assert len(list(collector)) == 2 and ray.is_initialized()
assert not ray.is_initialized()
wait_until(lambda: not child_processes(), timeout_s=60, what="Ray's processes to exit")
print("CLEAN")
"""


@pytest.mark.timeout(180)
def test_a_cluster_the_engine_started_is_shut_down_with_it() -> None:
    result = subprocess.run([sys.executable, "-c", _OWN_CLUSTER], capture_output=True, text=True, timeout=170)
    assert result.returncode == 0 and "CLEAN" in result.stdout, result.stderr[-3000:]


@pytest.mark.timeout(240)
def test_async_batches_are_one_actors_rollout_as_it_comes_from_every_actor(ray_cluster: None) -> None:
    engine = RayEngine(num_actors=2, num_cpus_per_actor=0.5)
    with Collector(ENV, frames_per_batch=32, num_workers=1, sync=False, seed=3, engine=engine) as collector:
        seen: set[int] = set()

        def both_actors_delivered() -> bool:
            batch = collector.next_batch()
            assert batch.batch_size == torch.Size([1, 32])  # one actor's one worker's rollout
            actors = (batch["collector", "traj_ids"] % 2).unique().tolist()
            assert len(actors) == 1, actors  # a batch never mixes actors
            seen.update(actors)
            return seen == {0, 1}

        wait_until(both_actors_delivered, timeout_s=120, what="rollouts from both actors")


@pytest.mark.timeout(240)
@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
def test_multi_agent_batches_are_the_local_ones_in_torchrl_layout(
    ray_cluster: None, runtime_env: dict[str, Any], sync: bool
) -> None:
    # PettingZoo envs through pycollect-pettingzoo (installed before this plugin's tests in CI):
    # each actor's rows are what a local collector with its derived seed collects, key by key,
    # and every group keeps its agent dimension ([K, T, n_agents]) in the trainer's batch.
    pettingzoo = pytest.importorskip("pycollect_pettingzoo", reason="the multi-agent test needs pycollect-pettingzoo")
    from pycollect.testing.multiagent import DyingAgentsEnv

    env = pettingzoo.PettingZoo(DyingAgentsEnv, use_mask=True, done_on_any=False)
    settings: dict[str, Any] = {"num_workers": 1, "envs_per_worker": 2, "seed": 7, "env_kwargs": {"infos": True}}
    engine = RayEngine(num_actors=2, num_cpus_per_actor=0.5, runtime_env=runtime_env)
    with Collector(env, agents_policy(), frames_per_batch=48, sync=sync, engine=engine, **settings) as collector:
        batch = collector.next_batch().clone()
    rows, steps = (4, 12) if sync else (2, 24)  # async: one actor's rollout of the whole frames_per_batch
    assert batch.batch_size == (rows, steps)
    assert batch["agents"].batch_size == batch["next", "agents"].batch_size == (rows, steps, 3)
    assert batch["agents"].names == [None, "time", None]
    actors = (batch["collector", "traj_ids"] % 2)[:, 0].tolist()  # the actor of each row
    assert actors == ([0, 0, 1, 1] if sync else [actors[0]] * 2)
    for index in sorted(set(actors)):
        alone = {**settings, "seed": actor_seed(7, index)}
        with Collector(env, agents_policy(), frames_per_batch=2 * steps, **alone) as local:
            expected = local.next_batch()
        ours = batch[[row for row, actor in enumerate(actors) if actor == index]]
        keys = set(expected.keys(True, True)) - {("collector", "traj_ids")}
        assert keys == set(ours.keys(True, True)) - {("collector", "traj_ids")}
        assert ("agents", "info", "left") in keys and ("next", "agents", "reward") in keys
        for key in keys:
            assert torch.equal(ours[key], expected[key]), (index, key)


@pytest.mark.timeout(120)
def test_actors_that_never_started_are_not_waited_for_again_at_close(
    ray_cluster: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Actors Ray cannot place (64 CPUs each on a 2-CPU cluster) fail after timeout_s, once: close
    does not wait another timeout_s on close() calls that the never-started actors cannot run."""
    import ray

    waits: list[float | None] = []
    real_wait = ray.wait

    def counting_wait(refs: list[Any], *args: Any, **kwargs: Any) -> Any:
        waits.append(kwargs.get("timeout"))
        return real_wait(refs, *args, **kwargs)

    monkeypatch.setattr(ray, "wait", counting_wait)
    engine = RayEngine(num_actors=2, num_cpus_per_actor=64, timeout_s=3)
    with pytest.raises(ConfigError, match="ray actor 0 did not start within 3 s"):
        Collector(ENV, frames_per_batch=8, engine=engine)
    assert not [timeout for timeout in waits if timeout is None or timeout > 0]


@pytest.mark.parametrize("timeout_s", [0, -1, float("inf"), 1e300, True, "10"])
def test_timeout_s_out_of_range_is_refused(timeout_s: Any) -> None:
    with pytest.raises(ConfigError, match=r"RayEngine\(timeout_s=.*at most 1e\+09 s"):
        RayEngine(timeout_s=timeout_s)


@pytest.mark.timeout(240)
def test_every_setting_reaches_the_actors_collector_unchanged_but_the_derived_ones(
    ray_cluster: None, runtime_env: dict[str, object]
) -> None:
    import ray

    config = CollectorConfig(
        frames_per_batch=24,
        total_frames=48,
        envs_per_worker=2,
        num_workers=1,
        sync=False,
        max_frames_per_traj=3,
        init_random_frames=8,
        reset_at_each_iter=True,
        split_trajs=True,
        seed=5,
        device="cpu",
        policy_device="cpu",
        env_device="cpu",
        storing_device="cpu",
        weight_sync_timeout_s=7.5,
        apply_weights="between_steps",
        device_policy=CpuPolicy(),
        exploration_type="mode",
        info_keys=("twice",),
        set_truncated=True,
        check_resources=False,
        supervision=changed_supervision(),
        inference_runner=CompileRunner(backend="eager"),
        metrics=False,
        snapshot_every_s=0.5,
        recovery="replay",
        checkpoints_kept=5,
    )
    untouched = unchanged_settings(config, CollectorConfig(frames_per_batch=1), skip=ACTOR_DERIVED)
    assert not untouched, f"give these settings a value of their own, so the test sees them travel: {untouched}"
    engine = RayEngine(num_actors=1, num_cpus_per_actor=0.5, runtime_env=runtime_env)
    with Collector(InfoCountingEnv, config=config, engine=engine) as collector:
        assert collector.next_batch()["next", "twice"].any()
        trainer = collector.config
        actor = ray.get(collector._engine.actors[0].config.remote())  # type: ignore[attr-defined]
        expected = actor_config(trainer, 0, 1)
    for f in dataclasses.fields(CollectorConfig):
        if f.name not in ACTOR_DERIVED:
            assert same_setting(getattr(trainer, f.name), getattr(actor, f.name)), f.name
        elif f.name not in ("weight_sync", "engine"):  # names in the trainer, resolved in the actor
            assert same_setting(getattr(expected, f.name), getattr(actor, f.name)), f.name
    assert actor.weight_sync.name == "shared_memory" and actor.engine.name == "workers"
    assert actor.supervision == changed_supervision()


def test_actor_options_are_one_mapping_for_all_or_one_per_actor() -> None:
    assert RayEngine(num_actors=2, actor_options={"resources": {"a": 1}}).actor_options == [{"resources": {"a": 1}}] * 2
    per_actor = [{"resources": {"a": 1}}, {"resources": {"b": 1}}]
    assert RayEngine(num_actors=2, actor_options=per_actor).actor_options == per_actor
    with pytest.raises(ConfigError, match="1 mappings for num_actors=2"):
        RayEngine(num_actors=2, actor_options=[{}])
    with pytest.raises(ConfigError, match="expected a mapping or a list of mappings"):
        RayEngine(num_actors=2, actor_options="SPREAD")  # type: ignore[arg-type]


def test_an_actor_is_placeable_after_a_node_loss_only_where_a_node_has_what_it_asks_for() -> None:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from pycollect_ray.engine import _placeable

    head = {"CPU": 2.0, "memory": 1e9, "node_head": 1.0}
    assert _placeable({"num_cpus": 0.5, "num_gpus": 0.0}, [head], {"h"})
    assert not _placeable({"num_cpus": 4.0}, [head], {"h"})  # too big for what is left
    assert not _placeable({"num_cpus": 0.5, "num_gpus": 1.0}, [head], {"h"})
    assert not _placeable({"num_cpus": 0.5, "resources": {"node_worker": 0.01}}, [head], {"h"})  # pinned
    assert _placeable({"num_cpus": 0.5, "resources": {"node_head": 0.01}}, [head], {"h"})
    gone = "ab" * 28  # a node id (hex) that is not alive
    assert not _placeable({"scheduling_strategy": NodeAffinitySchedulingStrategy(gone, soft=False)}, [head], {"h"})
    assert _placeable({"scheduling_strategy": NodeAffinitySchedulingStrategy(gone, soft=True)}, [head], {"h"})
    assert not _placeable({"num_cpus": 0.5}, [], set())  # no node left at all


@pytest.mark.timeout(240)
def test_env_calls_reach_every_actors_envs_in_the_order_of_a_batchs_rows(ray_cluster: None) -> None:
    engine = RayEngine(num_actors=2, num_cpus_per_actor=0.5)
    settings = {"frames_per_batch": 64, "total_frames": -1, "num_workers": 1, "envs_per_worker": 2, "seed": 7}
    with Collector(ENV, engine=engine, **settings) as collector:
        collector.next_batch()
        assert collector.env_get_attr("force_mag") == [10.0] * 4
        collector.env_set_attr("force_mag", [1.0, 2.0, 3.0, 4.0])
        assert collector.env_get_attr("force_mag", indices=[3, 0]) == [4.0, 1.0]
        collector.env_set_attr("force_mag", 5.0, indices=[1])
        assert collector.env_call("force_mag") == [1.0, 5.0, 3.0, 4.0]
        collector.env_set_attr("force_mag", 6.0)  # one value for every env of every actor
        assert collector.env_get_attr("force_mag") == [6.0] * 4
        collector.env_set_attr("force_mag", [1.0, 5.0, 3.0, 4.0])
        pids = collector.env_apply(lambda env: os.getpid())
        workers = [actor.worker_pids for actor in collector.stats().actors]
        assert [pids[:2], pids[2:]] == [[workers[0][0]] * 2, [workers[1][0]] * 2]  # actor a: rows 2a, 2a+1
        with pytest.raises(AttributeError, match="no_such_attribute"):
            collector.env_get_attr("no_such_attribute")
        with pytest.raises(ConfigError, match="4"):
            collector.env_get_attr("force_mag", indices=[4])
        collector.next_batch()
        assert collector.env_get_attr("force_mag") == [1.0, 5.0, 3.0, 4.0]
