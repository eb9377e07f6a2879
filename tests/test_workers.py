"""Worker processes: batch format in sync and async mode, determinism, weights, and the
failure behaviour (killed workers, crashing and hanging envs, a killed or interrupted trainer)."""

from __future__ import annotations

import os
import signal
import time

import pytest
import torch
from torch import nn
from trainer_process import alive, start_trainer, wait_gone

import pycollect
from pycollect import Collector, ConfigError, PolicyError, WorkerCrashedError
from pycollect.testing import leftovers, snapshot, wait_until
from pycollect.testing.envs import ChildProcessEnv, CountingEnv, HangingEnv, RaisingEnv

pytestmark = pytest.mark.timeout(180)


def _check_consistent(batch) -> None:
    """Within each env row: next observation of step t is the observation of step t+1 unless
    the episode ended, and trajectory ids only change after a done."""
    obs, next_obs = batch["observation"], batch["next", "observation"]
    done = batch["next", "done"][..., 0]
    ids = batch["collector", "traj_ids"]
    same = ~done[:, :-1]
    assert torch.equal(next_obs[:, :-1][same], obs[:, 1:][same])
    assert torch.equal(ids[:, 1:][same], ids[:, :-1][same])
    assert (ids[:, 1:][done[:, :-1]] != ids[:, :-1][done[:, :-1]]).all()


def test_sync_batches_hold_one_rollout_of_every_worker_in_order() -> None:
    with Collector(CountingEnv, frames_per_batch=60, envs_per_worker=3, num_workers=2, seed=0, total_frames=240) as c:
        batches = list(c)
        stats = c.stats()
    assert len(batches) == 4 and c.frames == 240
    for batch in batches:
        assert batch.batch_size == torch.Size([6, 10]) and batch.names == [None, "time"]
        ids = batch["collector", "traj_ids"]
        assert (ids[:3] % 2 == 0).all() and (ids[3:] % 2 == 1).all()  # worker 0 rows, then worker 1
        _check_consistent(batch)
    steps = torch.cat([b["observation"][:, :, 1] for b in batches], dim=1)
    assert steps[0].tolist()[:12] == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1]  # continues across batches
    assert stats.restarts == 0 and [w.state for w in stats.workers] == ["running", "running"]


def test_one_worker_reproduces_the_in_process_collector() -> None:
    kwargs = {"frames_per_batch": 64, "envs_per_worker": 4, "seed": 5}
    with Collector("CartPole-v1", **kwargs) as here, Collector("CartPole-v1", num_workers=1, **kwargs) as there:
        for _ in range(3):
            a, b = here.next_batch(), there.next_batch()
            assert (a == b).all()


def test_same_seed_same_batches_in_sync_mode() -> None:
    def run():
        with Collector("CartPole-v1", frames_per_batch=64, envs_per_worker=4, num_workers=2, seed=3) as c:
            return [c.next_batch() for _ in range(3)]

    for a, b in zip(run(), run(), strict=True):
        assert (a == b).all()


def test_async_batches_come_from_any_worker() -> None:
    batches, workers = [], set()
    with Collector(CountingEnv, frames_per_batch=20, envs_per_worker=2, num_workers=2, sync=False, seed=0) as c:
        deadline = time.monotonic() + 60  # the first worker up may deliver alone for a while
        while workers != {0, 1} and time.monotonic() < deadline:
            batches.append(c.next_batch())
            workers.add(int(batches[-1]["collector", "traj_ids"][0, 0]) % 2)
    assert workers == {0, 1}
    assert all(b.batch_size == torch.Size([2, 10]) for b in batches)
    for b in batches:
        _check_consistent(b)


def test_zero_copy_batches_are_views_of_shared_memory() -> None:
    with Collector(CountingEnv, frames_per_batch=8, envs_per_worker=2, num_workers=2, zero_copy=True) as c:
        batch = c.next_batch()
        segment = c._engine.segment
        pointer = batch["observation"].data_ptr()
        assert segment.address <= pointer < segment.address + segment.total_len
        kept = batch.clone()
        c.next_batch()
        assert kept.batch_size == torch.Size([4, 2])


