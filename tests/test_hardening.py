"""Hardening against what an adversarial user (or environment) does: clean worker exits, sizes
that cannot fit, env output that does not fit its spaces, SIGTERM, inherited descriptors, a
writable spec, long error texts, odd arguments and a fork of the trainer."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

import pycollect
from pycollect import (
    Collector,
    CollectorConfig,
    ConfigError,
    EnvCreationError,
    EnvOutputError,
    PolicyError,
    PyCollectWarning,
    WorkerCrashedError,
    WorkerStoppedError,
)
from pycollect.testing import wait_until
from pycollect.testing.envs import CountingEnv, ExitingEnv

pytestmark = pytest.mark.timeout(180)
TESTS = Path(__file__).parent


# -- 1. a worker that exits with status 0 ------------------------------------------------------


@pytest.mark.parametrize("restart", ["transient", "never"])
def test_a_worker_that_exits_cleanly_and_stays_down_fails_a_sync_collector(restart: str) -> None:
    with Collector(
        ExitingEnv, frames_per_batch=16, num_workers=2, restart=restart, env_kwargs={"exit_at": 20, "only_worker": 1}
    ) as collector:
        delivered = 0
        with pytest.raises(WorkerStoppedError, match=f"worker 1 .*exited with status 0.*'{restart}'") as info:
            for _ in range(10):
                collector.next_batch()
                delivered += 1
    assert delivered == 2  # the rollouts it committed before it exited were delivered
    assert isinstance(info.value, WorkerCrashedError) and info.value.worker == 1


def test_async_collection_goes_on_with_the_workers_left_and_says_so() -> None:
    with (
        Collector(
            ExitingEnv,
            frames_per_batch=8,
            num_workers=2,
            sync=False,
            restart="transient",
            env_kwargs={"exit_at": 20, "only_worker": 1},
        ) as collector,
        pytest.warns(PyCollectWarning, match="worker 1 .*exited with status 0.* 1 of 2 workers"),
    ):
        wait_until(
            lambda: collector.next_batch() is not None and collector.stats().workers[1].state == "stopped",
            timeout_s=60,
            what="worker 1 to stop",
        )
        for _ in range(3):
            collector.next_batch()  # worker 0 goes on


def test_async_collection_fails_once_every_worker_stopped() -> None:
    with (
        Collector(
            ExitingEnv, frames_per_batch=8, num_workers=2, sync=False, restart="never", env_kwargs={"exit_at": 20}
        ) as collector,
        pytest.warns(PyCollectWarning),
        pytest.raises(WorkerStoppedError, match="no worker is left"),
    ):
        for _ in range(50):
            collector.next_batch()


# -- 2. sizes that cannot fit ------------------------------------------------------------------


class ImageEnv(gym.Env):
    """4x84x84 uint8 observations, as Atari with DQN preprocessing."""

    observation_space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    action_space = gym.spaces.Discrete(6)

    def reset(self, *, seed: Any = None, options: Any = None) -> tuple[np.ndarray, dict]:
        return np.zeros((4, 84, 84), np.uint8), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        return np.zeros((4, 84, 84), np.uint8), 0.0, False, False, {}


def test_a_segment_that_cannot_fit_is_refused_before_it_is_allocated() -> None:
    before = pycollect.testing.snapshot()
    with pytest.raises(
        ConfigError, match=r"shared memory .*would take (at least )?[\d.]+ [PT]iB.*, but only .* available"
    ):
        Collector("CartPole-v1", frames_per_batch=10**13, num_workers=1)
    with pytest.raises(ConfigError, match=r"would take [\d.]+ TiB"):
        Collector(ImageEnv, frames_per_batch=10**8, num_workers=2)
    assert not pycollect.testing.leftovers(before, timeout_s=0)


def test_in_process_batches_that_cannot_fit_are_refused_before_the_first_batch() -> None:
    with pytest.raises(ConfigError, match=r"in-process batches would take [\d.]+ TiB, but only .* available"):
        Collector(ImageEnv, frames_per_batch=10**8)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_workers": 10**4}, r"num_workers=10000 .* CPUs"),
        ({"envs_per_worker": 10**6}, r"envs_per_worker=1000000"),
    ],
)
def test_absurd_counts_are_refused(kwargs: dict[str, int], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        Collector("CartPole-v1", frames_per_batch=8, **kwargs)


def test_check_resources_false_lets_those_who_know_better_through(monkeypatch: pytest.MonkeyPatch) -> None:
    CollectorConfig(frames_per_batch=8, num_workers=10**4, check_resources=False)  # no error
    from pycollect._engines import resources

    monkeypatch.setattr(resources, "available_memory", lambda: 1024)
    with pytest.raises(ConfigError, match="would take"):
        Collector("CartPole-v1", frames_per_batch=64)
    with Collector("CartPole-v1", frames_per_batch=64, check_resources=False) as collector:
        assert collector.next_batch().numel() == 64


# -- 3. env output that does not fit the spaces --------------------------------------------------


class BadOutputEnv(gym.Env):
    """Box(4,) float32 observations; from step ``at`` on, returns something else (``what``)."""

    observation_space = gym.spaces.Box(-1e3, 1e3, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, what: str, at: int = 3) -> None:
        self.what, self.at, self.t = what, at, 0

    def reset(self, *, seed: Any = None, options: Any = None) -> tuple[Any, dict]:
        self.t = 0
        return np.zeros(4, np.float32), {}

    def step(self, action: Any) -> tuple[Any, Any, Any, bool, dict]:
        self.t += 1
        obs: Any = np.full(4, 0.5, np.float32)
        reward: Any = 1.0
        terminated: Any = False
        if self.t >= self.at:
            if self.what == "short":
                obs = np.zeros(1, np.float64)
            elif self.what == "none":
                obs = None
            elif self.what == "overflow":
                obs = np.full(4, 1e39, np.float64)
            elif self.what == "reward_none":
                reward = None
            elif self.what == "reward_overflow":
                reward = 1e39
            elif self.what == "flag_array":
                terminated = np.array([True, False])
        return obs, reward, terminated, False, {}


class ByteImageEnv(BadOutputEnv):
    observation_space = gym.spaces.Box(0, 255, (4,), np.uint8)

    def step(self, action: Any) -> tuple[Any, Any, Any, bool, dict]:
        self.t += 1
        return np.full(4, 300.0 if self.t >= self.at else 1.0), 0.0, False, False, {}


@pytest.mark.parametrize(
    ("what", "match"),
    [
        ("short", r"observation 'observation' of shape \(1,\) and dtype float64.* says shape \(4,\) and dtype float32"),
        ("none", r"observation 'observation' None .* says shape \(4,\) and dtype float32"),
        ("overflow", r"observation 'observation' .*1e\+39.* does not fit float32"),
        ("reward_none", r"reward None"),
        ("reward_overflow", r"reward 1e\+39, which does not fit float32"),
        ("flag_array", r"terminated of shape \(2,\) and dtype bool; it must be a bool"),
    ],
)
def test_env_output_that_does_not_fit_is_refused_naming_env_field_and_space(what: str, match: str) -> None:
    with (
        Collector(BadOutputEnv, frames_per_batch=8, env_kwargs={"what": what}) as collector,
        pytest.raises(EnvOutputError, match=match) as info,
    ):
        collector.next_batch()
    assert "callable:BadOutputEnv" in str(info.value) and "step 3" in str(info.value)


def test_floats_into_an_integer_field_are_refused() -> None:
    with (
        Collector(ByteImageEnv, frames_per_batch=8, env_kwargs={"what": ""}) as collector,
        pytest.raises(
            EnvOutputError, match=r"values 300, which do not fit a uint8 field; its observation space Box\(0, 255"
        ),
    ):
        collector.next_batch()


def test_env_output_errors_travel_from_workers() -> None:
    with (
        Collector(BadOutputEnv, frames_per_batch=8, num_workers=1, restart="never", env_kwargs={"what": "short"}) as c,
        pytest.raises(WorkerCrashedError, match=r"EnvOutputError: env 'callable:BadOutputEnv'"),
    ):
        c.next_batch()


def test_a_policy_that_turns_to_floats_for_a_discrete_space_mid_run_is_refused() -> None:
    calls = {"n": 0}

    def policy(td: Any) -> torch.Tensor:
        calls["n"] += 1
        n = td.batch_size[0]
        return torch.full((n,), 0.9) if calls["n"] > 3 else torch.zeros(n, dtype=torch.long)

    with (
        Collector("CartPole-v1", policy, frames_per_batch=8) as collector,
        pytest.raises(PolicyError, match=r"returned actions of shape \(1,\) and dtype torch.float32.* discrete"),
    ):
        collector.next_batch()


# -- 4. SIGTERM ------------------------------------------------------------------------------

SIGTERM_TRAINER = """
import os, signal, sys
import pycollect
from pycollect.testing.envs import OrphanChildEnv
from pycollect.testing.leaks import child_processes
if {chain!r}:
    def user_handler(signum, frame):
        print("user handler", flush=True)
        sys.exit(7)
    signal.signal(signal.SIGTERM, user_handler)
