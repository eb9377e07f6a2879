"""``pycollect.vector.SB3VecEnv`` against Stable-Baselines3's own ``DummyVecEnv``, step for step.

The comparisons build both over the same env functions, seed them alike (``seed()``, then
``reset()``), set the same reset options and step them with the same actions, and require
everything returned to be equal: observations (structure, dtypes, values), rewards (float32),
dones, the list of infos (keys in order, values, ``terminal_observation``,
``TimeLimit.truncated``) and ``reset_infos``. They run with the envs in this process and in
two worker processes. Then: the attribute methods with ``indices``, rendering, a worker
restart, bad input, and PPO learning CartPole on a small budget.
"""

from __future__ import annotations

import functools
import subprocess
import sys
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers import RecordEpisodeStatistics, TimeLimit
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv
from test_vector_semantics import _KeepInfo, assert_same
from test_vector_workers import CrashingEnv

from pycollect import (
    ActionError,
    ConfigError,
    UnsupportedSpaceError,
    VectorEnvClosedError,
    WorkerCrashedError,
)
from pycollect.testing.envs import CountingEnv, RaisingEnv, SpacesEnv
from pycollect.vector import SB3VecEnv

pytestmark = pytest.mark.timeout(120)

BACKENDS = {"inprocess": {"num_workers": 0}, "workers": {"num_workers": 2, "restart": "never"}}


class FlatDictEnv(SpacesEnv):
    """SpacesEnv with a flat Dict observation (SB3 refuses nested ones): a Box, a Discrete, a MultiBinary."""

    def __init__(self, action: str = "discrete") -> None:
        super().__init__("dict", action)
        inner = self.observation_space["inner"]
        self.observation_space = gym.spaces.Dict(
            {"position": self.observation_space["position"], "count": inner["count"], "bits": inner["bits"]}
        )

    def _obs(self) -> Any:
        nested = super()._obs()
        return {"position": nested["position"], **nested["inner"]}


class PaintedEnv(CountingEnv):
    """Renders an ``rgb_array`` image of CartPole's size that shows the env's step and base."""

    metadata = {"render_modes": ["rgb_array"]}  # noqa: RUF012  # gymnasium's class attribute

    def __init__(self, render_mode: str | None = "rgb_array") -> None:
        super().__init__(length=4)
        self.render_mode = render_mode

    def render(self) -> np.ndarray:
        image = np.zeros((400, 600, 3), np.uint8)  # 720,000 bytes: two would not fit one 1 MiB mailbox
        image[: self._t + 1, :, 0] = 255
        image[0, 0, 1] = int(self._base) % 256
        return image


class MarkedEnv(CountingEnv):
    """Records the marks ``mark`` is given; ``compute`` is a method to read with ``get_attr``."""

    def __init__(self) -> None:
        super().__init__(length=5)
        self.marks: list[str] = []

    def mark(self, tag: str, *, times: int = 1) -> str:
        self.marks.extend([tag] * times)
        return tag * times

    def compute(self) -> float:
        return self._base + 0.5


def marked_in_time_limit() -> gym.Env[Any, Any]:
    """A MarkedEnv in a TimeLimit wrapper, as ``gym.make`` would wrap it."""
    return TimeLimit(MarkedEnv(), max_episode_steps=50)


# name -> (env function, SB3VecEnv's env and env_kwargs)
ENVS: dict[str, tuple[Callable[[], gym.Env[Any, Any]], Any, dict[str, Any] | None]] = {
    "counting": (functools.partial(CountingEnv, length=3), CountingEnv, {"length": 3}),
    "box-discrete": (functools.partial(SpacesEnv, "box", "discrete"), SpacesEnv, {"observation": "box"}),
    "discrete-box": (
        functools.partial(SpacesEnv, "discrete", "box"),
        SpacesEnv,
        {"observation": "discrete", "action": "box"},
    ),
    "multibinary-multidiscrete": (
        functools.partial(SpacesEnv, "multibinary", "multidiscrete"),
        SpacesEnv,
        {"observation": "multibinary", "action": "multidiscrete"},
    ),
    "flatdict-discrete": (FlatDictEnv, FlatDictEnv, None),
    "tuple-discrete": (functools.partial(SpacesEnv, "tuple", "discrete"), SpacesEnv, {"observation": "tuple"}),
}