def test_policy_weights_reach_the_workers() -> None:
    class Threshold(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bias = nn.Parameter(torch.tensor(-1.0))

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return (obs[:, 0] * 0 + self.bias > 0).long()  # 0 while bias < 0, 1 after

    policy = Threshold()
    with Collector("CartPole-v1", policy, frames_per_batch=32, envs_per_worker=4, num_workers=2, seed=0) as c:
        assert (c.next_batch()["action"] == 0).all()
        with torch.no_grad():
            policy.bias.fill_(1.0)
        c.update_policy_weights_()
        # workers run at most one rollout ahead, so the batch after next uses the new weights
        batches = [c.next_batch() for _ in range(3)]
    assert (batches[-1]["action"] == 1).all() and c.policy_version == 1
    # every frame records the version of the weights it was collected with
    assert (batches[-1]["policy_version"] == 1).all()
    for batch in batches:
        version = batch["policy_version"]
        assert ((version == 0) | (version == 1)).all()
        assert torch.equal(batch["action"] == 1, (version == 1).expand_as(batch["action"]))


def _worker_pids(c: Collector) -> list[int]:
    return [w.pid for w in c.stats().workers]


def test_killed_worker_is_restarted_and_collection_continues() -> None:
    with Collector(
        CountingEnv, frames_per_batch=40, envs_per_worker=2, num_workers=2, seed=0, env_kwargs={"length": 1000}
    ) as c:
        c.next_batch()
        # Both slots of worker 1's ring committed: the rollout after the kill is already there.
        wait_until(lambda: c._engine.consumers[1].available() == 2, timeout_s=60, what="worker 1's ring to fill")
        victim = _worker_pids(c)[1]
        os.kill(victim, signal.SIGKILL)
        # The trainer is busy training; the supervisor notices the death meanwhile.
        wait_until(
            lambda: any(e.kind == "exited" and e.worker == 1 for e in c.stats().events),
            timeout_s=60,
            what="the supervisor to report worker 1's exit",
        )
        batches = [c.next_batch() for _ in range(4)]
        stats = c.stats()
    assert stats.restarts == 1
    worker1 = stats.workers[1]
    assert worker1.generation == 2 and worker1.pid != victim
    assert worker1.last_exit is not None and worker1.last_exit.signal == signal.SIGKILL
    assert worker1.last_exit.reason == "signal" and worker1.last_exit.pid == victim
    exited = [e for e in stats.events if e.kind == "exited"]
    assert exited and exited[0].worker == 1 and exited[0].exit == worker1.last_exit
    seen_ids: set[int] = set()
    cut_marked = False
    for batch in batches:
        _check_consistent(batch)
        rows = batch["collector", "traj_ids"][2:]  # worker 1
        # a trajectory of the dead generation never continues in the new one
        new_generation = rows >= (1 << 32)
        cut_marked |= bool(batch["next", "truncated"][2:, -1].all() and not new_generation.any())
        seen_ids |= set(rows.unique().tolist())
    assert any(i >= (1 << 32) for i in seen_ids), "the restarted worker delivered rollouts"
    assert cut_marked, "the last rollout of the killed generation ends truncated"


def test_env_exception_with_no_restart_raises_the_worker_traceback() -> None:
    with (
        Collector(RaisingEnv, frames_per_batch=20, num_workers=1, restart="never") as c,
        pytest.raises(WorkerCrashedError) as info,
    ):
        c.next_batch()
    message = str(info.value)
    assert "ZeroDivisionError: boom at step 7" in message
    assert "Traceback (most recent call last)" in message and "envs.py" in message and "in step" in message
    assert info.value.worker == 0 and "ZeroDivisionError" in (info.value.error or "")


def test_env_exception_with_restarts_is_restarted_and_counted() -> None:
    with Collector(
        RaisingEnv, frames_per_batch=20, num_workers=1, env_kwargs={"only_generation": 1}, max_restarts=2
    ) as c:
        batch = c.next_batch()
        stats = c.stats()
    assert stats.restarts == 1 and stats.workers[0].generation == 2
    assert "ZeroDivisionError: boom at step 7" in (stats.last_error or "")
    assert (batch["collector", "traj_ids"] >= (1 << 32)).all()  # from the restarted generation


def test_env_failing_every_time_exhausts_the_restarts() -> None:
    with Collector(RaisingEnv, frames_per_batch=20, num_workers=1, max_restarts=1) as c:
        with pytest.raises(WorkerCrashedError, match="gave up after 1 restart"):
            c.next_batch()
        with pytest.raises(WorkerCrashedError, match="gave up"):  # and every later batch too
            c.next_batch()


def test_hung_env_is_detected_by_heartbeat_and_restarted() -> None:
    with (
        Collector(
            HangingEnv,
            frames_per_batch=8,
            num_workers=1,
            heartbeat_timeout_s=1.0,
            restart="never",
        ) as c,
        pytest.raises(WorkerCrashedError, match="stopped beating its heartbeat"),
    ):
        c.next_batch()


def test_env_with_its_own_child_process_works() -> None:
    with Collector(ChildProcessEnv, frames_per_batch=16, envs_per_worker=2, num_workers=2, seed=0) as c:
        batch = c.next_batch()
    assert batch["next", "observation"][0, :4, 1].tolist() == [1, 2, 3, 4]


def test_sigkill_of_the_trainer_leaves_no_worker() -> None:
    trainer, workers = start_trainer()
    trainer.send_signal(signal.SIGKILL)
    trainer.wait(timeout=10)
    wait_gone(workers, timeout_s=60)  # how fast is a promise of the timing suite (test_timing.py)
    assert not [n for n in os.listdir("/dev/shm") if n.startswith(f"pycollect-{trainer.pid}-")]


def test_ctrl_c_in_the_trainer_shuts_down_cleanly() -> None:
    trainer, workers = start_trainer()  # its loop is inside the try that catches Ctrl-C
    trainer.send_signal(signal.SIGINT)
    out, err = trainer.communicate(timeout=60)
    assert "clean" in out, err
    assert trainer.returncode == 0
    assert not alive(workers)  # shutdown() reaped them before "clean" was printed


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"num_workers": -1}, ConfigError, "num_workers must be a non-negative integer, got -1"),
        ({"num_workers": 1, "restart": "sometimes"}, ConfigError, "restart='sometimes'"),
        ({"num_workers": 1, "heartbeat_timeout_s": 0}, ConfigError, "heartbeat_timeout_s .* got 0"),
        ({"zero_copy": True}, ConfigError, "zero_copy=True needs num_workers"),
    ],
)
def test_bad_worker_arguments_fail_before_any_worker_starts(kwargs: dict, error: type, match: str) -> None:
    before = snapshot()
    with pytest.raises(error, match=match):
        Collector("CartPole-v1", frames_per_batch=8, **kwargs)
    assert not leftovers(before, timeout_s=0)


