"""Batched envs (gymnasium ``VectorEnv`` s, EnvPool) stepped as their sub-envs: the same data as single envs.

A factory returning gymnasium's ``SyncVectorEnv`` of ``K`` single envs is a batched env of ``K``
sub-envs that resets them by mask and takes a seed each: everything pycollect delivers over it
(``make_vec`` in each autoreset mode, the collector's batches on every engine, trajectory limits,
infos) must equal what it delivers over the same single envs stepped one by one. The backends
(``gymnasium-vector:``, ``envpool:``) and the refusals are tested here too.
"""

from __future__ import annotations

import functools
import importlib.util
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from test_vector_semantics import _pair, _run, assert_same

import pycollect
from pycollect import ConfigError, EnvCreationError, EnvOutputError, UnknownEnvError
from pycollect.envs.batched import BatchedEnv, VectorEnvAdapter, as_batched
from pycollect.plugins import resolve_env
from pycollect.testing.envs import CountingEnv, SpacesEnv
from pycollect.vector import make_vec

pytestmark = pytest.mark.timeout(120)

K = 4


def _sync_of(single: Any, count: int, mode: AutoresetMode, **kwargs: Any) -> SyncVectorEnv:
    """gymnasium's SyncVectorEnv of ``count`` ``single(**kwargs)`` envs, autoresetting in ``mode``."""
    return SyncVectorEnv([functools.partial(single, **kwargs)] * count, autoreset_mode=mode)


# (the batched env's own mode, the mode make_vec is asked for): its own, and SAME_STEP by reset masks
SERVED = [
    (AutoresetMode.NEXT_STEP, AutoresetMode.NEXT_STEP),
    (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP),
    (AutoresetMode.SAME_STEP, AutoresetMode.SAME_STEP),
    (AutoresetMode.DISABLED, AutoresetMode.DISABLED),
    (AutoresetMode.DISABLED, AutoresetMode.SAME_STEP),
]


@pytest.mark.parametrize(("own", "mode"), SERVED, ids=[f"{o.name}-as-{m.name}" for o, m in SERVED])
@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize(("obs", "act"), [("box", "discrete"), ("dict", "dict")])
def test_make_vec_over_a_batched_env_is_step_for_step_gymnasiums_sync_vector_env_of_the_singles(
    own: AutoresetMode, mode: AutoresetMode, num_workers: int, obs: str, act: str
) -> None:
    kwargs = {"observation": obs, "action": act}
    per_worker = K // max(1, num_workers)
    factory = functools.partial(_sync_of, SpacesEnv, per_worker, own, **kwargs)
    ours = make_vec(factory, K, num_workers=num_workers, autoreset_mode=mode, restart="never")
    _, theirs = _pair(obs, act, mode, {"num_workers": 0})
    try:
        seen = _run(ours, theirs, steps=40, seed=5)
    finally:
        ours.close()
        theirs.close()
    assert seen["ended"] >= 10, seen  # episodes ended, so autoreset (or masked resets) happened
    if mode is AutoresetMode.SAME_STEP:
        assert seen["final_obs"] >= 10, seen


# A collector needs SAME_STEP: served by a batched env's own mode, or by resets by mask
COLLECTED = [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED]