c = pycollect.Collector(OrphanChildEnv, frames_per_batch=8, envs_per_worker=2, num_workers=2)
c.next_batch()
print(" ".join(map(str, sorted(child_processes()))), flush=True)
while True:
    c.next_batch()
"""


@pytest.mark.parametrize("chain", [False, True])
def test_sigterm_tears_down_like_ctrl_c_and_chains_to_the_users_handler(chain: bool) -> None:
    trainer = subprocess.Popen(
        [sys.executable, "-c", SIGTERM_TRAINER.format(chain=chain)], stdout=subprocess.PIPE, text=True
    )
    assert trainer.stdout is not None
    tree = [int(pid) for pid in trainer.stdout.readline().split()]
    assert len(tree) >= 6  # 2 workers, 4 env children
    trainer.send_signal(signal.SIGTERM)
    out, _ = trainer.communicate(timeout=60)
    if chain:
        assert "user handler" in out and trainer.returncode == 7
    else:
        assert trainer.returncode == 128 + signal.SIGTERM
    from trainer_process import wait_gone

    wait_gone(tree, timeout_s=60)  # every worker and every env child, closed in order


SIGKILL_TRAINER = """
import os, sys
import numpy as np, pycollect
from pycollect.testing.envs import OrphanChildEnv
kwargs = {{"pid_file": sys.argv[1], "ignore_sigterm": True}}
if {vector!r}:
    env = pycollect.make_vec(OrphanChildEnv, 4, num_workers=2, env_kwargs=kwargs)
    env.reset(seed=0)
    step = lambda: env.step(np.zeros(4, np.int64))