def assert_obs(ours: Any, theirs: Any, where: str) -> None:
    """Observations as SB3 gives them: an OrderedDict for a Dict space, keys in order."""
    if isinstance(theirs, OrderedDict):
        assert type(ours) is OrderedDict and list(ours) == list(theirs), f"{where}: {ours!r}"
    assert_same(ours, theirs, where)


def assert_infos(ours: list[dict[str, Any]], theirs: list[dict[str, Any]], where: str) -> None:
    """Lists of info dicts, keys in the same order.

    ``TimeLimit.truncated`` is a Python bool here, where DummyVecEnv's is whatever ``truncated
    and not terminated`` gives for the env's flags (a numpy bool for numpy flags): equal values.
    """
    assert isinstance(ours, list) and len(ours) == len(theirs), f"{where}: {ours!r}"
    for n, (mine, other) in enumerate(zip(ours, theirs, strict=True)):
        assert list(mine) == list(other), f"{where}[{n}]: keys {list(mine)} != {list(other)}"
        for key in other:
            if key == "TimeLimit.truncated":
                assert type(mine[key]) is bool and mine[key] == other[key], f"{where}[{n}][{key!r}]"
            else:
                assert_same(mine[key], other[key], f"{where}[{n}][{key!r}]")


def _pair(name: str, backend: str, num_envs: int = 4) -> tuple[SB3VecEnv, DummyVecEnv]:
    function, env, env_kwargs = ENVS[name]
    theirs = DummyVecEnv([function] * num_envs)
    ours = SB3VecEnv(env, num_envs, env_kwargs=env_kwargs, **BACKENDS[backend])
    return ours, theirs


def _compare_reset(ours: VecEnv, theirs: VecEnv, where: str) -> None:
    assert_obs(ours.reset(), theirs.reset(), where)
    assert_infos(ours.reset_infos, theirs.reset_infos, f"{where}: reset_infos")


def _run(ours: SB3VecEnv, theirs: DummyVecEnv, steps: int, seed: int) -> dict[str, int]:
    """Drive both alike; how often episodes ended (and were truncated), to show the test saw it."""
    seen = {"dones": 0, "time_limits": 0, "option_groups": 0}
    assert ours.seed(seed) == theirs.seed(seed)
    _compare_reset(ours, theirs, "reset")
    theirs.action_space.seed(seed)
    for step in range(steps):
        if step == steps // 2:  # seeds again, and options that differ between envs
            ours.seed(seed + 100)
            theirs.seed(seed + 100)
            options = [{"x": 1}, {"x": 1}, {}, {"y": np.arange(2)}][: ours.num_envs]
            ours.set_options(options)
            theirs.set_options(options)
            seen["option_groups"] = len(ours._option_groups())
            _compare_reset(ours, theirs, f"reset at {step}")
            assert ours._options == [{}] * ours.num_envs and ours._seeds == [None] * ours.num_envs  # used once
        actions = np.stack([theirs.action_space.sample() for _ in range(ours.num_envs)])
        ours.step_async(actions)
        theirs.step_async(actions)
        obs, rewards, dones, infos = ours.step_wait()
        their_obs, their_rewards, their_dones, their_infos = theirs.step_wait()
        assert_obs(obs, their_obs, f"step {step}: observations")
        assert_same(rewards, their_rewards, f"step {step}: rewards")
        assert_same(dones, their_dones, f"step {step}: dones")
        assert_infos(infos, their_infos, f"step {step}: infos")
        assert_infos(ours.reset_infos, theirs.reset_infos, f"step {step}: reset_infos")
        seen["dones"] += int(dones.sum())
        seen["time_limits"] += sum(info["TimeLimit.truncated"] for info in infos)
    return seen