@pytest.mark.parametrize(
    ("engine", "own"),
    [("inprocess", own) for own in COLLECTED]
    + [("workers", AutoresetMode.NEXT_STEP), ("central", AutoresetMode.NEXT_STEP)],
    ids=lambda value: value if isinstance(value, str) else value.name,
)
def test_a_collector_over_a_batched_env_gives_the_batches_of_its_single_envs(
    engine: str, own: AutoresetMode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seeded, random actions and a policy, a trajectory limit: every key of every batch equal.

    In-process, the rollout's group is seen storing every step whole (one copy per array), the
    steps where episodes end or reach the limit too, and resetting the ended sub-envs together
    (one reset of the batch, or the env's own resets of the step), never one by one.
    """
    from pycollect._steps.group import EnvGroup
    from pycollect.envs.batched import SubEnv

    wholes: list[bool] = []
    together: list[int] = []
    store, reset_ended = EnvGroup._store_column, EnvGroup.reset_ended

    def store_spy(group: EnvGroup, result: Any, t: int) -> list[int] | None:
        ended = store(group, result, t)
        wholes.append(ended is not None)
        return ended

    def reset_spy(group: EnvGroup, ended: Any, t: int) -> Any:
        observations = reset_ended(group, ended, t)
        if observations is not None:
            together.append(len(ended))
        return observations

    monkeypatch.setattr(EnvGroup, "_store_column", store_spy)
    monkeypatch.setattr(EnvGroup, "reset_ended", reset_spy)
    workers = 0 if engine == "inprocess" else 2
    torch.manual_seed(3)  # a policy whose episodes end often, whatever ran before in this process
    policy = torch.nn.Sequential(torch.nn.Linear(4, 2), torch.nn.Softmax(-1))

    def batches(env: Any) -> list[Any]:
        torch.manual_seed(0)
        collector = pycollect.Collector(
            env,
            _Argmax(policy),
            frames_per_batch=max(1, workers) * K * 60,
            envs_per_worker=K,
            num_workers=workers,
            engine=engine,
            seed=11,
            max_frames_per_traj=25,
            init_random_frames=max(1, workers) * K * 60,  # the first batch random, the second the policy's
        )
        try:
            return [collector.next_batch() for _ in range(3)]
        finally:
            collector.shutdown()

    single = batches(functools.partial(gym.make, "CartPole-v1"))
    with monkeypatch.context() as patch:
        if engine == "inprocess":  # the first reset of every sub-env is the batch's too, taken by its views
            patch.setattr(SubEnv, "reset", _first_resets_only(SubEnv.reset))
        batched = batches(functools.partial(_sync_of, gym.make, K, own, id="CartPole-v1"))
    for ours, theirs in zip(batched, single, strict=True):
        assert set(ours.keys(True, True)) == set(theirs.keys(True, True))
        for key in theirs.keys(True, True):
            assert torch.equal(ours[key], theirs[key]), key
    assert sum(int(b["next", "truncated"].sum()) for b in single) > 0  # the limit cut trajectories
    assert sum(int(b["next", "terminated"].sum()) for b in single) > 0
    if engine == "inprocess":
        assert wholes and all(wholes), (wholes.count(True), len(wholes))
        assert len(together) >= 10 and max(together) > 1, together  # several sub-envs reset at once


def _first_resets_only(reset: Any) -> Any:
    """``SubEnv.reset`` that refuses any reset after the first of a view (those must be the batch's, together)."""
    seen: set[int] = set()

    def first_only(view: Any, **kwargs: Any) -> Any:
        if id(view) in seen:
            raise AssertionError(f"sub-env {view.index} reset alone")
        seen.add(id(view))
        return reset(view, **kwargs)

    return first_only


class _Argmax(torch.nn.Module):
    def __init__(self, net: torch.nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return self.net(observation).argmax(-1)


def test_info_keys_of_a_batched_env_reach_the_batch_as_those_of_its_single_envs() -> None:
    def batch(env: Any) -> Any:
        collector = pycollect.Collector(
            env, None, frames_per_batch=K * 12, envs_per_worker=K, num_workers=0, seed=2, info_keys=["step"]
        )
        try:
            return collector.next_batch()
        finally:
            collector.shutdown()

    single = batch(functools.partial(_InfoEnv))
    batched = batch(functools.partial(_sync_of, _InfoEnv, K, AutoresetMode.NEXT_STEP))
    assert torch.equal(batched["next", "step"], single["next", "step"])
    assert int(single["next", "step"].max()) > 0


class _InfoEnv(CountingEnv):
    """A CountingEnv whose info holds its step."""

    def step(self, action: int) -> Any:
        obs, reward, terminated, truncated, _ = super().step(action)
        return obs, reward, terminated, truncated, {"step": self._t}


def test_gymnasium_vector_backend_steps_gymnasiums_own_batched_cartpole_in_next_step_mode() -> None:
    ours = make_vec("gymnasium-vector:CartPole-v1", K, num_workers=0)
    theirs = gym.make_vec("CartPole-v1", K, vectorization_mode="vector_entry_point")
    try:
        first = pycollect.env_seeds(3, K)[0]  # the batch is seeded once, with its first sub-env's seed
        np.testing.assert_array_equal(ours.reset(seed=[first, *[None] * (K - 1)])[0], theirs.reset(seed=first)[0])
        for _ in range(60):
            actions = np.ones(K, np.int64)
            got, want = ours.step(actions), theirs.step(actions)
            for a, b in zip(got[:4], want[:4], strict=True):
                np.testing.assert_array_equal(a, b)
    finally:
        ours.close()
        theirs.close()


def test_a_next_step_batched_env_without_reset_masks_is_refused_where_same_step_is_needed_before_any_worker() -> None:
    with pytest.raises(ConfigError, match=r"a collector needs autoreset mode same_step.*CartPoleVectorEnv of 4"):
        pycollect.Collector("gymnasium-vector:CartPole-v1", None, frames_per_batch=32, envs_per_worker=4, num_workers=2)
    with pytest.raises(ConfigError, match=r"needs autoreset mode same_step.*resets sub-envs by mask"):
        make_vec("gymnasium-vector:CartPole-v1", 4, num_workers=1, autoreset_mode="same_step")


def test_a_same_step_batched_env_refuses_next_step_and_disabled() -> None:
    factory = functools.partial(_sync_of, CountingEnv, 2, AutoresetMode.SAME_STEP)
    for mode in ("next_step", "disabled"):
        with pytest.raises(ConfigError, match=rf"needs autoreset mode {mode}.*autoresets in same_step"):
            make_vec(factory, 2, num_workers=0, autoreset_mode=mode)


def test_a_batched_env_of_another_size_than_envs_per_worker_is_refused_naming_both() -> None:
    factory = functools.partial(_sync_of, CountingEnv, 3, AutoresetMode.NEXT_STEP)
    with pytest.raises(ConfigError, match=r"batched env of 3 sub-envs.*envs_per_worker is 2.*envs_per_worker=3"):
        pycollect.Collector(factory, None, frames_per_batch=8, envs_per_worker=2, num_workers=2)


class _MisdeclaredVectorEnv(gym.vector.VectorEnv):
    """Four sub-envs of a Box(3) observation; ``fault`` breaks one thing a gymnasium vector env must get right."""

    def __init__(self, fault: str) -> None:
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}
        self.num_envs, self.fault = 4, fault
        self.single_observation_space = gym.spaces.Box(-1, 1, (3,), np.float32)
        self.single_action_space = gym.spaces.Discrete(2)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, 4)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, 4)
        if fault == "unbatched observation_space":
            self.observation_space = self.single_observation_space
        elif fault == "action_space of 3 sub-envs":
            self.action_space = gym.vector.utils.batch_space(self.single_action_space, 3)
        elif fault == "no single_action_space":
            del self.single_action_space

    def reset(self, *, seed: Any = None, options: Any = None) -> tuple[np.ndarray, dict[str, Any]]:
        rows = 3 if self.fault == "3 reset rows" else 4
        return np.zeros((rows, 3), np.float32), {}

    def step(self, actions: Any) -> tuple[Any, ...]:
        return np.zeros((4, 3), np.float32), np.zeros(4), np.zeros(4, bool), np.zeros(4, bool), {}


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        (
            "unbatched observation_space",
            r"batched env _MisdeclaredVectorEnv of 4 sub-envs declares observation_space Box\(-1.0, 1.0, \(3,\), "
            r"float32\), not its single_observation_space batched over its 4 sub-envs as gymnasium batches it "
            r"\(gymnasium.vector.utils.batch_space\): Box\(-1.0, 1.0, \(4, 3\), float32\)",
        ),
        (
            "action_space of 3 sub-envs",
            r"declares action_space MultiDiscrete\(\[2 2 2\]\), not .*MultiDiscrete\(\[2 2 2 2\]\)",
        ),
        ("no single_action_space", r"_MisdeclaredVectorEnv of 4 sub-envs has no single_action_space: a gymnasium"),
    ],
)
def test_a_vector_env_whose_spaces_are_not_batched_as_gymnasiums_is_refused_before_any_worker(
    fault: str, message: str
) -> None:
    factory = functools.partial(_MisdeclaredVectorEnv, fault)
    with pytest.raises(ConfigError, match=message):
        pycollect.Collector(factory, None, frames_per_batch=8, envs_per_worker=4, num_workers=2)
    with pytest.raises(ConfigError, match=message):
        make_vec(factory, 4, num_workers=1, autoreset_mode="same_step")