else:
    c = pycollect.Collector(OrphanChildEnv, frames_per_batch=8, envs_per_worker=2, num_workers=2, env_kwargs=kwargs)
    step = c.next_batch
step()
print("stepping", flush=True)
while True:
    step()
"""


@pytest.mark.parametrize("fork_server", ["1", "0"], ids=["fork-server", "exec"])
@pytest.mark.parametrize("vector", [False, True], ids=["collector", "make_vec"])
def test_a_sigkilled_trainer_leaves_no_process_its_envs_started(vector: bool, fork_server: str, tmp_path: Path) -> None:
    """kill -9 of the trainer: the workers die of their parent-death signal, and so must what
    their envs started in their process group, even a child that ignores SIGTERM."""
    pid_file = tmp_path / "children"
    trainer = subprocess.Popen(
        [sys.executable, "-c", SIGKILL_TRAINER.format(vector=vector), str(pid_file)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYCOLLECT_FORK_SERVER": fork_server},
    )
    assert trainer.stdout is not None
    children: list[int] = []
    try:
        assert trainer.stdout.readline() == "stepping\n"
        children = [int(pid) for pid in pid_file.read_text().split()]
        assert len(children) >= 4  # the workers' envs (and a probe env the trainer built and closed)
        trainer.send_signal(signal.SIGKILL)
        trainer.wait(timeout=10)
        from trainer_process import wait_gone

        wait_gone(children, timeout_s=30)
    finally:
        trainer.kill()
        trainer.wait(timeout=10)
        for pid in children:  # what the test found left, so that it leaves nothing itself
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


# -- 5. descriptors -----------------------------------------------------------------------------


class FdProbeEnv(CountingEnv):
    """Starts a process that inherits everything it can (close_fds=False) and counts which of
    the worker's pycollect descriptors (lifeline, segment, spec) it got."""

    def __init__(self) -> None:
        super().__init__()
        ours = {}
        for fd in (3, 4, 5):
            with contextlib.suppress(OSError):  # a descriptor the worker does not have
                ours[fd] = os.readlink(f"/proc/self/fd/{fd}")
        code = "import os; print('\\n'.join(os.readlink(f'/proc/self/fd/{n}') for n in os.listdir('/proc/self/fd')))"
        seen = subprocess.run([sys.executable, "-c", code], close_fds=False, capture_output=True, text=True).stdout
        self.leaked = len(set(ours.values()) & set(seen.split("\n")))

    def _obs(self) -> np.ndarray:
        return np.array([self.leaked, self._t], np.float32)


def test_a_process_an_env_starts_inherits_no_pycollect_descriptor() -> None:
    with Collector(FdProbeEnv, frames_per_batch=4, num_workers=1, restart="never") as collector:
        batch = collector.next_batch()
    assert batch["observation"][..., 0].max().item() == 0