@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("name", list(ENVS))
def test_step_for_step_equal_to_dummy_vec_env(name: str, backend: str) -> None:
    ours, theirs = _pair(name, backend)
    try:
        assert (ours.observation_space, ours.action_space) == (theirs.observation_space, theirs.action_space)
        assert (ours.render_mode, ours.metadata) == (theirs.render_mode, theirs.metadata)
        seen = _run(ours, theirs, steps=30, seed=5)
    finally:
        ours.close()
        theirs.close()
    assert seen["dones"] >= 15 and seen["option_groups"] == 3, seen
    if name != "counting":  # CountingEnv only terminates
        assert seen["time_limits"] >= 2, seen


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_info_keys_keep_those_entries_as_dummy_vec_env_over_envs_that_return_only_them(backend: str) -> None:
    """``info_keys=("episode",)``: SB3's ``Monitor`` entry, plus what the VecEnv itself adds."""
    theirs = DummyVecEnv([lambda: _KeepInfo(SpacesEnv("box", "discrete"), ("episode",))] * 4)
    ours = SB3VecEnv(SpacesEnv, 4, env_kwargs={"observation": "box"}, info_keys=("episode",), **BACKENDS[backend])
    try:
        seen = _run(ours, theirs, steps=30, seed=5)
    finally:
        ours.close()
        theirs.close()
    assert seen["dones"] >= 15, seen


@pytest.fixture(params=list(BACKENDS))
def marked(request: pytest.FixtureRequest) -> Iterator[tuple[SB3VecEnv, DummyVecEnv]]:
    """Four MarkedEnvs in TimeLimit wrappers: ours (in this process, or two workers) and DummyVecEnv."""
    ours = SB3VecEnv(marked_in_time_limit, 4, **BACKENDS[request.param])
    theirs = DummyVecEnv([marked_in_time_limit] * 4)
    try:
        yield ours, theirs
    finally:
        ours.close()
        theirs.close()


def test_env_method_runs_on_the_envs_of_indices_only(marked: tuple[SB3VecEnv, DummyVecEnv]) -> None:
    for venv in marked:
        assert venv.env_method("mark", "a", indices=3) == ["a"]
        assert venv.env_method("mark", "b", times=2, indices=[2, 0]) == ["bb", "bb"]
        assert venv.env_method("mark", "c", indices=-1) == ["c"]  # counted from the end, as list indices
        assert venv.env_method("mark", "d", indices=np.array([1])) == ["d"]
        assert venv.get_attr("marks") == [["b", "b"], ["d"], ["b", "b"], ["a", "c"]]
    ours, theirs = marked
    assert ours.env_method("mark", "e") == theirs.env_method("mark", "e") == ["e"] * 4


def test_get_attr_set_attr_has_attr_and_env_is_wrapped_as_dummy_vec_env(
    marked: tuple[SB3VecEnv, DummyVecEnv],
) -> None:
    ours, theirs = marked
    for venv in marked:
        venv.seed(3)
        venv.reset()
        # set_attr sets on the env as built (its TimeLimit wrapper), so get_attr finds the
        # wrapper's value while the MarkedEnv inside keeps its own length: SB3's behaviour.
        venv.set_attr("length", 2, indices=[1, 2])
        assert venv.get_attr("length") == [5, 2, 2, 5]
        assert [env.length for env in venv.get_attr("unwrapped", indices=[1, 2])] == [5, 5]
        assert venv.get_attr("length", indices=2) == [2]
        computes = venv.get_attr("compute", indices=[0, 3])  # a method, returned, not called
        assert all(callable(compute) for compute in computes)
        assert venv.env_is_wrapped(TimeLimit) == [True] * 4
        assert venv.env_is_wrapped(RecordEpisodeStatistics, indices=[1]) == [False]
        assert venv.has_attr("marks") and not venv.has_attr("no_such_attribute")
        with pytest.raises(AttributeError, match="no_such_attribute"):
            venv.get_attr("no_such_attribute", indices=[2])
    assert [compute() for compute in ours.get_attr("compute")] == [compute() for compute in theirs.get_attr("compute")]
    _run(ours, theirs, steps=12, seed=4)  # the envs still step alike: every episode 5 steps long