def test_a_reset_with_neither_every_row_nor_the_reset_ones_is_an_output_error_naming_the_env() -> None:
    factory = functools.partial(_MisdeclaredVectorEnv, "3 reset rows")
    expected = r"batched env _MisdeclaredVectorEnv of 4 sub-envs reset 4 sub-envs and returned 3 observations"
    collector = pycollect.Collector(factory, None, frames_per_batch=8, envs_per_worker=4)
    with collector, pytest.raises(EnvOutputError, match=expected):
        collector.next_batch()


def test_a_built_vector_env_is_refused_with_what_to_pass_instead() -> None:
    env = _sync_of(CountingEnv, 2, AutoresetMode.NEXT_STEP)
    try:
        with pytest.raises(ConfigError, match=r"already built batched env \(SyncVectorEnv of 2.*envs_per_worker=2"):
            resolve_env(env)
    finally:
        env.close()


def test_batched_backends_check_their_targets_and_reserved_kwargs() -> None:
    with pytest.raises(UnknownEnvError, match="no vector entry point"):
        resolve_env("gymnasium-vector:Pendulum-v1")
    with pytest.raises(UnknownEnvError, match="unknown gymnasium env id 'NoSuchEnv-v0'"):
        resolve_env("gymnasium-vector:NoSuchEnv-v0")
    with pytest.raises(ConfigError, match=r"env_kwargs\['num_envs'\].*sets it itself"):
        resolve_env("gymnasium-vector:CartPole-v1", {"num_envs": 3})


def test_a_sub_env_is_never_stepped_without_its_batch() -> None:
    batch = VectorEnvAdapter(_sync_of(CountingEnv, 2, AutoresetMode.NEXT_STEP))
    views = batch.views()
    try:
        batch.reset_rows(seeds=[1, 2])
        assert [view.reset()[0][0] for view in views] == [
            CountingEnv().reset(seed=seed)[0][0] for seed in (1, 2)
        ]  # each view takes its row of the batch's reset
        with pytest.raises(ConfigError, match="stepped without its batch"):
            views[1].step(0)
    finally:
        batch.close()


def test_a_batched_env_that_returns_the_wrong_number_of_rows_is_an_env_output_error() -> None:
    class Short(BatchedEnv):
        num_envs = 3
        single_observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
        single_action_space = gym.spaces.Discrete(2)

        def step_batch(self, actions: Any) -> Any:
            return np.zeros((2, 2), np.float32), np.zeros(3), np.zeros(3, bool), np.zeros(3, bool), {}

        def reset_batch(self, seeds: Any, mask: Any) -> Any:
            return np.zeros((3, 2), np.float32), {}

        def close_batch(self) -> None:
            pass

    envs = make_vec(lambda: Short(), 3, num_workers=0)
    try:
        envs.reset()
        with pytest.raises(pycollect.EnvOutputError, match=r"observations of shape \(2, 2\), not one row per sub-env"):
            envs.step(np.zeros(3, np.int64))
    finally:
        envs.close()


def test_as_batched_refuses_a_single_env() -> None:
    with pytest.raises(ConfigError, match="CountingEnv is not a batched env"):
        as_batched(CountingEnv())


