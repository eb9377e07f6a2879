"""The ray engine keeps its users' place: env-state snapshots, resume, replay inside actors, restarted actors.

Run in a loopback-only network namespace (see conftest)::

    unshare --net bash -c 'ip link set lo up && python -m pytest plugins/pycollect-ray/tests/test_ray_faults.py -q'
"""

from __future__ import annotations

import hashlib
import os
import signal
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from ray_helpers import ActsItsWeight, LeansWithThePole, acts_with, alive

from pycollect import Collector, ConfigError, EnvStateError, PyCollectWarning
from pycollect.testing import wait_until
from pycollect.testing.envs import RaisingEnv, UnsaveableEnv
from pycollect_ray import RayEngine
from pycollect_ray.engine import _LOCAL_ENV_STATE_KEYS

ENV = "CartPole-v1"
SETTINGS: dict[str, Any] = {"frames_per_batch": 64, "envs_per_worker": 2, "seed": 7}  # 2 actors: [4, 16] batches


def digest(batch: Any) -> dict[str, str]:
    """SHA-256 of every key of a batch (as tests/test_faults.py compares batches)."""
    return {
        "/".join(key if isinstance(key, tuple) else (key,)): hashlib.sha256(
            value.contiguous().numpy().tobytes()
        ).hexdigest()
        for key, value in batch.items(include_nested=True, leaves_only=True)
    }


def _run(collector: Collector, batches: int) -> list[dict[str, str]]:
    return [digest(collector.next_batch()) for _ in range(batches)]


@contextmanager
def _ray(
    env: Any, policy: Any, runtime_env: dict[str, Any], *, max_restarts: int = 3, **settings: Any
) -> Iterator[Collector]:
    """A collector on 2 actors; at exit it is shut down and none of its actors or workers is left."""
    engine = RayEngine(num_actors=2, num_cpus_per_actor=0.5, max_restarts=max_restarts, runtime_env=runtime_env)
    collector = Collector(env, policy, engine=engine, **settings)
    try:
        yield collector
    finally:
        actors = collector.stats().actors
        pids = [actor.pid for actor in actors] + [pid for actor in actors for pid in actor.worker_pids]
        collector.shutdown()
        wait_until(lambda: not any(map(alive, pids)), timeout_s=60, what="the actors and their workers to exit")


def test_the_env_state_entries_kept_apart_are_the_core_collectors() -> None:
    from pycollect.collector import _ENV_STATE_KEYS

    assert set(_LOCAL_ENV_STATE_KEYS) == set(_ENV_STATE_KEYS)


@pytest.mark.timeout(400)
@pytest.mark.parametrize("workers", [1, 0], ids=["workers", "inprocess"])
def test_a_resumed_ray_run_makes_the_batches_of_the_uninterrupted_one(
    ray_cluster: None, runtime_env: dict[str, Any], workers: int
) -> None:
    settings = {**SETTINGS, "num_workers": workers, "snapshots": True}
    with _ray(ENV, LeansWithThePole(), runtime_env, **settings) as whole:
        expected = _run(whole, 12)
    with _ray(ENV, LeansWithThePole(), runtime_env, **settings) as first:
        assert _run(first, 4) == expected[:4]
        state = first.state_dict(env_states=True)
    assert len(state["ray_actors"]) == len(state["worker_states"]) == 2
    local_entry = "worker_states" if workers else "env_snapshot"
    assert all(list(envs) == [local_entry] for envs in state["worker_states"])
    assert not any(key in own for own in state["ray_actors"] for key in _LOCAL_ENV_STATE_KEYS)
    with _ray(ENV, LeansWithThePole(), runtime_env, resume=state, **settings) as resumed:
        assert resumed.frames == 4 * 64
        assert _run(resumed, 8) == expected[4:]