def test_get_images_and_render_as_dummy_vec_env() -> None:
    # Two workers of two envs: a worker's two images would not fit its mailbox together.
    for backend in BACKENDS.values():
        ours = SB3VecEnv(PaintedEnv, 4, **{**backend})
        theirs = DummyVecEnv([PaintedEnv] * 4)
        try:
            for venv in (ours, theirs):
                venv.seed(1)
                venv.reset()
                venv.step(np.array([0, 1, 2, 0]))
            images, their_images = ours.get_images(), theirs.get_images()
            assert len(images) == len(their_images) == 4
            for n, (image, theirs_image) in enumerate(zip(images, their_images, strict=True)):
                assert_same(image, theirs_image, f"image {n}")
            assert_same(ours.render("rgb_array"), theirs.render("rgb_array"), "tiled")
            assert ours.render("rgb_array").shape == (800, 1200, 3)
        finally:
            ours.close()
            theirs.close()
    ours = SB3VecEnv(PaintedEnv, 2, num_workers=0, env_kwargs={"render_mode": None})
    try:
        with pytest.warns(UserWarning, match="render mode is None"):
            assert ours.get_images() == [None, None]
    finally:
        ours.close()


@pytest.mark.timeout(120)
def test_a_restarted_worker_ends_its_envs_episodes_with_a_terminal_observation() -> None:
    venv = SB3VecEnv(CrashingEnv, 4, num_workers=2)  # worker 1 exits at step 3 of its first episode
    try:
        venv.seed(0)
        obs = venv.reset()
        for _ in range(2):
            last = obs
            obs, rewards, dones, infos = venv.step(np.zeros(4, np.int64))
            assert not dones.any()
        last = obs
        obs, rewards, dones, infos = venv.step(np.zeros(4, np.int64))
        assert dones.tolist() == [False, False, True, True]
        assert rewards.tolist() == [3.0, 3.0, 0.0, 0.0]
        for n in (2, 3):
            assert infos[n]["worker_restarted"] is True and infos[n]["TimeLimit.truncated"] is True
            np.testing.assert_array_equal(infos[n]["terminal_observation"], last[n])
            assert obs[n].tolist()[1] == 0.0  # a new episode's first observation
        assert venv.workers[1].generation == 2
        obs, rewards, dones, infos = venv.step(np.zeros(4, np.int64))
        assert obs[:, 1].tolist() == [4.0, 4.0, 1.0, 1.0] and not dones.any()
    finally:
        venv.close()


def test_a_crash_with_restart_never_raises_what_the_env_raised() -> None:
    venv = SB3VecEnv(RaisingEnv, 2, num_workers=1, env_kwargs={"fail_at": 2}, restart="never")
    try:
        venv.reset()
        venv.step(np.zeros(2, np.int64))
        with pytest.raises(WorkerCrashedError) as raised:
            venv.step(np.zeros(2, np.int64))
        assert "ZeroDivisionError: boom at step 2" in str(raised.value.error)
    finally:
        venv.close()