@pytest.mark.skipif(importlib.util.find_spec("envpool") is None, reason="EnvPool is not installed")
class TestEnvPool:
    def test_a_collector_over_envpool_in_workers_ends_and_restarts_episodes_with_seeded_repeatable_batches(
        self,
    ) -> None:
        def batches() -> list[Any]:
            collector = pycollect.Collector(
                "envpool:CartPole-v1", None, frames_per_batch=2 * K * 40, envs_per_worker=K, num_workers=2, seed=4
            )
            try:
                return [collector.next_batch() for _ in range(2)]
            finally:
                collector.shutdown()

        first, second = batches(), batches()
        for a, b in zip(first, second, strict=True):
            for key in a.keys(True, True):
                assert torch.equal(a[key], b[key]), key
        batch = first[0]
        done = batch["next", "done"][..., 0]
        assert done.any()
        # After an end, the next frame starts a new episode: a new trajectory id, an observation near 0
        rows, steps = torch.nonzero(done[:, :-1], as_tuple=True)
        assert torch.all(batch["collector", "traj_ids"][rows, steps + 1] != batch["collector", "traj_ids"][rows, steps])
        assert torch.all(batch["observation"][rows, steps + 1].abs() <= 0.05)

    def test_envpool_refuses_reserved_kwargs_and_unknown_tasks(self) -> None:
        with pytest.raises(UnknownEnvError, match="EnvPool has no task 'NoSuchTask-v9'"):
            resolve_env("envpool:NoSuchTask-v9")
        with pytest.raises(ConfigError, match=r"env_kwargs\['seed'\]"):
            resolve_env("envpool:CartPole-v1", {"seed": 3})

    def test_make_vec_over_envpool_next_step_and_same_step(self) -> None:
        for mode in ("next_step", "same_step"):
            envs = make_vec("envpool:CartPole-v1", 4, num_workers=2, autoreset_mode=mode)
            try:
                envs.reset(seed=0)
                ended = finals = 0
                for _ in range(40):
                    *_, terminated, truncated, info = envs.step(np.zeros(4, np.int64))
                    ended += int((terminated | truncated).sum())
                    finals += int(info.get("_final_obs", np.zeros(1, bool)).sum())
                assert ended > 0
                assert finals == (ended if mode == "same_step" else 0)
            finally:
                envs.close()


def test_a_crash_inside_a_batched_env_restarts_its_worker_and_cuts_all_its_sub_envs() -> None:
    envs = make_vec(functools.partial(_sync_of, _CrashOnceEnv, 2, AutoresetMode.NEXT_STEP), 4, num_workers=2)
    try:
        envs.reset(seed=0)
        restarted = None
        for _ in range(10):
            *_, truncated, info = envs.step(np.zeros(4, np.int64))
            if "worker_restarted" in info:
                restarted = info["worker_restarted"] & info["_worker_restarted"]
                break
        assert restarted is not None, "no restart seen"
        assert restarted.tolist() == [False, False, True, True]  # both sub-envs of worker 1
        assert truncated[2:].all()
    finally:
        envs.close()


class _CrashOnceEnv(CountingEnv):
    """Exits its worker process at its third step, in worker 1's first generation only."""

    def __init__(self) -> None:
        super().__init__(length=100)
        import os

        from pycollect._workers import contract

        here = int(os.environ.get(contract.ENV_WORKER, "-1")), int(os.environ.get(contract.ENV_GENERATION, "0"))
        self.armed = here == (1, 1)

    def step(self, action: int) -> Any:
        if self.armed and self._t == 2:
            import os

            os._exit(3)
        return super().step(action)


def test_a_probe_of_a_batched_source_steps_the_whole_batch() -> None:
    source = resolve_env(functools.partial(_sync_of, CountingEnv, 3, AutoresetMode.NEXT_STEP))
    probe = source.make()
    try:
        observation, _ = probe.reset(seed=1)
        assert observation.shape == (2,)
        observation, reward, *_ = probe.step(0)
        assert reward == 1.0 and observation[1] == 1
    finally:
        probe.close()


def test_an_env_factory_that_raises_names_the_batched_backend() -> None:
    source = resolve_env("gymnasium-vector:CartPole-v1", {"no_such_kwarg": 1})
    with pytest.raises(EnvCreationError, match="gymnasium-vector:CartPole-v1"):
        source.make()


