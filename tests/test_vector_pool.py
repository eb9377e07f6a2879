"""``make_vec(batch_size < num_envs)``: a pool that serves the first envs ready (EnvPool's
``async_reset``/``recv``/``send``), and the same API on a synchronous vector env."""

from __future__ import annotations

import itertools
import os
import time
from typing import Any

import numpy as np
import pytest
from test_vector_workers import CrashingEnv

from pycollect import ActionError, ConfigError
from pycollect._workers import contract
from pycollect.testing import wait_until
from pycollect.testing.envs import CountingEnv, MultiBinaryActionEnv
from pycollect.vector import make_vec

pytestmark = pytest.mark.timeout(120)


def _base(seed: int) -> float:
    env = CountingEnv()
    obs, _ = env.reset(seed=seed)
    return float(obs[0])


def test_a_pool_serves_every_env_and_each_steps_its_own_episodes() -> None:
    env = make_vec(CountingEnv, 8, num_workers=4, batch_size=4, env_kwargs={"length": 5})
    served = np.zeros(8, int)
    t = np.zeros(8, int)  # each env's step count, as its observations must show it
    try:
        env.async_reset(seed=10)
        # At least 60 recv() calls, and on until every env was served: which workers answer first
        # is the OS's choice (4 on 2 CPUs here), and two fast ones can take 60 calls between them
        # before a slow one has answered its reset; the pool then serves the slow one first.
        deadline, calls = time.monotonic() + 60, 0
        while calls < 60 or served.min() < 1:
            assert time.monotonic() < deadline, f"envs not served within 60 s: {served}"
            calls += 1
            obs, reward, terminated, truncated, infos, ids = env.recv()
            assert ids.dtype == np.int32 and len(ids) == 4 and len(set(ids.tolist())) == 4
            assert all(ids[j] % 2 == 0 and ids[j + 1] == ids[j] + 1 for j in (0, 2)), ids  # whole workers
            for row, i in enumerate(ids.tolist()):
                if served[i] == 0:  # the reset
                    assert obs[row].tolist() == [_base(10 + i), 0.0]
                elif t[i] == 5:  # NEXT_STEP: the step after the end is a reset (reward 0)
                    assert obs[row, 1] == 0.0 and reward[row] == 0.0
                    t[i] = 0
                else:
                    t[i] += 1
                    assert obs[row, 1] == t[i] and reward[row] == t[i]
                    assert terminated[row] == (t[i] == 5) and not truncated[row]
                served[i] += 1
            assert infos == {}
            env.send(np.zeros(4, np.int64), ids)
        assert served.min() >= 1, served  # how often each depends on the OS: the pool never waits for a slow one
    finally:
        env.close()


def test_each_env_of_a_pool_steps_with_the_action_sent_for_it() -> None:
    """One worker per recv(): its actions are written where that worker reads them (natively for
    an exact array, through the checks for a list), and no other worker's."""
    env = make_vec(MultiBinaryActionEnv, 6, num_workers=3, batch_size=2)
    sent: dict[int, list[float]] = {}  # each env's last action, which its next observation echoes
    checked = np.zeros(6, int)
    steps = 0

    def step() -> bool:
        nonlocal steps
        obs, _, _, _, _, ids = env.recv()
        for row, i in enumerate(ids.tolist()):
            if i in sent:
                assert obs[row].tolist() == sent[i], (steps, i)
                checked[i] += 1
        actions = np.array([[(i >> b) & 1 for b in range(3)] + [steps & 1] for i in ids.tolist()], np.int8)
        for row, i in enumerate(ids.tolist()):
            sent[i] = actions[row].astype(float).tolist()
        env.send(actions.tolist() if steps % 3 == 0 else actions, ids)
        steps += 1
        return bool(checked.min() >= 3)

    try:
        env.async_reset(seed=0)
        # Which worker is served when depends on the OS (3 workers on 2 CPUs): step until every
        # env has come back with the actions sent for it a few times.
        wait_until(step, timeout_s=60, what="every env to come back with its actions", poll_s=0)
    finally:
        env.close()


def test_the_pool_api_on_a_synchronous_vector_env_is_reset_and_step() -> None:
    for workers in (0, 2):
        env = make_vec(CountingEnv, 4, num_workers=workers, env_kwargs={"length": 3})
        try:
            env.async_reset(seed=0)
            obs, reward, _, _, _, ids = env.recv()
            assert ids.tolist() == [0, 1, 2, 3] and reward.tolist() == [0.0] * 4
            env.send(np.zeros(4, np.int64))
            obs, reward, *_, ids = env.recv()
            assert obs[:, 1].tolist() == [1.0] * 4 and reward.tolist() == [1.0] * 4
        finally:
            env.close()


