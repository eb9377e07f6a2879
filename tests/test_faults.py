"""Nothing lost: a resumed run and a run whose workers crash deliver the batches of an uninterrupted one."""

from __future__ import annotations

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

from pycollect import Collector, ConfigError, EnvStateError
from pycollect._checkpoints import latest_checkpoint, load_checkpoint
from pycollect.default_plugins import Central
from pycollect.testing.batches import batch_digest
from pycollect.testing.envs import RaisingEnv, UnsaveableEnv
from pycollect.testing.waiting import wait_until

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parents[1]


def _collector(env: str = "CartPole-v1", **settings: Any) -> Collector:
    defaults: dict[str, Any] = {"frames_per_batch": 64, "envs_per_worker": 4, "seed": 7}
    return Collector(env, **{**defaults, **settings})


def _run(collector: Collector, batches: int) -> list[dict[str, str]]:
    return [batch_digest(collector.next_batch()) for _ in range(batches)]


def make_pong() -> gym.Env:
    """ALE Pong as the benchmarks build it (AtariPreprocessing, a stack of 4 frames), with sticky actions saved.

    ALE's own sticky actions cannot be saved (pycollect refuses them): gymnasium's StickyAction
    makes them here, with the same probability.
    """
    import ale_py

    gym.register_envs(ale_py)
    env = gym.make("ALE/Pong-v5", frameskip=1, obs_type="grayscale", repeat_action_probability=0.0)
    env = gym.wrappers.StickyAction(env, repeat_action_probability=0.25)
    env = gym.wrappers.AtariPreprocessing(env, frame_skip=4, screen_size=84, grayscale_obs=True, noop_max=30)
    return gym.wrappers.FrameStackObservation(env, stack_size=4)


def make_cartpoles() -> gym.vector.VectorEnv:
    """Four CartPoles in gymnasium's SyncVectorEnv (``next_step`` mode): a batched env pycollect saves."""
    return gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(4)])


def make_same_step_cartpoles() -> gym.vector.VectorEnv:
    """:func:`make_cartpoles` autoresetting in the same step."""
    cartpoles = [lambda: gym.make("CartPole-v1") for _ in range(4)]
    return gym.vector.SyncVectorEnv(cartpoles, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)


ENVS = {
    "cartpole": ("CartPole-v1", 4, 64),
    "pong": ("callable:tests.test_faults:make_pong", 2, 16),
    "batched": ("callable:tests.test_faults:make_cartpoles", 4, 64),
    "batched-same-step": ("callable:tests.test_faults:make_same_step_cartpoles", 4, 64),
}


@pytest.mark.parametrize("env", sorted(ENVS))
@pytest.mark.parametrize("engine", ["inprocess", "workers", "central"])
def test_a_resumed_run_makes_the_batches_of_the_uninterrupted_one(engine: str, env: str) -> None:
    target, envs, frames = ENVS[env]
    workers = 0 if engine == "inprocess" else 2
    settings: dict[str, Any] = {"env": target, "envs_per_worker": envs, "frames_per_batch": frames * max(workers, 1)}
    if workers:
        settings |= {"num_workers": workers, "snapshots": True, "engine": engine}
    if engine == "central":  # a policy in the trainer, whose next input the snapshot holds
        settings |= {"policy": _argmax_policy(target)}
    with _collector(**settings) as whole:
        expected = _run(whole, 30)
    with _collector(**settings) as first:
        assert _run(first, 10) == expected[:10]
        state = first.state_dict(env_states=True)
    assert ("worker_states" if engine == "workers" else "env_snapshot") in state
    with _collector(**settings, resume=state) as resumed:
        assert resumed.frames == 10 * frames * max(workers, 1)
        assert _run(resumed, 20) == expected[10:]


class _FlatArgmax(torch.nn.Module):
    """A deterministic policy of any image or vector observation: a seeded linear layer, its largest logit."""

    def __init__(self, size: int, actions: int) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(3)
        self.linear = torch.nn.Linear(size, actions)
        with torch.no_grad():
            self.linear.weight.copy_(torch.randn(actions, size, generator=generator) / size**0.5)
            self.linear.bias.zero_()

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        """The index of the largest logit, per row."""
        argmax: torch.Tensor = self.linear(observation.flatten(1).float()).argmax(-1)
        return argmax