@pytest.mark.parametrize(("own", "mode"), SERVED, ids=[f"{o.name}-as-{m.name}" for o, m in SERVED])
@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("info_keys", [None, ()], ids=["infos-kept", "no-infos"])
def test_a_batch_stored_whole_equals_its_single_envs_step_for_step(
    own: AutoresetMode,
    mode: AutoresetMode,
    num_workers: int,
    info_keys: tuple[str, ...] | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Infos empty, observations exact: the group stores the batch's arrays whole (no per-env Python).

    With ``info_keys=()`` no info is kept, but a same-step env's final observations (in its
    infos) still are.
    """
    from pycollect._steps.group import EnvGroup

    wholes: list[bool] = []
    store = EnvGroup._store_batch

    def spy(group: EnvGroup, result: Any) -> Any:
        stored = store(group, result)
        wholes.append(stored[0])
        return stored

    monkeypatch.setattr(EnvGroup, "_store_batch", spy)  # seen in this process (num_workers=0)
    per_worker = K // max(1, num_workers)
    factory = functools.partial(_sync_of, CountingEnv, per_worker, own, length=3)
    ours = make_vec(factory, K, num_workers=num_workers, autoreset_mode=mode, info_keys=info_keys)
    theirs = make_vec(
        functools.partial(CountingEnv, length=3), K, num_workers=0, autoreset_mode=mode, info_keys=info_keys
    )
    try:
        np.testing.assert_array_equal(ours.reset(seed=8)[0], theirs.reset(seed=8)[0])
        ended = np.zeros(K, bool)
        for step in range(20):
            if mode is AutoresetMode.DISABLED and ended.any():
                np.testing.assert_array_equal(
                    ours.reset(options={"reset_mask": ended})[0], theirs.reset(options={"reset_mask": ended})[0]
                )
            actions = np.full(K, step % 3, np.int64)
            got, want = ours.step(actions), theirs.step(actions)
            assert_same(got, want, f"step {step}")
            ended = got[2] | got[3]
    finally:
        ours.close()
        theirs.close()
    if num_workers == 0:
        assert wholes and all(wholes), wholes


def test_sb3_vec_env_over_a_batched_env_equals_it_over_the_single_envs() -> None:
    from pycollect.vector import SB3VecEnv

    def run(env: Any) -> list[Any]:
        vec = SB3VecEnv(env, K, num_workers=2)
        try:
            vec.seed(6)
            steps = [vec.reset()]
            for t in range(30):
                observations, rewards, dones, infos = vec.step(np.full(K, t % 2, np.int64))
                terminal = tuple(info.get("terminal_observation") for info in infos)
                steps.append((observations, rewards, dones, terminal))
            return steps
        finally:
            vec.close()

    single = run(functools.partial(gym.make, "CartPole-v1"))
    batched = run(functools.partial(_sync_of, gym.make, K // 2, AutoresetMode.NEXT_STEP, id="CartPole-v1"))
    assert_same(tuple(batched), tuple(single))
    assert any(step[2].any() for step in single[1:])  # episodes ended: terminal observations compared


class _Float64Resets(VectorEnvAdapter):
    """A batched env whose resets return float64 observations for its float32 space (its steps float32)."""

    def reset_batch(self, seeds: Any, mask: Any, options: Any = None) -> tuple[Any, Any]:
        observations, infos = super().reset_batch(seeds, mask, options)
        return observations.astype(np.float64), infos


@pytest.mark.parametrize("kind", ["dict", "float64-resets"])
def test_sub_envs_reset_together_are_stored_as_its_single_envs_resets(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dict observation's leaves, or resets whose arrays are not the fields' (checked row by row)."""
    from pycollect._steps.group import EnvGroup

    together: list[int] = []
    reset_ended = EnvGroup.reset_ended

    def reset_spy(group: EnvGroup, ended: Any, t: int) -> Any:
        observations = reset_ended(group, ended, t)
        together.append(observations is not None)
        return observations

    monkeypatch.setattr(EnvGroup, "reset_ended", reset_spy)
    obs = "dict" if kind == "dict" else "box"
    single = functools.partial(SpacesEnv, observation=obs, action="discrete", max_length=9)

    def batched() -> BatchedEnv:
        env = _sync_of(SpacesEnv, K, AutoresetMode.NEXT_STEP, observation=obs, action="discrete", max_length=9)
        return _Float64Resets(env) if kind == "float64-resets" else VectorEnvAdapter(env)

    def batches(env: Any) -> list[Any]:
        collector = pycollect.Collector(
            env, None, frames_per_batch=K * 20, envs_per_worker=K, num_workers=0, seed=4, max_frames_per_traj=5
        )
        try:
            return [collector.next_batch() for _ in range(2)]
        finally:
            collector.shutdown()

    theirs, ours = batches(single), batches(batched)
    for got, want in zip(ours, theirs, strict=True):
        for key in want.keys(True, True):
            assert torch.equal(got[key], want[key]), key
    assert sum(together) >= 5, together  # the batched run's ends, reset together (single envs' one by one)