def test_a_crash_in_a_pool_cuts_that_workers_episodes() -> None:
    env = make_vec(CrashingEnv, 4, num_workers=2, batch_size=2, env_kwargs={"crash_at": 2})
    cuts: list[list[int]] = []

    def step_until_cut() -> bool:
        _, reward, _, truncated, infos, ids = env.recv()
        if infos.get("_worker_restarted", np.zeros(1, bool)).any():
            assert truncated.all() and reward.tolist() == [0.0, 0.0]
            cuts.append(ids.tolist())
        env.send(np.zeros(2, np.int64))
        return bool(cuts)

    try:
        env.async_reset(seed=0)
        # Worker 0 is served meanwhile: the pool waits for no one. The restarted worker answers
        # once it is up, and its envs are cut then.
        wait_until(step_until_cut, timeout_s=60, what="the restarted worker's envs to come back cut", poll_s=0)
        for _ in range(6):
            step_until_cut()
    finally:
        env.close()
    assert cuts == [[2, 3]]  # worker 1's envs, once


class ResetCrashingEnv(CountingEnv):
    """Exits its worker process at its first seeded reset, in worker 1's first generation only."""

    def __init__(self) -> None:
        super().__init__(length=100)
        here = int(os.environ.get(contract.ENV_WORKER, "-1")), int(os.environ.get(contract.ENV_GENERATION, "0"))
        self.armed = here == (1, 1)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        if self.armed and seed is not None:
            os._exit(3)
        return super().reset(seed=seed, options=options)


def test_a_reset_a_crash_left_unserved_is_posted_again_to_the_restarted_worker() -> None:
    env = make_vec(ResetCrashingEnv, 4, num_workers=2, batch_size=2)
    seen: dict[int, list[tuple[float, float, float, bool]]] = {0: [], 2: []}

    def step_until_worker_1_is_back() -> bool:
        obs, reward, _, truncated, infos, ids = env.recv()
        assert "worker_restarted" not in infos  # nothing was cut: the reset was served again
        seen[int(ids[0])].append((float(obs[0, 0]), float(obs[0, 1]), float(reward[0]), bool(truncated[0])))
        env.send(np.zeros(2, np.int64))
        return bool(seen[2])

    try:
        env.async_reset(seed=[10, 11, 12, 13])
        # Worker 0 is served meanwhile; worker 1 dies in its reset, and its successor serves it.
        wait_until(step_until_worker_1_is_back, timeout_s=60, what="worker 1's envs to come back reset", poll_s=0)
        assert [w.generation for w in env.workers] == [1, 2]
        assert seen[2][0] == (_base(12), 0.0, 0.0, False)  # reset with the seed it was given
        assert seen[0][0] == (_base(10), 0.0, 0.0, False) and len(seen[0]) >= 1
        steps = [t for _, t, _, _ in seen[0]]  # worker 0 stepped on meanwhile (its episodes last 100 steps)
        assert all(after in (before + 1, 0.0) for before, after in itertools.pairwise(steps))
    finally:
        env.close()


def test_pool_misuse_is_refused_by_name() -> None:
    env = make_vec(CountingEnv, 4, num_workers=2, batch_size=2)
    try:
        with pytest.raises(ConfigError, match=r"reset\(\) on .* a pool of 4 envs served 2 at a time"):
            env.reset()
        with pytest.raises(ConfigError, match=r"step\(\) on .* a pool"):
            env.step(np.zeros(4, np.int64))
        with pytest.raises(ConfigError, match=r"send\(\) .* without a recv\(\)"):
            env.send(np.zeros(2, np.int64))
        env.async_reset(seed=0)
        *_, ids = env.recv()
        with pytest.raises(ActionError, match=r"env_ids \[5, 6\], but the last recv\(\) returned"):
            env.send(np.zeros(2, np.int64), [5, 6])
        with pytest.raises(ActionError, match=r"shape \(3,\)"):
            env.send(np.zeros(3, np.int64))
        env.send(np.zeros(2, np.int64), ids)
        with pytest.raises(ConfigError, match=r"have a step or reset in flight: recv\(\) them"):
            env.get_attr("length")
    finally:
        env.close()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_workers": 2, "batch_size": 3}, r"batch_size=3 is not a multiple of the 2 envs each of the 2 workers"),
        ({"num_workers": 0, "batch_size": 2}, r"num_workers=0 has none"),
        ({"num_workers": 2, "batch_size": 5}, r"batch_size must be an int from 1 to num_envs=4, got 5"),
        ({"num_workers": 2, "batch_size": 2, "autoreset_mode": "disabled"}, r"DISABLED needs reset masks"),
    ],
)
def test_bad_pool_arguments_are_refused_before_any_worker_starts(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        make_vec(CountingEnv, 4, **kwargs)


def test_among_the_workers_ready_the_one_waiting_longest_is_served_first() -> None:
    env = make_vec(CountingEnv, 4, num_workers=4, batch_size=1, env_kwargs={"length": 100})
    backend: Any = env._backend
    order = []
    try:
        env.async_reset(seed=0)
        for _ in range(8):
            wait_until(
                lambda: all(backend._channels[w].answered(seq) for w, seq in backend._in_flight.items()),
                timeout_s=30,
                what="every worker's answer",
            )
            *_, ids = env.recv()
            order.append(int(ids[0]))
            env.send(np.zeros(1, np.int64))
    finally:
        env.close()
    assert order == [0, 1, 2, 3, 0, 1, 2, 3]  # all ready each time: posted earliest first, ties by worker