def _argmax_policy(env: str) -> _FlatArgmax:
    """A :class:`_FlatArgmax` for ``env``'s spaces."""
    probe = make_pong() if env.endswith("make_pong") else gym.make("CartPole-v1" if ":" in env else env)
    try:
        return _FlatArgmax(int(np.prod(probe.observation_space.shape)), int(probe.action_space.n))
    finally:
        probe.close()


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
def test_a_resumed_central_run_with_a_recurrent_policy_and_a_trajectory_limit_continues_exactly(sync: bool) -> None:
    from policies import lstm_actor  # tests/ is on sys.path (pytest's rootdir-relative import)

    settings: dict[str, Any] = {
        "policy": lstm_actor(),  # sampled: each group's torch stream is saved and restored too
        "num_workers": 2,
        "engine": "central",
        "snapshots": True,
        "sync": sync,
        "max_frames_per_traj": 13,
        "frames_per_batch": 48,
        "envs_per_worker": 3,
    }
    with _collector(**settings) as whole:
        expected = _run(whole, 12)
    with _collector(**settings) as first:
        assert _run(first, 5) == expected[:5]  # async: the round's second rollout is still to hand out
        state = first.state_dict(env_states=True)
    with _collector(**settings, resume=state) as resumed:
        assert _run(resumed, 7) == expected[5:]


def test_a_central_snapshot_of_another_grouping_is_refused() -> None:
    settings: dict[str, Any] = {"num_workers": 2, "engine": Central(groups=2), "snapshots": True, "envs_per_worker": 4}
    with _collector(**settings) as first:
        _run(first, 2)
        state = first.state_dict(env_states=True)
    with pytest.raises(ConfigError, match=r"2 groups of envs, this central engine steps 1"):
        _collector(**(settings | {"engine": Central(groups=1)}), resume=state)


def _rollouts_by_worker(
    collector: Collector, batches: int | None = None, *, until: dict[int, int] | None = None
) -> dict[int, list[dict[str, str]]]:
    """Async batches (one worker's rollout each) by the worker that made them: worker ``w``'s ids are ``w`` mod 2.

    Takes ``batches`` batches, or with ``until``, batches until each worker has made at least its
    count: which worker delivers next is timing (a worker slow to start may deliver none of the
    first dozens), so a fixed number of batches need not reach a given share of each worker.
    """
    rollouts: dict[int, list[dict[str, str]]] = {0: [], 1: []}
    while (
        (len(rollouts[0]) + len(rollouts[1]) < batches)
        if until is None
        else any(len(rollouts[w]) < n for w, n in until.items())
    ):
        batch = collector.next_batch()
        rollouts[int(batch["collector", "traj_ids"][0, 0]) % 2].append(batch_digest(batch))
    return rollouts


def test_an_async_resume_goes_on_with_each_workers_own_rollouts_exactly() -> None:
    """Async: which worker delivers next is timing, but every worker's rollouts go on as they would have."""
    settings: dict[str, Any] = {"num_workers": 2, "sync": False, "snapshots": True}
    with _collector(**settings) as first:
        before = _rollouts_by_worker(first, 10)
        state = first.state_dict(env_states=True)
    with _collector(**settings, resume=state) as resumed:
        after = _rollouts_by_worker(resumed, 10)
    needed = {worker: len(before[worker]) + len(after[worker]) for worker in (0, 1)}
    with _collector(**settings) as whole:
        expected = _rollouts_by_worker(whole, until=needed)
    for worker in (0, 1):
        done = len(before[worker])
        assert before[worker] == expected[worker][:done]
        assert after[worker] == expected[worker][done : needed[worker]]


def test_without_env_states_a_resume_starts_fresh_episodes() -> None:
    with _collector() as first:
        _run(first, 3)
        state = first.state_dict(env_states=False)
    assert "env_snapshot" not in state
    with _collector(resume=state) as resumed:
        assert resumed.frames == 192


def test_env_states_are_refused_where_none_are_kept() -> None:
    with _collector(num_workers=1) as collector, pytest.raises(ConfigError, match=r"snapshots=True"):
        collector.state_dict(env_states=True)  # no snapshots: none kept


def test_a_state_dict_of_another_collector_is_refused_naming_what_differs() -> None:
    with _collector() as collector:
        state = collector.state_dict()
    with pytest.raises(ConfigError, match=r"envs_per_worker: saved 4, here 2"):
        _collector(envs_per_worker=2, resume=state)
    with pytest.raises(ConfigError, match=r"seed: saved 7, here 8"):
        _collector(seed=8, resume=state)