class _ResetInfoEnv(CountingEnv):
    """A CountingEnv whose reset info holds its base (drawn from its seed), its episodes 2 to 4 steps by it."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        obs, _ = super().reset(seed=seed, options=options)
        self.length = 2 + int(self._base) % 3  # sub-envs end at different steps: some reset, not all
        return obs, {"base": self._base}


class _ResetRowsOnly(VectorEnvAdapter):
    """A batched env whose resets by mask return the reset sub-envs' rows only (observations, infos), as EnvPool's."""

    def reset_batch(self, seeds: Any, mask: Any, options: Any = None) -> tuple[Any, Any]:
        observations, infos = super().reset_batch(seeds, mask, options)
        if mask is None:
            return observations, infos
        return observations[mask], {key: np.asarray(value)[mask] for key, value in infos.items()}


@pytest.mark.parametrize("rows", ["every-sub-env", "reset-ones-only"])
def test_make_vec_gives_a_batched_env_s_reset_infos_as_its_single_envs(rows: str) -> None:
    """SAME_STEP over a NEXT_STEP batched env: the sub-envs that ended are reset by mask, their infos each theirs."""

    def batched() -> BatchedEnv:
        env = _sync_of(_ResetInfoEnv, K, AutoresetMode.NEXT_STEP)
        return _ResetRowsOnly(env) if rows == "reset-ones-only" else VectorEnvAdapter(env)

    same_step = AutoresetMode.SAME_STEP
    ours = make_vec(batched, K, num_workers=0, autoreset_mode=same_step)
    theirs = make_vec(_ResetInfoEnv, K, num_workers=0, autoreset_mode=same_step)
    reset_infos, partial = 0, 0
    try:
        assert_same(ours.reset(seed=3), theirs.reset(seed=3), "reset")
        for step in range(12):
            actions = np.full(K, step % 3, np.int64)
            got, want = ours.step(actions), theirs.step(actions)
            assert_same(got, want, f"step {step}")
            reset = int(np.count_nonzero(want[4].get("_base", ())))
            reset_infos += reset
            partial += 0 < reset < K
    finally:
        ours.close()
        theirs.close()
    assert reset_infos >= 2 * K and partial >= 3, (reset_infos, partial)  # some sub-envs reset, not all, with infos


class _RichInfoEnv(CountingEnv):
    """A CountingEnv whose infos hold what EnvPool's and gymnasium's do: numbers, bools, arrays, nesting.

    Some entries come only at some steps (masks with gaps), the reset's info shares a nested
    entry with the step's, and its episodes end at different steps by its base (some sub-envs
    end, not all). ``text``: a string entry too, which cannot be kept whole.
    """

    def __init__(self, text: bool = False) -> None:
        super().__init__()
        self.text = text

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        obs, _ = super().reset(seed=seed, options=options)
        self.length = 2 + int(self._base) % 4
        return obs, {"base": self._base, "nested": {"a": np.int16(-1)}}  # another dtype than the step's

    def step(self, action: int) -> Any:
        obs, reward, terminated, truncated, _ = super().step(action)
        t = self._t
        info: dict[str, Any] = {
            "t": np.int32(t),
            "score": self._base + t,
            "even": t % 2 == 0,
            "pos": np.array([t, self._base], np.float32),
            "nested": {"a": np.int64(t), **({"b": np.uint8(t)} if t % 3 == 0 else {})},
        }
        if t % 4 == 1:
            info["rare"] = np.float32(t / 2)
        if self.text:
            info["phase"] = "odd" if t % 2 else "even"
        return obs, reward, terminated, truncated, info


@pytest.mark.parametrize(("own", "mode"), SERVED, ids=[f"{o.name}-as-{m.name}" for o, m in SERVED])
@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("infos", ["all", "some", "with-text"])
def test_a_batched_env_s_infos_are_kept_whole_and_equal_gymnasiums_sync_vector_env_of_the_singles(
    own: AutoresetMode, mode: AutoresetMode, num_workers: int, infos: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kept whole (no Python per sub-env) where the entries are numbers, bools and arrays; row by row otherwise."""
    from pycollect._steps.group import EnvGroup
    from pycollect.envs._vector_infos import WholeInfos

    whole: list[bool] = []
    store = EnvGroup._store_batch

    def spy(group: EnvGroup, result: Any) -> Any:
        stored = store(group, result)
        whole.append(stored[0] and (stored[1] is None or isinstance(stored[1], WholeInfos)))
        return stored

    monkeypatch.setattr(EnvGroup, "_store_batch", spy)  # seen in this process (num_workers=0)
    text = infos == "with-text"
    per_worker = K // max(1, num_workers)
    keys = ("nested", "t", "base", "rare") if infos == "some" else None
    factory = functools.partial(_sync_of, _RichInfoEnv, per_worker, own, text=text)
    ours = make_vec(factory, K, num_workers=num_workers, autoreset_mode=mode, info_keys=keys)
    theirs = _sync_of(_RichInfoEnv, K, mode, text=text)

    def kept(step: tuple[Any, ...]) -> tuple[Any, ...]:
        if keys is None:
            return step
        entries = {k: v for key in keys for k, v in step[-1].items() if k in (key, f"_{key}")}
        if "final_info" in step[-1]:
            final = step[-1]["final_info"]
            finals = {k: v for key in keys for k, v in final.items() if k in (key, f"_{key}")}
            entries |= {k: v for k, v in step[-1].items() if k.endswith("final_obs")}
            entries |= {"final_info": finals, "_final_info": step[-1]["_final_info"]}
        return (*step[:-1], entries)

    ended_seen = 0
    try:
        assert_same(ours.reset(seed=2), kept(theirs.reset(seed=2)), "reset")
        ended = np.zeros(K, bool)
        for step in range(24):
            if mode is AutoresetMode.DISABLED and ended.any():
                reset = {"reset_mask": ended}
                assert_same(ours.reset(options=reset), kept(theirs.reset(options=reset)), f"reset at {step}")
            actions = np.full(K, step % 3, np.int64)
            got = ours.step(actions)
            assert_same(got, kept(theirs.step(actions)), f"step {step}")
            ended = got[2] | got[3]
            ended_seen += int(0 < ended.sum() < K)
    finally:
        ours.close()
        theirs.close()
    assert ended_seen >= 4, ended_seen  # some sub-envs ended, not all: masks with gaps, partial resets
    if num_workers == 0:
        assert whole and all(whole) != text, whole  # whole unless an entry is a string


def test_the_central_engine_keeps_a_batched_env_s_info_entries_as_its_single_envs() -> None:
    """Central reads the workers' infos env by env: whole infos give it the entries per-env material gives."""

    def batches(env: Any) -> list[Any]:
        collector = pycollect.Collector(
            env,
            None,
            frames_per_batch=2 * K * 10,
            envs_per_worker=K,
            num_workers=2,
            engine="central",
            seed=7,
            info_keys=["t", "score", "even"],
            max_frames_per_traj=4,
        )
        try:
            return [collector.next_batch() for _ in range(2)]
        finally:
            collector.shutdown()

    single = batches(_RichInfoEnv)
    batched = batches(functools.partial(_sync_of, _RichInfoEnv, K, AutoresetMode.NEXT_STEP))
    for ours, theirs in zip(batched, single, strict=True):
        for key in theirs.keys(True, True):
            assert torch.equal(ours[key], theirs[key]), key
    assert int(single[0]["next", "t"].max()) > 1 and bool(single[0]["next", "even"].any())


def _typed(value: Any) -> Any:
    """``value`` with each number as ``(dtype, value)``: a float like a numpy float64, an int16 unlike an int64."""
    if isinstance(value, dict):
        return {key: _typed(entry) for key, entry in value.items()}
    if isinstance(value, list | tuple):
        return [_typed(entry) for entry in value]
    if isinstance(value, np.ndarray):
        return (value.dtype.name, value.tolist())
    if isinstance(value, np.generic | bool | int | float):
        return (np.asarray(value).dtype.name, value.item() if isinstance(value, np.generic) else value)
    return value


