"""``make_vec`` with worker processes: several workers step for step equal to SyncVectorEnv, and
what only processes do: crashes, hangs, restarts, kills, shutdown, nothing left behind.

The comparisons of every mode and space with one worker are in test_vector_semantics.py (its
``backend`` fixture); here the envs are split over two workers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from typing import Any

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode
from test_vector_semantics import MODES, _pair, _run
from trainer_process import alive, start_trainer, wait_gone

import pycollect
from pycollect import ActionError, ConfigError, VectorEnvClosedError, WorkerCrashedError
from pycollect._workers import contract
from pycollect.testing import wait_until
from pycollect.testing.envs import CountingEnv, HangingEnv, RaisingEnv
from pycollect.testing.leaks import child_processes
from pycollect.vector import default_num_workers, make_vec

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("mode", MODES, ids=lambda mode: mode.name)
def test_two_workers_step_for_step_equal_to_sync_vector_env(mode: AutoresetMode) -> None:
    ours, theirs = _pair("dict", "dict", mode, {"num_workers": 2, "restart": "never"})
    try:
        assert [w.worker for w in ours.workers] == [0, 1]
        seen = _run(ours, theirs, steps=40, seed=7)
    finally:
        ours.close()
        theirs.close()
    assert seen["ended"] >= 20, seen


class CrashingEnv(CountingEnv):
    """Exits its worker process (no exception, no cleanup) at step ``crash_at`` of its first episode.

    Only in worker ``worker`` and in the worker's first generation, so a restarted worker runs on.
    """

    def __init__(self, crash_at: int = 3, worker: int = 1) -> None:
        super().__init__(length=100)
        here = int(os.environ.get(contract.ENV_WORKER, "-1")), int(os.environ.get(contract.ENV_GENERATION, "0"))
        self.armed = here == (worker, 1)
        self.crash_at = crash_at

    def step(self, action: int) -> Any:
        if self.armed and self._t + 1 == self.crash_at:
            os._exit(3)
        return super().step(action)


def _steps(env: Any, count: int) -> list[Any]:
    return [env.step(np.zeros(env.num_envs, np.int64)) for _ in range(count)]


def test_a_crash_with_restart_never_raises_what_the_env_raised_with_its_traceback() -> None:
    env = make_vec(RaisingEnv, 4, num_workers=2, env_kwargs={"fail_at": 3}, restart="never")
    try:
        env.reset(seed=0)
        _steps(env, 2)
        with pytest.raises(WorkerCrashedError, match="restart policy 'never' gave up") as raised:
            env.step(np.zeros(4, np.int64))
        assert "ZeroDivisionError: boom at step 3" in str(raised.value.error)
        assert "Traceback" in str(raised.value.error) and "in step" in str(raised.value.error)
        with pytest.raises(WorkerCrashedError):  # and every later call too
            env.step(np.zeros(4, np.int64))
    finally:
        env.close()


def test_a_restarted_worker_cuts_its_envs_episodes_then_resets_them_next_step() -> None:
    env = make_vec(CrashingEnv, 4, num_workers=2)  # restart="permanent", the default
    try:
        obs, _ = env.reset(seed=0)
        *_, (obs, *_) = _steps(env, 2)
        last = obs.copy()
        obs, reward, terminated, truncated, infos = env.step(np.zeros(4, np.int64))  # worker 1 dies in it
        assert truncated.tolist() == [False, False, True, True] and not terminated.any()
        assert reward[2:].tolist() == [0.0, 0.0] and reward[:2].tolist() == [3.0, 3.0]
        assert infos["worker_restarted"].tolist()[2:] == [True, True]
        assert infos["_worker_restarted"].tolist() == [False, False, True, True]
        np.testing.assert_array_equal(obs[2:], last[2:])  # the last observation they returned
        assert obs[:2, 1].tolist() == [3.0, 3.0]  # worker 0 stepped on
        # NEXT_STEP: the step after the cut resets worker 1's envs (action ignored, reward 0).
        obs, reward, terminated, truncated, _ = env.step(np.zeros(4, np.int64))
        assert obs[2:, 1].tolist() == [0.0, 0.0] and reward[2:].tolist() == [0.0, 0.0]
        assert not (terminated | truncated).any()
        obs, reward, *_ = env.step(np.zeros(4, np.int64))
        assert obs[:, 1].tolist() == [5.0, 5.0, 1.0, 1.0] and reward.tolist() == [5.0, 5.0, 1.0, 1.0]
        assert [w.generation for w in env.workers] == [1, 2]
    finally:
        env.close()


def test_same_step_mode_reports_the_last_observation_as_the_final_one() -> None:
    env = make_vec(CrashingEnv, 4, num_workers=2, autoreset_mode="same_step")
    try:
        env.reset(seed=0)
        *_, (last, *_) = _steps(env, 2)
        obs, reward, _, truncated, infos = env.step(np.zeros(4, np.int64))
        assert truncated.tolist() == [False, False, True, True] and reward[2:].tolist() == [0.0, 0.0]
        assert infos["_final_obs"].tolist() == [False, False, True, True]
        for i in (2, 3):
            np.testing.assert_array_equal(infos["final_obs"][i], last[i])
        assert infos["final_info"]["_worker_restarted"].tolist() == [False, False, True, True]
        assert obs[2:, 1].tolist() == [0.0, 0.0]  # already the new episode's first observation
        obs, *_ = env.step(np.zeros(4, np.int64))
        assert obs[:, 1].tolist() == [4.0, 4.0, 1.0, 1.0]
    finally:
        env.close()


def test_disabled_mode_wants_the_cut_envs_reset_before_they_step_again() -> None:
    env = make_vec(CrashingEnv, 4, num_workers=2, autoreset_mode="disabled")
    try:
        env.reset(seed=0)
        _steps(env, 2)
        _, _, _, truncated, _ = env.step(np.zeros(4, np.int64))
        assert truncated.tolist() == [False, False, True, True]
        with pytest.raises(ActionError, match="envs 2, 3 ended"):
            env.step(np.zeros(4, np.int64))
        obs, _ = env.reset(options={"reset_mask": np.array([False, False, True, True])})
        assert obs[2:, 1].tolist() == [0.0, 0.0]
        obs, *_ = env.step(np.zeros(4, np.int64))
        assert obs[:, 1].tolist() == [4.0, 4.0, 1.0, 1.0]
    finally:
        env.close()


def test_a_worker_killed_while_idle_is_noticed_at_the_next_step() -> None:
    env = make_vec(CountingEnv, 4, num_workers=2, env_kwargs={"length": 100})
    try:
        env.reset(seed=0)
        _steps(env, 1)
        os.kill(env.workers[0].pid, signal.SIGKILL)
        _, reward, _, truncated, infos = env.step(np.zeros(4, np.int64))
        assert truncated.tolist() == [True, True, False, False] and reward[:2].tolist() == [0.0, 0.0]
        assert infos["_worker_restarted"].tolist() == [True, True, False, False]
        obs, *_ = env.step(np.zeros(4, np.int64))
        assert obs[:, 1].tolist() == [0.0, 0.0, 3.0, 3.0]
    finally:
        env.close()


def test_a_hung_env_is_caught_by_its_heartbeat() -> None:
    env = make_vec(HangingEnv, 2, num_workers=1, env_kwargs={"hang_at": 2}, heartbeat_timeout_s=1.0, restart="never")
    try:
        env.reset(seed=0)
        _steps(env, 1)
        with pytest.raises(WorkerCrashedError, match="stopped beating its heartbeat"):
            env.step(np.zeros(2, np.int64))
    finally:
        env.close()


def test_a_close_from_another_thread_ends_a_step_waiting_on_a_hung_worker() -> None:
    env = make_vec(HangingEnv, 2, num_workers=1, env_kwargs={"hang_at": 7})  # the probe's 4 steps pass
    env.reset(seed=0)
    _steps(env, 6)
    env.step_async(np.zeros(2, np.int64))  # step 7: the worker never answers
    raised: list[BaseException] = []

    def collect() -> None:
        try:
            env.step_wait()
        except BaseException as exc:  # what the waiting thread got, for the assertion below
            raised.append(exc)

    waiter = threading.Thread(target=collect)
    waiter.start()
    wait_until(lambda: not env._stepping, timeout_s=10, what="step_wait() to start waiting")
    env.close()  # the waiter holds the requests it waits on: it sees the shutdown, not a missing attribute
    waiter.join(timeout=60)
    assert not waiter.is_alive()
    assert len(raised) == 1 and isinstance(raised[0], VectorEnvClosedError), raised


def test_errors_of_call_get_attr_set_attr_come_back_as_the_envs_own() -> None:
    env = make_vec(CountingEnv, 4, num_workers=2)
    try:
        with pytest.raises(AttributeError, match="no_such_thing"):
            env.get_attr("no_such_thing")
        with pytest.raises(TypeError):
            env.call("reset", "not a keyword")  # reset takes keywords only
        env.set_attr("length", [1, 2, 3, 4])
        assert env.get_attr("length") == (1, 2, 3, 4)  # the workers still serve after an error
    finally:
        env.close()


def test_a_vector_env_that_fails_to_build_after_its_workers_started_stops_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("an action checker that cannot be built")

    monkeypatch.setattr("pycollect.vector.env.ActionChecker", broken)
    before = child_processes()
    with pytest.raises(RuntimeError, match="cannot be built") as raised:
        make_vec(CountingEnv, 4, num_workers=2)
    # The error's traceback keeps make_vec's frame, and so its backend, alive: the workers must be stopped already.
    assert child_processes() - before == set(), raised.traceback


def test_close_stops_every_worker_and_a_closed_env_refuses_to_step() -> None:
    env = make_vec(CountingEnv, 4, num_workers=2)
    env.reset(seed=0)
    pids = [w.pid for w in env.workers]
    env.close()
    assert not alive(pids)
    env.close()  # again: nothing happens
    with pytest.raises(VectorEnvClosedError, match="closed"):
        env.step(np.zeros(4, np.int64))


def test_num_envs_that_do_not_split_over_the_workers_are_refused_before_any_starts() -> None:
    before = child_processes()
    with pytest.raises(ConfigError, match=r"num_envs=5 does not split over num_workers=2: .*\(4 or 6\)"):
        make_vec(CountingEnv, 5, num_workers=2)
    with pytest.raises(ConfigError, match=r"num_workers=3 is more than num_envs=2"):
        make_vec(CountingEnv, 2, num_workers=3)
    with pytest.raises(ConfigError, match=r"'restrat' is not a setting \(did you mean 'restart'\?\)"):
        make_vec(CountingEnv, 2, num_workers=1, restrat="never")
    assert child_processes() - before <= {p for p in child_processes() if p not in before and _is_fork_server(p)}


def _is_fork_server(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"--fork-server" in f.read()
    except OSError:
        return False


def test_default_num_workers_split_the_envs_evenly_up_to_the_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert [default_num_workers(n) for n in (1, 2, 3, 4, 6, 7, 8, 9, 16)] == [1, 2, 3, 4, 3, 1, 4, 3, 4]


VECTOR_TRAINER = """
import numpy as np, pycollect
from pycollect.testing.envs import CountingEnv
env = pycollect.make_vec(CountingEnv, 4, num_workers=2)
try:
    env.reset(seed=0)
    print(" ".join(str(w.pid) for w in env.workers), flush=True)
    while True:
        env.step(np.zeros(4, np.int64))