def test_checkpoints_are_whole_files_the_newest_kept(tmp_path: Path) -> None:
    with _collector(checkpoint_dir=str(tmp_path), checkpoint_every=2, checkpoints_kept=2) as collector:
        _run(collector, 7)
    names = sorted(path.name for path in tmp_path.iterdir())
    assert names == ["checkpoint-000000004.pt", "checkpoint-000000006.pt"]
    assert load_checkpoint(tmp_path)["batches"] == 6
    newest = latest_checkpoint(tmp_path)
    assert newest is not None
    newest.write_bytes(newest.read_bytes()[:100])  # a truncated file
    with pytest.raises(ConfigError, match=r"not a whole pycollect checkpoint"):
        load_checkpoint(newest)
    with pytest.raises(ConfigError, match=r"no checkpoint file .*elsewhere"):
        load_checkpoint(tmp_path / "elsewhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"no checkpoint in .*empty"):
        load_checkpoint(tmp_path / "empty")


_CHILD = """
import hashlib, sys
from pycollect import Collector
from pycollect.testing.batches import batch_digest
directory, batches, engine = sys.argv[1], int(sys.argv[2]), sys.argv[3]
resume = sys.argv[4] if len(sys.argv) > 4 else None
with Collector("CartPole-v1", frames_per_batch=64, envs_per_worker=4, seed=7, num_workers=2, engine=engine,
               checkpoint_dir=directory, checkpoint_every=1, resume=resume) as collector:
    for _ in range(batches):
        hashes = batch_digest(collector.next_batch())
        print(collector.frames // 64, sorted(hashes.items()), flush=True)
"""


def _child(directory: Path, batches: int, engine: str, resume: Path | None = None) -> subprocess.Popen[str]:
    args = [sys.executable, "-c", _CHILD, str(directory), str(batches), engine] + ([str(resume)] if resume else [])
    return subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, text=True)


@pytest.mark.parametrize("engine", ["workers", "central"])
def test_a_trainer_killed_after_its_checkpoint_resumes_in_a_new_process(tmp_path: Path, engine: str) -> None:
    whole = _child(tmp_path / "whole", 30, engine)
    expected = whole.communicate(timeout=150)[0].splitlines()
    killed = _child(tmp_path / "run", 1000, engine)
    assert killed.stdout is not None
    lines = [killed.stdout.readline() for _ in range(10)]
    assert lines == [line + "\n" for line in expected[:10]]
    wait_until(lambda: load_checkpoint(tmp_path / "run")["batches"] >= 10, timeout_s=30, what="the 10th checkpoint")
    killed.send_signal(signal.SIGKILL)  # no chance to write anything more
    killed.wait(timeout=30)
    state = load_checkpoint(tmp_path / "run")
    done = int(state["batches"])
    resumed = _child(tmp_path / "run", 30 - done, engine, resume=tmp_path / "run")
    assert resumed.communicate(timeout=150)[0].splitlines() == expected[done:]


def test_replay_delivers_the_batches_of_a_run_without_the_crash() -> None:
    settings: dict[str, Any] = {"frames_per_batch": 20, "num_workers": 2, "envs_per_worker": 1, "seed": 3}
    with Collector(RaisingEnv, env_kwargs={"fail_at": 50, "only_generation": 99}, **settings) as calm:
        expected = [batch_digest(calm.next_batch()) for _ in range(8)]
    with Collector(
        RaisingEnv, env_kwargs={"fail_at": 50, "only_generation": 1}, recovery="replay", max_restarts=4, **settings
    ) as crashing:
        got = [batch_digest(crashing.next_batch()) for _ in range(8)]
        assert crashing.stats().restarts >= 2  # each worker crashed at step 49, in its third rollout
        metrics = crashing.stats().metrics
        assert metrics is not None
        assert [(w.restarts_replayed, w.restarts_cut) for w in metrics.workers] == [(1, 0), (1, 0)]
    assert got == expected


