"""The ray engine on a two-node Ray cluster: a head (this namespace) and a worker node (a namespace of its own).

Run them in a session of their own, as root, inside ``unshare --net`` (see conftest)::

    unshare --net bash -c 'ip link set lo up && python -m pytest plugins/pycollect-ray/tests -m two_nodes'
"""

from __future__ import annotations

import os
import signal
import warnings
from typing import Any

import pytest
import torch
from ray_helpers import ActsItsWeight, acts_with

from pycollect import Collector, PyCollectWarning, WorkerCrashedError
from pycollect.testing import wait_until
from pycollect_ray import ActorStats, RayEngine, RayScheme, actor_seed
from pycollect_ray.testing import HEAD_IP, WORKER_IP, TwoNodeCluster

pytestmark = pytest.mark.two_nodes

ENV = "CartPole-v1"
KEYS = ("observation", "action", ("next", "reward"), ("next", "done"), ("next", "observation"))
# Actor 0 on the head, actor 1 on the worker node: each asks for a sliver of its node's resource.
PINNED = [{"resources": {"node_head": 0.01}}, {"resources": {"node_worker": 0.01}}]


def _engine(cluster: TwoNodeCluster, **kwargs: Any) -> RayEngine:
    kwargs.setdefault("actor_options", PINNED)
    kwargs.setdefault("timeout_s", 60)
    return RayEngine(num_actors=2, num_cpus_per_actor=0.5, address=cluster.address, **kwargs)


def _actors(collector: Collector) -> tuple[ActorStats, ...]:
    actors = collector.stats().actors
    assert all(isinstance(actor, ActorStats) for actor in actors)
    return actors


def _on_both_nodes(cluster: TwoNodeCluster, collector: Collector) -> tuple[ActorStats, ActorStats]:
    nodes = cluster.node_ids()
    head, worker = _actors(collector)
    assert (head.node_id, head.node_ip) == (nodes["head"], HEAD_IP)
    assert (worker.node_id, worker.node_ip) == (nodes["worker"], WORKER_IP)
    # The processes really are where Ray says: the worker node's actor and its workers in its namespace.
    assert worker.pid in cluster.worker_pids() and head.pid in cluster.head_pids()
    assert worker.worker_pids and set(worker.worker_pids) <= set(cluster.worker_pids())
    assert head.worker_pids and set(head.worker_pids) <= set(cluster.head_pids())
    return head, worker


@pytest.mark.timeout(300)
def test_sync_batches_come_from_actors_on_both_nodes_in_actor_order_with_their_seeds(cluster: TwoNodeCluster) -> None:
    import ray

    with Collector(ENV, frames_per_batch=64, total_frames=128, num_workers=1, seed=7, engine=_engine(cluster)) as c:
        batches = [batch.clone() for batch in c]
        head, worker = _on_both_nodes(cluster, c)
        assert head.rollouts == worker.rollouts >= 2 and head.state == worker.state == "alive"
    assert ray.is_initialized()  # a cluster the engine connected to stays up (and connected)
    with Collector(ENV, frames_per_batch=64, total_frames=128, num_workers=2, seed=7) as local:
        local_batches = [batch.clone() for batch in local]
    assert [b.batch_size for b in batches] == [b.batch_size for b in local_batches] == [torch.Size([2, 32])] * 2
    assert {k: (v.shape, v.dtype) for k, v in batches[0].items(True, True)} == {
        k: (v.shape, v.dtype) for k, v in local_batches[0].items(True, True)
    }
    ids = batches[0]["collector", "traj_ids"]
    assert set((ids[0] % 2).tolist()) == {0} and set((ids[1] % 2).tolist()) == {1}  # row i: actor i
    for index in range(2):  # actor i (on node i) collects what a local collector with its seed collects
        with Collector(ENV, frames_per_batch=32, total_frames=64, num_workers=1, seed=actor_seed(7, index)) as alone:
            for batch, expected in zip(batches, alone, strict=True):
                for key in KEYS:
                    assert torch.equal(batch[key][index], expected[key][0]), (index, key)


@pytest.mark.timeout(300)
def test_async_batches_are_one_actors_rollout_from_either_node_and_shutdown_leaves_nothing_on_either(
    cluster: TwoNodeCluster,
) -> None:
    engine = _engine(cluster)
    collector = Collector(ENV, frames_per_batch=32, num_workers=1, sync=False, seed=3, engine=engine)
    try:
        seen: set[int] = set()

        def both_nodes_delivered() -> bool:
            batch = collector.next_batch()
            assert batch.batch_size == torch.Size([1, 32]) and batch.names == [None, "time"]
            actors = (batch["collector", "traj_ids"] % 2).unique().tolist()
            assert len(actors) == 1, actors  # a batch never mixes actors
            seen.update(actors)
            return seen == {0, 1}

        wait_until(both_nodes_delivered, timeout_s=120, what="rollouts from the actors on both nodes")
        head, worker = _on_both_nodes(cluster, collector)
    finally:
        collector.shutdown()
    pids = [head.pid, worker.pid, *head.worker_pids, *worker.worker_pids]

    def gone() -> bool:
        return all(_state(pid) in ("gone", "Z") for pid in pids)

    wait_until(gone, timeout_s=60, what="both nodes' actors and workers to exit")
    collector.shutdown()  # idempotent