def test_sb3_vec_env_gives_a_batched_env_s_infos_as_over_the_single_envs() -> None:
    """Each env's own info values (a reset's int16 beside a step's int64), not one array's for all."""
    from pycollect.vector import SB3VecEnv

    def run(env: Any) -> list[Any]:
        vec = SB3VecEnv(env, K, num_workers=2)
        try:
            vec.seed(6)
            steps = [([vec.reset()], _typed(vec.reset_infos))]
            kept = []  # the infos as returned: later steps must not change them
            for t in range(16):
                observations, rewards, dones, infos = vec.step(np.full(K, t % 3, np.int64))
                steps.append(([observations, rewards, dones], _typed([infos, vec.reset_infos])))
                kept.append(infos)
            assert [_typed([infos]) for infos in kept] == [step[1][:1] for step in steps[1:]]
            return steps
        finally:
            vec.close()

    single = run(_RichInfoEnv)
    batched = run(functools.partial(_sync_of, _RichInfoEnv, K // 2, AutoresetMode.NEXT_STEP))
    for n, ((arrays, infos), (their_arrays, their_infos)) in enumerate(zip(batched, single, strict=True)):
        for array, theirs in zip(arrays, their_arrays, strict=True):
            np.testing.assert_array_equal(array, theirs)
        assert infos == their_infos, n
    assert any("terminal_observation" in info for _, (infos, _) in single[1:] for info in infos)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("gaps", [True, False], ids=["gaps", "every-entry-everywhere"])
def test_combine_joins_groups_infos_as_gymnasiums_add_info_of_every_env(seed: int, gaps: bool) -> None:
    """Groups' vector infos, each merged by gymnasium over its envs, joined: gymnasium's merge of all the envs.

    Without gaps every group has the same entries, in the same order (joined end to end where
    their dtypes agree too); with gaps some envs lack some entries.
    """
    from pycollect._steps.infos import InfoMerger
    from pycollect.envs._vector_infos import combine

    rng = np.random.default_rng(seed)
    sizes = [int(n) for n in rng.integers(1, 5, size=3)]
    count = sum(sizes)
    # Each entry's type per group: a group's rows share a dtype, as a batched env's do.
    dtypes = {key: rng.choice(["int16", "int64", "float32", "bool"], size=len(sizes)) for key in ("a", "b", "c")}
    envs = []
    for group, size in enumerate(sizes):
        for _ in range(size):
            info: dict[str, Any] = {}
            for key, kinds in dtypes.items():
                if not gaps or rng.random() < 0.7:
                    value = np.asarray(rng.integers(0, 9)).astype(kinds[group])[()]
                    info[key] = bool(value) if kinds[group] == "bool" else value
            if not gaps or rng.random() < 0.5:
                info["nested"] = (
                    {"x": np.array([rng.random(), 1.0], np.float64)} if not gaps or rng.random() < 0.8 else {}
                )
            envs.append(info)

    def merged(infos: list[dict[str, Any]]) -> dict[str, Any]:
        merger, out = InfoMerger(len(infos)), {}
        for i, info in enumerate(infos):
            out = merger._add_info(out, info, i)
        return out

    offsets = np.cumsum([0, *sizes[:-1]]).tolist()
    parts = [(offset, merged(envs[offset : offset + size])) for offset, size in zip(offsets, sizes, strict=True)]
    assert_same(combine(parts, count), merged(envs), "combined")  # in order: joined end to end where they agree
    assert_same(combine(parts[::-1], count), merged(envs), "combined")  # any order: the first env's dtype wins
    # A group's infos in two parts of disjoint envs (a step's and a reset's), each over all the group's envs.
    halves = []
    for offset, size in zip(offsets, sizes, strict=True):
        for half in (0, 1):
            rows = [info if i % 2 == half else {} for i, info in enumerate(envs[offset : offset + size])]
            halves.append((offset, merged(rows)))
    assert_same(combine(halves, count), merged(envs), "combined halves")


class _JunkBehindMasks(VectorEnvAdapter):
    """A batched env whose info arrays hold junk where their masks say a sub-env has no entry (gymnasium: zeros)."""

    def step_batch(self, actions: Any) -> tuple[Any, Any, Any, Any, Any]:
        *result, infos = super().step_batch(actions)
        return (*result, _junk_behind_masks(infos))


def _junk_behind_masks(infos: Any) -> Any:
    out = {}
    for key, values in infos.items():
        mask = infos.get(f"_{key}")
        if isinstance(values, dict):
            values = _junk_behind_masks(values)
        elif isinstance(mask, np.ndarray) and isinstance(values, np.ndarray) and values.dtype != object:
            values = values.copy()
            values[~mask] = 7
        out[key] = values
    return out


@pytest.mark.parametrize(
    ("engine", "own"),
    [("inprocess", own) for own in COLLECTED] + [("workers", AutoresetMode.NEXT_STEP)],
    ids=lambda value: value if isinstance(value, str) else value.name,
)
def test_a_collector_keeps_a_batched_env_s_info_entries_whole_as_its_single_envs(
    engine: str, own: AutoresetMode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kept info entries (numbers, bools, an array, one with gaps) go into the step column whole, as the singles'."""
    from pycollect._steps.group import EnvGroup

    wholes: list[bool] = []
    store = EnvGroup._store_column

    def spy(group: EnvGroup, result: Any, t: int) -> list[int] | None:
        ended = store(group, result, t)
        wholes.append(ended is not None)
        return ended

    monkeypatch.setattr(EnvGroup, "_store_column", spy)
    workers = 0 if engine == "inprocess" else 2

    def batches(env: Any) -> list[Any]:
        collector = pycollect.Collector(
            env,
            None,
            frames_per_batch=max(1, workers) * K * 12,
            envs_per_worker=K,
            num_workers=workers,
            seed=3,
            max_frames_per_traj=4,
            info_keys=["t", "score", "even", "pos", "rare"],
        )
        try:
            return [collector.next_batch() for _ in range(2)]
        finally:
            collector.shutdown()

    def batched_env() -> BatchedEnv:
        return _JunkBehindMasks(_sync_of(_RichInfoEnv, K, own))

    single = batches(_RichInfoEnv)
    batched = batches(batched_env)
    for ours, theirs in zip(batched, single, strict=True):
        assert set(ours.keys(True, True)) == set(theirs.keys(True, True))
        for key in theirs.keys(True, True):
            assert ours[key].dtype == theirs[key].dtype and torch.equal(ours[key], theirs[key]), key
    rare = torch.cat([b["next", "rare"] for b in single])
    assert (rare == 0).any() and (rare != 0).any()  # an entry some steps lack: the default there
    assert bool(torch.cat([b["next", "truncated"] for b in single]).any())  # the limit cut episodes
    if engine == "inprocess":
        assert wholes and all(wholes), (wholes.count(True), len(wholes))


# -- env states, sub-env by sub-env -------------------------------------------------------


class _Ticks(BatchedEnv):
    """N tick counters; ``sub_env_state`` only where ``saves`` (a subclass below)."""

    single_observation_space = gym.spaces.Box(0, 100, (1,), np.float32)
    single_action_space = gym.spaces.Discrete(2)
    partial_reset = True

    def __init__(self, num_envs: int = 3) -> None:
        super().__init__()
        self.num_envs = num_envs
        self.ticks = np.zeros(num_envs, np.float32)

    def step_batch(self, actions: Any) -> Any:
        self.ticks += 1
        zeros = np.zeros(self.num_envs, bool)
        return self.ticks[:, None].copy(), np.ones(self.num_envs), zeros, zeros, {}

    def reset_batch(self, seeds: Any, mask: Any) -> Any:
        self.ticks[np.ones(self.num_envs, bool) if mask is None else mask] = 0
        return self.ticks[:, None].copy(), {}

    def close_batch(self) -> None:
        pass


class _SavedTicks(_Ticks):
    def sub_env_state(self, index: int) -> Any:
        return float(self.ticks[index])

    def set_sub_env_state(self, index: int, state: Any) -> None:
        self.ticks[index] = state


def test_a_batched_env_implementing_sub_env_state_saves_each_sub_env_apart() -> None:
    from pycollect.envs.state import get_env_state, set_env_state, snapshot_refusal

    ticks = _SavedTicks()
    views = ticks.views()
    assert snapshot_refusal(views[1]) is None
    ticks.step_batch(None)
    saved = get_env_state(views[1])
    ticks.step_batch(None)
    set_env_state(views[1], saved)
    assert ticks.ticks.tolist() == [2, 1, 2]  # sub-env 1 only


def test_a_batched_env_without_sub_env_states_is_refused_naming_it_and_the_way_out() -> None:
    from pycollect.envs.state import get_env_state, snapshot_refusal

    refusal = snapshot_refusal(_Ticks().views()[0])
    assert refusal is not None and "batched env _Ticks of 3 sub-envs cannot save" in refusal
    assert "sub_env_state(i)" in refusal
    entry_point = as_batched(gym.make_vec("CartPole-v1", 2, vectorization_mode="vector_entry_point"))
    assert "batched env CartPoleVectorEnv of 2 sub-envs cannot save" in str(snapshot_refusal(entry_point.views()[0]))
    with pytest.raises(pycollect.EnvStateError, match="CartPoleVectorEnv"):
        get_env_state(entry_point.views()[0])


def test_a_sync_vector_envs_sub_env_restores_with_its_pending_autoreset() -> None:
    from pycollect.envs.state import get_env_state, set_env_state

    def make() -> VectorEnvAdapter:
        return VectorEnvAdapter(SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(2)]))

    source, target = make(), make()
    source.env.reset(seed=[1, 2])
    target.env.reset(seed=[8, 9])
    actions = np.ones(2, np.int64)
    while not source.env._autoreset_envs[0]:  # sub-env 0 ended: it resets at its next step
        source.env.step(actions)
    set_env_state(target.views()[0], get_env_state(source.views()[0]))
    assert bool(target.env._autoreset_envs[0]) and not target.env._autoreset_envs[1]
    expected, got = source.env.step(actions), target.env.step(actions)
    np.testing.assert_array_equal(expected[0][0], got[0][0])  # the reset observation, from the same stream
    for _ in range(5):
        np.testing.assert_array_equal(source.env.step(actions)[0][0], target.env.step(actions)[0][0])


def test_a_snapshot_of_every_sub_env_plans_each_sub_env_a_fixed_number_of_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Linear in the sub-envs: asking every sub-env whether the whole batch can be saved made a
    # snapshot of 256 CartPoles take 0.9 s (quadratic) where it takes 8 ms.
    from pycollect.envs import state
    from pycollect.envs.state import get_env_state, snapshot_refusal

    plans = 0
    plan = state._plan

    def counted(env: Any) -> Any:
        nonlocal plans
        plans += 1
        return plan(env)

    monkeypatch.setattr(state, "_plan", counted)

    def plans_for(count: int) -> int:
        nonlocal plans
        batch = VectorEnvAdapter(SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(count)]))
        batch.env.reset(seed=list(range(count)))
        plans = 0
        for view in batch.views():
            assert snapshot_refusal(view) is None
            get_env_state(view)
        batch.close()
        return plans

    assert plans_for(32) == 4 * plans_for(8)