@pytest.mark.parametrize(("env", "batches"), [("cartpole", 50), ("batched", 12), ("batched-same-step", 12)])
def test_a_worker_killed_mid_run_is_replayed_every_batch_identical(env: str, batches: int) -> None:
    target, envs, frames = ENVS[env]
    settings: dict[str, Any] = {
        "env": target,
        "num_workers": 2,
        "envs_per_worker": envs,
        "frames_per_batch": 2 * frames,
    }
    # A kill every 4 batches: the restarts' backoff, doubling from 0.1 s to 5 s, would be most of the test's time.
    replay = {"recovery": "replay", "max_restarts": 40, "restart_window_s": 600}
    replay |= {"backoff_max_s": 0.05, "backoff_initial_s": 0.01}
    with _collector(**settings) as calm:
        expected = _run(calm, batches)
    with _collector(**settings, **replay) as killed:
        got = []
        for b in range(batches):
            got.append(batch_digest(killed.next_batch()))
            if b % 4 == 1:
                pid = killed.stats().workers[b % 2].pid
                if pid is not None:
                    os.kill(pid, signal.SIGKILL)
        assert killed.stats().restarts >= batches // 8
        metrics = killed.stats().metrics
        assert metrics is not None and not any(w.restarts_cut for w in metrics.workers)
    assert got == expected


def test_replay_is_refused_for_a_batched_env_whose_sub_envs_cannot_be_saved() -> None:
    with pytest.raises(
        EnvStateError, match=r"batched env EnvPool CartPole-v1 of 4 sub-envs cannot save .*SyncVectorEnv"
    ):
        Collector("envpool:CartPole-v1", frames_per_batch=8, num_workers=1, envs_per_worker=4, recovery="replay")
    with pytest.raises(EnvStateError, match=r"sub-env 0 of batched env SyncVectorEnv of 2 sub-envs .*UnsaveableEnv"):
        Collector(_unsaveable_pair, frames_per_batch=8, num_workers=1, envs_per_worker=2, snapshots=True)


def _unsaveable_pair() -> gym.vector.VectorEnv:
    return gym.vector.SyncVectorEnv([UnsaveableEnv, UnsaveableEnv])


def test_replay_is_refused_for_an_env_that_cannot_be_saved() -> None:
    with pytest.raises(EnvStateError, match="UnsaveableEnv"):
        Collector(UnsaveableEnv, frames_per_batch=8, num_workers=1, recovery="replay")
    with pytest.raises(EnvStateError, match=r"UnsaveableEnv.*engine='central'"):
        Collector(UnsaveableEnv, frames_per_batch=8, num_workers=1, engine="central", snapshots=True)


def test_recovery_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="recovery must be one of"):
        _collector(num_workers=1, recovery="hope")
    with pytest.raises(ConfigError, match="num_workers >= 1"):
        _collector(recovery="replay")
    with pytest.raises(ConfigError, match="engine 'central' .* cannot replay a crashed worker's steps"):
        _collector(num_workers=1, engine="central", recovery="replay")
    with pytest.raises(ConfigError, match="checkpoint_every=2 needs a checkpoint_dir"):
        _collector(checkpoint_every=2)


_FOREVER = """
import sys
from pycollect import Collector
with Collector("CartPole-v1", frames_per_batch=64, envs_per_worker=4, seed=7, num_workers=2,
               engine=sys.argv[2], checkpoint_dir=sys.argv[1]) as collector:
    while True:
        collector.next_batch()
        print(collector.frames // 64, flush=True)
"""


@pytest.mark.parametrize("engine", ["workers", "central"])
def test_sigterm_writes_a_checkpoint_of_the_last_batch_before_the_workers_stop(tmp_path: Path, engine: str) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", _FOREVER, str(tmp_path), engine], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    for _ in range(5):
        child.stdout.readline()
    assert latest_checkpoint(tmp_path) is None  # checkpoint_every=0: none until asked
    child.send_signal(signal.SIGTERM)
    child.wait(timeout=60)
    delivered = [int(line) for line in child.stdout.read().split()]
    state = load_checkpoint(tmp_path)
    # The batch the child was in (or had not printed yet) when the signal came may be in it.
    assert state["batches"] in range(5, 5 + len(delivered) + 2)
    assert ("worker_states" if engine == "workers" else "env_snapshot") in state  # the envs after that batch
    with Collector(
        "CartPole-v1", frames_per_batch=64, envs_per_worker=4, seed=7, num_workers=2, engine=engine, resume=tmp_path
    ) as resumed:
        assert resumed.frames == 64 * state["batches"]
        resumed.next_batch()  # the envs restored from the checkpoint step on