@pytest.mark.timeout(300)
def test_weights_are_published_once_per_version_and_reach_both_nodes_and_a_restarted_actor(
    cluster: TwoNodeCluster, runtime_env: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    published: list[int] = []
    real_publish = RayScheme.publish

    def counting_publish(self: RayScheme, state: Any) -> Any:
        published.append(1)
        return real_publish(self, state)

    monkeypatch.setattr(RayScheme, "publish", counting_publish)
    net = ActsItsWeight()
    engine = _engine(cluster, max_restarts=2, runtime_env=runtime_env)
    with Collector(ENV, net, frames_per_batch=32, num_workers=1, engine=engine) as collector:
        first = collector.next_batch()
        assert (first["action"] == 0).all() and (first["policy_version"] == 0).all()

        for version in (1, 2):
            with torch.no_grad():
                net.value.fill_(version % 2)
            collector.update_policy_weights_()
            what = f"both nodes' frames to carry version {version}"
            wait_until(lambda v=version: acts_with(collector, v), timeout_s=120, what=what)  # type: ignore[misc]
        assert len(published) == 2  # one object per version, whatever the number of actors and nodes
        head, worker = _on_both_nodes(cluster, collector)
        assert head.policy_version == worker.policy_version == 2

        # SIGKILL the actor on the worker node: Ray restarts it there (its resource is there), and
        # the restarted actor acts with the latest weights before its first rollout.
        os.kill(worker.pid, signal.SIGKILL)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", PyCollectWarning)
            reported = lambda: any("ray actor 1 died" in str(w.message) for w in caught)  # noqa: E731
            wait_until(lambda: collector.next_batch() is not None and reported(), timeout_s=120, what="actor 1's death")
            wait_until(lambda: acts_with(collector, 2), timeout_s=120, what="the restarted actor to act with version 2")
        assert len(published) == 2  # the restart reuses the published object
        _, again = _on_both_nodes(cluster, collector)
        assert again.pid != worker.pid and again.node_id == worker.node_id
        assert again.restarts == 1 and again.state == "alive" and _actors(collector)[0].restarts == 0


@pytest.mark.timeout(300)
def test_a_lost_worker_node_whose_actors_fit_elsewhere_is_survived_with_a_warning_naming_them(
    cluster: TwoNodeCluster,
) -> None:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = cluster.node_ids()
    # Soft affinity: actor 1 starts on the worker node, but Ray may place it elsewhere if that node goes.
    options = [
        {"scheduling_strategy": NodeAffinitySchedulingStrategy(nodes[name], soft=True)} for name in ("head", "worker")
    ]
    engine = _engine(cluster, actor_options=options, max_restarts=1)
    with Collector(ENV, frames_per_batch=64, num_workers=1, seed=1, engine=engine) as collector:
        collector.next_batch()
        _, worker = _on_both_nodes(cluster, collector)
        cluster.kill_worker()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", PyCollectWarning)
            batch = collector.next_batch()  # waits for actor 1 to come back on the head
            batch = collector.next_batch()
        messages = [str(w.message) for w in caught]
        assert any(f"ray node {worker.node_id[:12]} ({WORKER_IP}) was lost with actors [1]" in m for m in messages)
        assert any("ray actor 1 died" in m and f"now on node {nodes['head'][:12]}" in m for m in messages), messages
        assert batch.batch_size == torch.Size([2, 32])  # the documented format, both rows collected on the head
        head, moved = _actors(collector)
        assert moved.node_id == nodes["head"] and moved.restarts == 1 and moved.state == "alive"
        assert moved.pid in cluster.head_pids() and head.restarts == 0


@pytest.mark.timeout(300)
def test_a_lost_worker_node_whose_actor_fits_nowhere_else_raises_naming_it_without_waiting(
    cluster: TwoNodeCluster,
) -> None:
    # timeout_s far beyond the test's own timeout: the error must come from seeing the node gone
    # and the actor unplaceable, not from giving up on waiting.
    engine = _engine(cluster, max_restarts=3, timeout_s=3600)
    collector = Collector(ENV, frames_per_batch=64, num_workers=1, engine=engine)
    try:
        collector.next_batch()
        _on_both_nodes(cluster, collector)
        cluster.kill_worker()
        lost = r"was lost with actors \[1\]; actors \[1\] cannot be placed"
        with pytest.raises(WorkerCrashedError, match=lost) as info, warnings.catch_warnings():
            warnings.simplefilter("ignore", PyCollectWarning)
            wait_until(lambda: collector.next_batch() is None, timeout_s=120, what="the node loss to be seen")
        assert info.value.worker == 1 and WORKER_IP in str(info.value)
        assert [actor.state for actor in _actors(collector)] == ["alive", "dead"]
    finally:
        collector.shutdown()  # nothing left on the head (checked by the fixture), and no wait on actor 1


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"