def test_unpicklable_policy_is_named() -> None:
    import threading

    lock = threading.Lock()

    def policy(td):
        with lock:
            return torch.zeros(td.batch_size[0], dtype=torch.int64)

    with pytest.raises(PolicyError, match="cannot be pickled for worker processes"):
        Collector("CartPole-v1", policy, frames_per_batch=8, num_workers=1)


def test_frames_per_batch_is_split_across_workers() -> None:
    with pytest.warns(pycollect.PyCollectWarning, match="frames_per_batch=50"):
        c = Collector(CountingEnv, frames_per_batch=50, envs_per_worker=2, num_workers=2)
    with c:
        assert c.frames_per_batch == 52 and c.next_batch().batch_size == torch.Size([4, 13])
    assert c.stats().frames == 52


def test_knobs_work_the_same_with_workers() -> None:
    def zero_policy(td):
        return torch.zeros(td.batch_size[0], dtype=torch.int64)

    with Collector(
        CountingEnv,
        zero_policy,
        frames_per_batch=40,
        envs_per_worker=2,
        num_workers=2,
        init_random_frames=40,
        max_frames_per_traj=3,
        env_kwargs={"length": 100, "n_actions": 3},
        seed=0,
    ) as c:
        first, second = c.next_batch(), c.next_batch()
    assert first["action"].unique().numel() > 1  # warm-up: random actions
    assert (second["action"] == 0).all()  # then the policy
    truncated = first["next", "truncated"][0, :, 0].tolist()
    assert truncated[:6] == [False, False, True, False, False, True]  # max_frames_per_traj=3


def test_reset_at_each_iter_and_split_trajs_with_workers() -> None:
    with Collector(
        CountingEnv,
        frames_per_batch=24,
        envs_per_worker=2,
        num_workers=2,
        reset_at_each_iter=True,
        env_kwargs={"length": 4},
        seed=0,
    ) as c:
        for _ in range(3):
            batch = c.next_batch()
            assert (batch["observation"][:, 0, 1] == 0).all()  # every rollout starts from a reset
    with Collector(
        CountingEnv, frames_per_batch=24, envs_per_worker=2, num_workers=2, split_trajs=True, env_kwargs={"length": 4}
    ) as c:
        batch = c.next_batch()
    assert batch["collector", "mask"].sum() == 24 and batch.batch_size[1] <= 4