@pytest.mark.timeout(400)
def test_a_resumed_async_run_continues_each_actors_rollouts_exactly(
    ray_cluster: None, runtime_env: dict[str, Any]
) -> None:
    """Async: which actor delivers next is timing, but each actor's own rollouts go on as without the stop."""
    settings = {**SETTINGS, "frames_per_batch": 32, "num_workers": 1, "snapshots": True, "sync": False}

    def into(per_actor: dict[int, list[dict[str, str]]], collector: Collector) -> None:
        batch = collector.next_batch()
        per_actor[int(batch["collector", "traj_ids"][0, 0]) % 2].append(digest(batch))

    first: dict[int, list[dict[str, str]]] = {0: [], 1: []}
    with _ray(ENV, LeansWithThePole(), runtime_env, **settings) as collector:
        for _ in range(5):
            into(first, collector)
        state = collector.state_dict(env_states=True)
    with _ray(ENV, LeansWithThePole(), runtime_env, resume=state, **settings) as collector:
        for _ in range(7):
            into(first, collector)
    whole: dict[int, list[dict[str, str]]] = {0: [], 1: []}
    with _ray(ENV, LeansWithThePole(), runtime_env, **settings) as collector:

        def enough() -> bool:
            into(whole, collector)
            return all(len(whole[a]) >= len(first[a]) for a in (0, 1))

        wait_until(enough, timeout_s=180, what="as many rollouts of each actor as the stopped and resumed runs")
    for actor in (0, 1):
        assert first[actor] == whole[actor][: len(first[actor])], actor


@pytest.mark.timeout(400)
def test_a_worker_killed_in_an_actor_is_replayed_every_batch_identical(
    ray_cluster: None, runtime_env: dict[str, Any]
) -> None:
    settings = {**SETTINGS, "num_workers": 1}
    with _ray(ENV, None, runtime_env, **settings) as calm:
        expected = _run(calm, 16)
    replay = {"recovery": "replay", "max_restarts": 20, "restart_window_s": 600}
    with _ray(ENV, None, runtime_env, **settings, **replay) as killed:
        got = []
        for b in range(16):
            got.append(digest(killed.next_batch()))
            if b % 4 == 1:  # worker of actor 0, then of actor 1, then 0 and 1 again
                os.kill(killed.stats().actors[(b // 4) % 2].worker_pids[0], signal.SIGKILL)
        actors = killed.stats().actors
        assert sum(actor.worker_restarts for actor in actors) >= 3  # as of each one's last rollout
        assert all(actor.metrics is not None for actor in actors)
        assert not any(worker.restarts_cut for actor in actors for worker in actor.metrics.workers)
        assert sum(worker.restarts_replayed for actor in actors for worker in actor.metrics.workers) >= 3
    assert got == expected


@pytest.mark.timeout(400)
def test_an_env_raising_once_in_an_actor_is_replayed(ray_cluster: None, runtime_env: dict[str, Any]) -> None:
    settings: dict[str, Any] = {"frames_per_batch": 40, "num_workers": 1, "envs_per_worker": 1, "seed": 3}
    with _ray(RaisingEnv, None, runtime_env, env_kwargs={"fail_at": 50, "only_generation": 99}, **settings) as calm:
        expected = _run(calm, 8)
    crashing_kwargs = {"fail_at": 50, "only_generation": 1}
    with _ray(
        RaisingEnv, None, runtime_env, env_kwargs=crashing_kwargs, recovery="replay", max_restarts=4, **settings
    ) as crashing:
        got = _run(crashing, 8)
        for actor in crashing.stats().actors:  # each one's worker crashed at step 49, in its third rollout
            assert actor.worker_restarts == 1 and actor.metrics is not None
            assert [(w.restarts_replayed, w.restarts_cut) for w in actor.metrics.workers] == [(1, 0)]
    assert got == expected


@pytest.mark.timeout(400)
def test_a_killed_actor_resumes_from_its_last_delivered_rollout_every_batch_identical(
    ray_cluster: None, runtime_env: dict[str, Any]
) -> None:
    settings = {**SETTINGS, "num_workers": 1, "snapshots": True}
    with _ray(ENV, LeansWithThePole(), runtime_env, **settings) as calm:
        expected = _run(calm, 8)
    with _ray(ENV, LeansWithThePole(), runtime_env, **settings) as killed:
        got = _run(killed, 3)
        os.kill(killed.stats().actors[0].pid, signal.SIGKILL)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", PyCollectWarning)
            got += _run(killed, 5)
        assert any("resumed from the state of its last delivered rollout" in str(w.message) for w in caught)
        actor = killed.stats().actors[0]
        assert (actor.restarts, actor.resumed, actor.state) == (1, 1, "alive")
    assert got == expected


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"snapshots": True}, "snapshots=True"),
        ({"recovery": "replay"}, "recovery='replay'"),
        ({"checkpoint_dir": "unused"}, "checkpoint_dir"),
    ],
    ids=["snapshots", "replay", "checkpoints"],
)
def test_an_env_that_cannot_be_saved_is_refused_before_ray_or_any_actor_starts(
    monkeypatch: pytest.MonkeyPatch, settings: dict[str, Any], named: str
) -> None:
    import ray

    def no_ray(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("Ray or an actor was started before the refusal")

    monkeypatch.setattr(ray, "init", no_ray)
    monkeypatch.setattr(ray, "remote", no_ray)
    with pytest.raises(EnvStateError, match=rf"{named}.*engine='ray'.*UnsaveableEnv"):
        Collector(UnsaveableEnv, frames_per_batch=8, num_workers=1, engine=RayEngine(num_actors=1), **settings)


def test_replay_without_workers_in_the_actors_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"recovery='replay'.*num_workers >= 1"):
        Collector(ENV, frames_per_batch=8, recovery="replay", engine="ray")