def test_bad_input_raises_named_errors_before_anything_is_stepped() -> None:
    venv = SB3VecEnv(CountingEnv, 4, num_workers=2, restart="never")
    try:
        with pytest.raises(ConfigError, match="before reset"):
            venv.step(np.zeros(4, np.int64))
        venv.reset()
        with pytest.raises(ConfigError, match="step_wait\\(\\) without step_async\\(\\)"):
            venv.step_wait()
        with pytest.raises(ActionError, match="shape \\(3,\\)"):
            venv.step_async(np.zeros(3, np.int64))
        with pytest.raises(ActionError, match="action of env 2 is 3"):
            venv.step_async(np.array([0, 1, 3, 0]))
        with pytest.raises(ActionError, match="dtype float64"):
            venv.step_async(np.zeros(4))
        with pytest.raises(ConfigError, match="step_wait\\(\\) without step_async"):  # refused actions are not kept
            venv.step_wait()
        for seeds in ([-1, 0, 1, 2], [0.5, None, None, None], [True, 1, 2, 3]):
            venv._seeds = seeds
            with pytest.raises(ConfigError, match="is not None or an int of 0 or more"):
                venv.reset()
        venv.seed(0)
        venv.set_options([{}, {}])
        with pytest.raises(ConfigError, match="2 option dicts for 4 envs"):
            venv.reset()
        venv.set_options({"a": 1})
        for indices, message in [(4, "out of range"), ([-5], "out of range"), ([True], "not an int"), ("0", "ints")]:
            with pytest.raises(ConfigError, match=message):
                venv.env_method("reset", indices=indices)
        obs, *_ = venv.step(np.zeros(4, np.int64))  # nothing refused above stepped or reset an env
        assert obs[:, 1].tolist() == [1.0] * 4
    finally:
        venv.close()
    venv.close()  # a second close does nothing
    for call in (venv.reset, lambda: venv.step_async(np.zeros(4, np.int64)), lambda: venv.get_attr("length")):
        with pytest.raises(VectorEnvClosedError, match="closed"):
            call()


def test_bad_arguments_are_refused_before_any_worker_starts() -> None:
    with pytest.raises(ConfigError, match="num_envs=3 does not split over num_workers=2"):
        SB3VecEnv(CountingEnv, 3, num_workers=2)
    with pytest.raises(ConfigError, match="restart_policy"):
        SB3VecEnv(CountingEnv, 2, num_workers=1, restart_policy="never")
    with pytest.raises(UnsupportedSpaceError, match="nested observation spaces"):
        SB3VecEnv(SpacesEnv, 2, num_workers=1, env_kwargs={"observation": "dict"})


def test_importing_pycollect_vector_imports_neither_sb3_nor_torch() -> None:
    code = "import sys, pycollect, pycollect.vector; print('stable_baselines3' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["False", "False"]
    import pycollect.vector

    assert pycollect.vector.SB3VecEnv is SB3VecEnv and issubclass(SB3VecEnv, VecEnv)


@pytest.mark.timeout(180)
def test_ppo_learns_cartpole_on_sb3_vec_env() -> None:
    # Measured on the 2-core development machine (shared, load 2.5-3.3): 16,384 steps of PPO
    # over 8 envs in 2 workers take 19-24 s; the mean return of the last 100 training
    # episodes was 133.9 (seed 0, the same in every run: it repeats exactly with a seed),
    # 147.8 (seed 2) and 149.7 (seed 3); deterministic evaluation over 16 episodes 200.8,
    # 496.6 and 167.6. Random play's mean return is ~22.
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import VecMonitor

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small networks; the other core steps the envs
    venv = VecMonitor(SB3VecEnv("CartPole-v1", 8, num_workers=2))
    try:
        model = PPO(
            "MlpPolicy",
            venv,
            n_steps=32,
            batch_size=256,
            gae_lambda=0.8,
            gamma=0.98,
            n_epochs=10,
            ent_coef=0.0,
            learning_rate=1e-3,
            seed=0,
            device="cpu",
        )
        model.learn(16_384)
        training = float(np.mean([episode["r"] for episode in model.ep_info_buffer]))
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # e.g. a missing Monitor: VecMonitor's infos must be seen
            evaluation, _ = evaluate_policy(model, venv, n_eval_episodes=16, deterministic=True)
    finally:
        venv.close()
        torch.set_num_threads(threads)
    assert training >= 100, training
    assert evaluation >= 100, evaluation


@pytest.mark.timeout(120)
def test_the_docs_example_runs() -> None:
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "vector.md").read_text()
    (block,) = re.findall(r"<!-- test: sb3 -->\n```python\n(.*?)```", text, re.S)
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # torch's threads spin: on 2 busy cores, learn(512) took 15 s with 2, 0.7 s with 1
    namespace: dict[str, Any] = {}
    try:
        exec(compile(block, "docs/vector.md", "exec"), namespace)
    finally:
        torch.set_num_threads(threads)
    assert namespace["model"].num_timesteps == 512 and namespace["vec_env"].venv.closed