except KeyboardInterrupt:
    env.close()
    print("clean", flush=True)
"""


def test_a_sigkilled_trainer_leaves_no_worker() -> None:
    trainer, workers = start_trainer(VECTOR_TRAINER)
    trainer.send_signal(signal.SIGKILL)
    trainer.wait(timeout=10)
    wait_gone(workers, timeout_s=60)


SIGTERM_VECTOR_TRAINER = """
import numpy as np, pycollect
from pycollect.testing.envs import OrphanChildEnv
from pycollect.testing.leaks import child_processes
env = pycollect.make_vec(OrphanChildEnv, 4, num_workers=2)
env.reset(seed=0)
env.step(np.zeros(4, np.int64))
print(" ".join(map(str, sorted(child_processes()))), flush=True)
while True:
    env.step(np.zeros(4, np.int64))
"""


def test_sigterm_to_the_trainer_closes_the_vector_env_in_order() -> None:
    """SIGTERM (docker stop, SLURM) closes the workers' envs, as it does a Collector's: the
    children each env started are gone too, and the trainer exits 128 + SIGTERM."""
    trainer = subprocess.Popen([sys.executable, "-c", SIGTERM_VECTOR_TRAINER], stdout=subprocess.PIPE, text=True)
    assert trainer.stdout is not None
    tree = [int(pid) for pid in trainer.stdout.readline().split()]
    assert len(tree) >= 6, tree  # 2 workers, 4 env children
    trainer.send_signal(signal.SIGTERM)
    trainer.communicate(timeout=60)
    assert trainer.returncode == 128 + signal.SIGTERM
    wait_gone(tree, timeout_s=60)


def test_ctrl_c_in_the_trainer_closes_the_vector_env_cleanly() -> None:
    trainer, workers = start_trainer(VECTOR_TRAINER)
    trainer.send_signal(signal.SIGINT)
    out, err = trainer.communicate(timeout=60)
    assert "clean" in out, err
    assert trainer.returncode == 0
    assert not alive(workers)


def test_make_vec_is_a_gymnasium_vector_env_for_wrappers() -> None:
    import gymnasium as gym

    env = gym.wrappers.vector.RecordEpisodeStatistics(pycollect.make_vec(CountingEnv, 2, env_kwargs={"length": 3}))
    try:
        env.reset(seed=0)
        episodes = 0
        for _ in range(8):
            *_, infos = env.step(np.zeros(2, np.int64))
            if "episode" in infos:
                episodes += int(infos["_episode"].sum())
                assert infos["episode"]["l"][infos["_episode"]].tolist() == [3] * int(infos["_episode"].sum())
        assert episodes == 4  # episodes of 3 steps, and NEXT_STEP's reset steps in between
    finally:
        env.close()