# -- 6. the spec cannot be changed ----------------------------------------------------------------


def test_the_spec_memfd_is_sealed_against_writes() -> None:
    from pycollect._workers.spec import write_spec

    fd = write_spec(b"payload")  # type: ignore[arg-type]
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
        assert seals & fcntl.F_SEAL_WRITE and seals & fcntl.F_SEAL_SHRINK and seals & fcntl.F_SEAL_GROW
        with pytest.raises(PermissionError):
            os.pwrite(fd, b"evil", 0)
        reopened = os.open(f"/proc/self/fd/{fd}", os.O_RDWR)  # what another process could do
        try:
            with pytest.raises(PermissionError):
                os.write(reopened, b"evil")
        finally:
            os.close(reopened)
    finally:
        os.close(fd)


# -- 7. a long exception message ------------------------------------------------------------------


class LongMessageEnv(CountingEnv):
    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        if self._t == 2:
            raise ValueError("x" * 10_000)
        return super().step(action)


def test_a_long_exception_message_keeps_the_traceback() -> None:
    with (
        Collector(LongMessageEnv, frames_per_batch=8, num_workers=1, restart="never") as collector,
        pytest.raises(WorkerCrashedError) as info,
    ):
        collector.next_batch()
    error = info.value.error or ""
    assert error.startswith("ValueError: xxxx") and "characters truncated" in error
    assert "Traceback (most recent call last)" in error and "test_hardening.py" in error and "in step" in error
    assert len(error.encode()) <= pycollect._core.WORKER_ERROR_CAPACITY


# -- 8. errors outside the hierarchy ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "kwargs", "error", "match"),
    [
        ("CartPole-v1", {"env_kwargs": {"no_such": 1}}, EnvCreationError, "no_such"),
        (CountingEnv, {"env_kwargs": {"no_such": 1}}, EnvCreationError, "no_such"),
        ("CartPole-v1", {"env_kwargs": {1: 2}}, ConfigError, "env_kwargs keys must be strings .*got 1"),
        ("CartPole-v1", {"sync": "false"}, ConfigError, "sync must be True or False, got 'false'"),
        ("CartPole-v1", {"zero_copy": 1}, ConfigError, "zero_copy must be True or False, got 1"),
    ],
)
def test_odd_arguments_raise_config_errors_naming_the_value(env: Any, kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        Collector(env, frames_per_batch=8, **kwargs)
    assert issubclass(error, ConfigError)


# -- 9. os.fork() --------------------------------------------------------------------------------

FORK_TRAINER = """
import os, sys
import pycollect
from pycollect.testing.envs import CountingEnv
c = pycollect.Collector(CountingEnv, frames_per_batch=8, num_workers=1)
c.next_batch()
pid = os.fork()
if pid == 0:
    sys.exit(0)  # a normal exit: atexit hooks run
_, status = os.waitpid(pid, 0)
c.next_batch()  # the parent's workers are untouched
c.shutdown()
print("child", os.waitstatus_to_exitcode(status), flush=True)
"""


FORK_SIGTERM_TRAINER = """
import os, signal, sys, time
import pycollect
from pycollect.testing.envs import CountingEnv
c = pycollect.Collector(CountingEnv, frames_per_batch=8, num_workers=1)
c.next_batch()
read, write = os.pipe()
pid = os.fork()
if pid == 0:  # as a multiprocessing or TorchRL worker forked from a trainer would be
    os.close(read)
    os.write(write, b"x")
    while True:
        time.sleep(1)
os.close(write)
os.read(read, 1)  # the child runs
os.kill(pid, signal.SIGTERM)
_, status = os.waitpid(pid, 0)
c.shutdown()
print("signalled", os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM, flush=True)
"""


def test_a_forked_child_dies_of_sigterm_as_it_would_without_pycollect() -> None:
    """A child forked from a trainer owns no collector: pycollect's SIGTERM handling is not its.

    It had inherited the handler, which raised ``SystemExit(143)`` wherever the child was (a
    traceback from a TorchRL ``ParallelEnv`` worker's ``atexit`` join, seen in a benchmark).
    """
    result = subprocess.run(
        [sys.executable, "-c", FORK_SIGTERM_TRAINER], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "signalled True" in result.stdout, result.stdout + result.stderr
    assert "SystemExit" not in result.stderr


def test_a_forked_child_exits_cleanly_and_leaves_the_parents_workers_alone() -> None:
    result = subprocess.run(
        [sys.executable, "-c", FORK_TRAINER], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "child 0" in result.stdout, result.stderr
    assert "PanicException" not in result.stderr