@pytest.mark.timeout(240)
def test_env_states_are_refused_without_snapshots_and_a_state_of_other_actors_too(ray_cluster: None) -> None:
    engine = RayEngine(num_actors=3, num_cpus_per_actor=0.5)
    with Collector(ENV, frames_per_batch=48, num_workers=1, seed=1, engine=engine) as collector:
        collector.next_batch()
        with pytest.raises(ConfigError, match=r"env_states=True.*snapshots=True"):
            collector.state_dict(env_states=True)
        state = collector.state_dict()
        assert "worker_states" not in state and len(state["ray_actors"]) == 3
        state["ray_actors"] = state["ray_actors"][:2]  # as a 2-actor run of the same batch size saves
        with pytest.raises(ConfigError, match=r"states of 2 ray actors, this collector has 3"):
            collector.load_state_dict(state)


@pytest.mark.timeout(300)
def test_a_resumed_restart_gets_the_latest_weights(ray_cluster: None, runtime_env: dict[str, Any]) -> None:
    """The restored state brings back the actor's weights version, not its weights: they are sent again."""
    net = ActsItsWeight()
    with _ray(ENV, net, runtime_env, frames_per_batch=32, num_workers=1, snapshots=True) as collector:
        collector.next_batch()

        with torch.no_grad():
            net.value.fill_(1)
        collector.update_policy_weights_()
        wait_until(lambda: acts_with(collector, 1), timeout_s=120, what="every actor on version 1")
        os.kill(collector.stats().actors[1].pid, signal.SIGKILL)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PyCollectWarning)

            def resumed_on_version_1() -> bool:
                assert acts_with(collector, 1)  # not one rollout of the restarted actor with its constructor's weights
                return collector.stats().actors[1].resumed == 1

            wait_until(resumed_on_version_1, timeout_s=120, what="actor 1 to resume after its restart")
            assert acts_with(collector, 1) and acts_with(collector, 1)


@pytest.mark.timeout(400)
def test_an_env_call_waiting_on_a_killed_actor_is_answered_by_its_restart(
    ray_cluster: None, runtime_env: dict[str, Any]
) -> None:
    with _ray(ENV, None, runtime_env, frames_per_batch=32, num_workers=1) as collector:
        collector.next_batch()
        victim = collector.stats().actors[1].pid
        before = collector.env_apply(lambda env: os.getpid())
        os.kill(victim, signal.SIGKILL)
        with pytest.warns(PyCollectWarning, match="ray actor 1 died"):
            after = collector.env_apply(lambda env: os.getpid())  # asked again, of the restarted actor
        assert collector.stats().actors[1].restarts == 1  # counted when it answered again
        assert after[: len(after) // 2] == before[: len(before) // 2]
        assert not set(after[len(after) // 2 :]) & set(before[len(before) // 2 :])
        collector.next_batch()
