"""``engine="device"`` over gymnax: :class:`GymnaxDeviceEnv` alone, and ``Collector("gymnax:...", engine="device")``.

The reference is the host path over the same env: :class:`GymnaxBatchedEnv` (numpy, stepped by
``engine="inprocess"``) vmaps the same functions of one sub-env, so with the same seeds and the
same actions the two give the same values, bit for bit. The collectors' *random* actions are
drawn apart (the device engine with a ``torch.Generator`` on the env's device, the host engines
with numpy), so batches are compared value for value under a deterministic policy, and by layout
only with random actions.

CUDA: the tests that take ``device`` run on every device both torch and JAX have here (the CPU,
and a GPU where torch sees one and JAX is a CUDA build); nothing is skipped where there is none.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import jax
import numpy as np
import pytest
import torch
from gymnax_helpers import fell, is_reset
from tensordict import TensorDictBase

import pycollect
import pycollect.plugins
from pycollect import Collector, CollectorConfig
from pycollect.envs import DeviceBatchedEnv, is_device_env
from pycollect.exceptions import ConfigError, EnvStateError, UnknownEnvError
from pycollect.testing.device_envs import SeededArgmax as Argmax
from pycollect.testing.device_envs import forbid_host_transfers
from pycollect_jax import GymnaxBackend, GymnaxBatchedEnv, GymnaxDeviceEnv
from pycollect_jax.device import dlpack_importer, jax_device, torch_device

pytestmark = pytest.mark.timeout(120)

SPEC = "gymnax:CartPole-v1"
N, T = 8, 40


def _jax_has_gpu() -> bool:
    try:
        return bool(jax.devices("gpu"))
    except RuntimeError:
        return False


DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() and _jax_has_gpu() else [])]


def device_env(num_envs: int = N, device: str | None = None, **env_kwargs: Any) -> GymnaxDeviceEnv:
    return GymnaxBackend().make_device(
        "CartPole-v1", env_kwargs, num_envs, None if device is None else torch.device(device)
    )


def host_env(num_envs: int = N, **env_kwargs: Any) -> GymnaxBatchedEnv:
    return GymnaxBackend().make_batched("CartPole-v1", env_kwargs, num_envs)


def seeds(start: int = 0, count: int = N) -> list[int]:
    return list(range(start, start + count))


def random_actions(count: int, seed: int = 0, num_envs: int = N, device: str = "cpu") -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 2, (num_envs,), generator=generator).to(device) for _ in range(count)]


def push_right(device: str = "cpu") -> torch.Tensor:
    return torch.ones(N, dtype=torch.int64, device=device)  # the pole falls (left) within ~10 steps


def run(env: GymnaxDeviceEnv, actions: Sequence[torch.Tensor]) -> list[tuple[torch.Tensor, ...]]:
    """Each step's outputs, copied (on the CPU) so that later steps cannot touch them."""
    return [tuple(value.cpu().clone() for value in env.step(action)) for action in actions]


def cpu(value: torch.Tensor) -> np.ndarray:
    return value.cpu().numpy()


# -- the env alone: what it is ------------------------------------------------------------------


def test_a_device_env_with_the_host_envs_spaces_on_the_cpu_by_default() -> None:
    env, host = device_env(), host_env()
    assert isinstance(env, DeviceBatchedEnv) and is_device_env(env) and not is_device_env(host)
    assert env.device == torch.device("cpu") and env.jax_device == jax.devices("cpu")[0]
    assert env.num_envs == N
    assert env.single_observation_space == host.single_observation_space
    assert env.single_action_space == host.single_action_space == gym.spaces.Discrete(2)
    assert env.describe() == "gymnax CartPole-v1 of 8 sub-envs on cpu"


@pytest.mark.parametrize("device", DEVICES)
def test_every_output_is_a_tensor_of_the_engines_dtype_and_shape_on_the_device(device: str) -> None:
    env = device_env(device=device)
    here = torch.device(device).type
    obs = env.reset(seeds())
    assert isinstance(obs, torch.Tensor) and obs.shape == (N, 4) and obs.dtype == torch.float32
    observation, reward, terminated, truncated, final = env.step(push_right(device))
    for value in (obs, observation, reward, terminated, truncated, final):
        assert value.device.type == here
    assert observation.shape == final.shape == (N, 4) and observation.dtype == final.dtype == torch.float32
    assert reward.shape == (N,) and reward.dtype == torch.float32
    assert terminated.shape == truncated.shape == (N,)
    assert terminated.dtype == truncated.dtype == torch.bool


def test_on_the_cpu_tensors_and_jax_arrays_share_their_memory_both_ways() -> None:
    env = device_env()
    obs = env.reset(seeds())
    assert isinstance(obs, torch.Tensor)
    assert obs.data_ptr() == env._obs.unsafe_buffer_pointer()  # the env's own JAX array, no copy
    observation, *_ = env.step(push_right())
    assert observation.data_ptr() == env._obs.unsafe_buffer_pointer()
    # a write through the tensor is seen by the JAX array (the same bytes; only a test writes there)
    observation[0, 0] = 123.0
    assert float(env._obs[0, 0]) == 123.0
    # actions: the int64 tensor's int32 words are imported as they are, JAX reads the tensor's memory
    actions = torch.arange(N, dtype=torch.int64) % 2
    imported = env._to_jax(actions.view(torch.int32))
    assert imported.unsafe_buffer_pointer() == actions.data_ptr()
    assert imported.dtype == np.int32 and imported.shape == (2 * N,)
    np.testing.assert_array_equal(np.asarray(imported).reshape(N, 2)[:, 0], actions.numpy())


def test_the_private_importer_and_jaxs_public_from_dlpack_import_the_same_memory(monkeypatch: Any) -> None:
    place = jax.devices("cpu")[0]
    fast = dlpack_importer(torch.device("cpu"), place)
    assert fast is not jax.dlpack.from_dlpack  # this JAX has the import underneath from_dlpack
    tensor = torch.tensor([True, False, True, True])
    for importer in (fast, jax.dlpack.from_dlpack):
        array = importer(tensor)
        assert array.unsafe_buffer_pointer() == tensor.data_ptr() and array.dtype == np.bool_
        np.testing.assert_array_equal(np.asarray(array), tensor.numpy())
    # without the private function (another JAX): the public one, and the env steps the same
    real = importlib.import_module

    def without_private(name: str, *args: Any) -> Any:
        if name == "jax._src.lib":
            raise ImportError(name)
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", without_private)
    assert dlpack_importer(torch.device("cpu"), place) is jax.dlpack.from_dlpack
    public = device_env()
    monkeypatch.undo()
    private = device_env()
    assert public._to_jax is jax.dlpack.from_dlpack and private._to_jax is not jax.dlpack.from_dlpack
    for env in (public, private):
        env.reset(seeds())
    actions = random_actions(30)
    for x, y in zip(run(public, actions), run(private, actions), strict=True):
        assert all(torch.equal(a, b) for a, b in zip(x, y, strict=True))


# -- seeds ------------------------------------------------------------------------------------------


def test_the_same_seeds_give_the_same_episodes_whatever_the_entropy_before() -> None:
    a, b = device_env(), device_env()  # built from fresh entropy each
    b.reset(seeds(100))
    b.step(push_right())  # b's streams moved on before its seeded reset
    assert torch.equal(a.reset(seeds()), b.reset(seeds()))
    actions = random_actions(80)
    for x, y in zip(run(a, actions), run(b, actions), strict=True):
        assert all(torch.equal(u, v) for u, v in zip(x, y, strict=True))
    # an unseeded reset goes on with each sub-env's own stream: the same for both, and new states
    again_a, again_b = a.reset(None), b.reset(None)
    assert torch.equal(again_a, again_b)
    assert not torch.equal(again_a, device_env().reset(seeds()))
    assert not torch.equal(device_env().reset(seeds(1)), device_env().reset(seeds()))  # other seeds, other starts


def test_seed_i_starts_sub_env_i_from_prng_key_of_it_as_the_host_env_does() -> None:
    given = [0, 1, 7, 2**31 + 5, 2**32 - 1, 2**40 + 5, 12, 13]
    ours = device_env().reset(given)
    theirs, _ = host_env().reset_batch(given, None)
    assert isinstance(ours, torch.Tensor)
    np.testing.assert_array_equal(cpu(ours), theirs)
    assert len({row.tobytes() for row in cpu(ours)}) == N


def test_bad_seeds_are_refused_by_value() -> None:
    env = device_env()
    with pytest.raises(ConfigError, match="got 3 seeds for 8 sub-envs"):
        env.reset([1, 2, 3])
    with pytest.raises(ConfigError, match=r"seed -1 of sub-env 2"):
        env.reset([0, 1, -1, 3, 4, 5, 6, 7])
    with pytest.raises(ConfigError, match=r"seed 1.5 of sub-env 0"):
        env.reset([1.5, *range(1, N)])  # type: ignore[list-item]


# -- steps: the host env's values, SAME_STEP ----------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_the_same_seeds_and_actions_give_the_host_envs_values_bit_for_bit(device: str) -> None:
    ours, theirs = device_env(device=device), host_env()
    np.testing.assert_array_equal(cpu(ours.reset(seeds())), theirs.reset_batch(seeds(), None)[0])
    ended = 0
    for action in random_actions(120, device=device):
        observation, reward, terminated, truncated, final = ours.step(action)
        obs, rew, term, trunc, infos = theirs.step_batch(cpu(action))
        np.testing.assert_array_equal(cpu(observation), obs)
        np.testing.assert_array_equal(cpu(reward), rew)
        np.testing.assert_array_equal(cpu(terminated), term)
        np.testing.assert_array_equal(cpu(truncated), trunc)
        if "final_obs" in infos:
            done = infos["_final_obs"]
            np.testing.assert_array_equal(cpu(final)[done], infos["final_obs"][done])
            ended += int(done.sum())
    assert ended > N  # episodes ended and started again along the way


def test_a_sub_env_whose_pole_falls_returns_its_last_observation_apart_and_a_reset_one() -> None:
    env = device_env()
    obs = env.reset(seeds())
    assert isinstance(obs, torch.Tensor)
    seen = np.zeros(N, bool)
    for _ in range(40):
        previous = obs.clone()
        obs, reward, terminated, truncated, final = env.step(push_right())
        observation, last, term = cpu(obs), cpu(final), cpu(terminated)
        assert not cpu(truncated).any()
        assert torch.equal(reward, torch.ones(N))  # the falling step still pays 1
        assert fell(last[term]).all() and not fell(observation).any()
        assert is_reset(observation[term]).all()  # the next episode's first observation
        np.testing.assert_array_equal(last[~term], observation[~term])  # elsewhere: the step's own
        assert (np.sign(last[term, 2]) == np.sign(cpu(previous)[term, 2])).all()  # it kept falling that way
        seen |= term
    assert seen.all()


def test_the_time_limit_is_a_truncation() -> None:
    env = device_env(params={"max_steps_in_episode": 5})
    env.reset(seeds())
    for t in range(1, 13):  # alternate pushes keep the pole up
        obs, _, terminated, truncated, final = env.step(torch.full((N,), t % 2, dtype=torch.int64))
        assert not terminated.any()
        assert bool(truncated.all()) == (t % 5 == 0) and bool(truncated.any()) == (t % 5 == 0)
        if t % 5 == 0:
            assert is_reset(cpu(obs)).all() and not is_reset(cpu(final)).all()


def test_a_box_action_and_a_discrete_observation() -> None:
    pendulum = GymnaxBackend().make_device("Pendulum-v1", {}, 4, None)
    assert pendulum.single_action_space == gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
    pendulum.reset(seeds(count=4))
    ends = [pendulum.step(torch.zeros(4, 1))[2:4] for _ in range(200)]
    assert not any(bool(terminated.any()) for terminated, _ in ends)
    assert all(bool(truncated.all()) == (t == 199) for t, (_, truncated) in enumerate(ends))
    lake = GymnaxBackend().make_device("FrozenLake-misc", {}, 4, None)
    assert lake.single_observation_space == gym.spaces.Discrete(16, dtype=np.int32)
    obs = lake.reset(seeds(count=4))
    assert isinstance(obs, torch.Tensor) and obs.shape == (4,) and obs.dtype == torch.int32
    step = lake.step(torch.tensor([0, 1, 2, 3]))
    assert step[0].dtype == step[4].dtype == torch.int32


def test_each_jitted_function_is_compiled_once() -> None:
    env = device_env()
    env.reset(seeds())
    for n, action in enumerate(random_actions(60)):
        env.step(action)
        if n % 7 == 0:
            env.reset_envs(torch.arange(N) % 2 == 0)
            env.rollout(torch.stack(random_actions(T, seed=n)))
    env.reset(None)
    for function in (env._step, env._reset, env._reset_masked, env._rollout):
        assert function._cache_size() == 1  # type: ignore[attr-defined]


# -- whole rollouts ------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_a_rollout_gives_the_values_of_its_steps_bit_for_bit_and_goes_on_from_where_they_would(device: str) -> None:
    rolled, stepped = device_env(device=device), device_env(device=device)
    for env in (rolled, stepped):
        env.reset(seeds())
    actions = random_actions(3 * T, device=device)
    for start in (0, T):  # two rollouts in a row: the second goes on from the first's state and keys
        rows = actions[start : start + T]
        steps = run(stepped, rows)
        out = rolled.rollout(torch.stack(rows))
        assert all(value.device.type == torch.device(device).type for value in out)
        for n, value in enumerate(out):
            assert value.shape[0] == T
            assert torch.equal(value.cpu(), torch.stack([step[n] for step in steps])), (start, n)
    assert bool(out[2].any())  # poles fell within it
    mask = torch.arange(N, device=device) % 3 == 0
    assert torch.equal(rolled.reset_envs(mask).cpu(), stepped.reset_envs(mask).cpu())
    for ours, theirs in zip(run(rolled, actions[2 * T :]), run(stepped, actions[2 * T :]), strict=True):
        assert all(torch.equal(x, y) for x, y in zip(ours, theirs, strict=True))


def test_a_rollout_of_box_actions_gives_the_values_of_its_steps() -> None:
    rolled, stepped = (GymnaxBackend().make_device("Pendulum-v1", {}, 4, None) for _ in range(2))
    for env in (rolled, stepped):
        env.reset(seeds(count=4))
    actions = torch.rand(T, 4, 1, generator=torch.Generator().manual_seed(0)) * 4 - 2
    steps = run(stepped, list(actions))
    for n, value in enumerate(rolled.rollout(actions)):
        assert torch.equal(value, torch.stack([step[n] for step in steps])), n


class SteppedGymnax(GymnaxDeviceEnv):
    """A gymnax device env without a rollout: the engine steps it one step at a time."""

    rollout = DeviceBatchedEnv.rollout


def stepped_gymnax(num_envs: int) -> SteppedGymnax:
    env, params = importlib.import_module("gymnax").make("CartPole-v1")
    return SteppedGymnax(env, params, num_envs, name="CartPole-v1")


@pytest.mark.parametrize("settings", [{}, {"reset_at_each_iter": True}], ids=["plain", "reset-each-iter"])
def test_random_batches_from_rollouts_equal_the_step_by_step_paths_value_for_value(settings: dict[str, Any]) -> None:
    ours = batches("device", **settings)
    with Collector(
        stepped_gymnax,
        None,
        engine="device",
        envs_per_worker=N,
        frames_per_batch=N * T,
        env_kwargs={"num_envs": N},
        seed=0,
        **settings,
    ) as collector:
        theirs = [collector.next_batch() for _ in range(len(ours))]
    for n, (x, y) in enumerate(zip(ours, theirs, strict=True)):
        assert_same_layout(x, y)
        for key, value in leaves(y).items():
            assert torch.equal(leaves(x)[key], value), f"batch {n}, {key}"
    assert ours[-1]["next", "done"].any()


# -- partial resets by mask ------------------------------------------------------------------------


def test_reset_envs_resets_the_sub_envs_of_the_mask_as_the_host_envs_partial_reset_does() -> None:
    env, twin, host = device_env(), device_env(), host_env()
    actions = random_actions(30)
    for e in (env, twin):
        e.reset(seeds())
        run(e, actions[:4])
    host.reset_batch(seeds(), None)
    for action in actions[:4]:
        host.step_batch(action.numpy())
    before = env._obs
    mask = torch.zeros(N, dtype=torch.bool)
    mask[[1, 4]] = True
    obs = env.reset_envs(mask)
    assert isinstance(obs, torch.Tensor)
    expected, _ = host.reset_batch(None, mask.numpy())  # the host env's partial reset, unseeded
    np.testing.assert_array_equal(cpu(obs), expected)
    np.testing.assert_array_equal(cpu(obs)[~mask], np.asarray(before)[~mask])
    assert is_reset(cpu(obs)[mask]).all() and not np.array_equal(cpu(obs)[mask], np.asarray(before)[mask])
    # an empty mask changes nothing, key streams included
    keys = np.asarray(env._keys).copy()
    assert torch.equal(env.reset_envs(torch.zeros(N, dtype=torch.bool)), obs)
    np.testing.assert_array_equal(np.asarray(env._keys), keys)
    # the others step on exactly as their twins, which were never reset
    for x, y in zip(run(env, actions[4:]), run(twin, actions[4:]), strict=True):
        for u, v in zip(x[:4], y[:4], strict=True):
            assert torch.equal(u[~mask], v[~mask])


# -- devices --------------------------------------------------------------------------------------


def test_devices_map_to_jaxs_and_others_are_refused_by_name() -> None:
    assert torch_device(None) == torch_device("cpu") == torch.device("cpu")
    assert jax_device(torch.device("cpu")) == jax.devices("cpu")[0]
    with pytest.raises(ConfigError, match="device 'meta' for a gymnax device env"):
        torch_device("meta")
    with pytest.raises(ConfigError, match="no torch device"):
        torch_device("nowhere")
    cuda = torch_device("cuda")
    assert cuda.type == "cuda" and cuda.index is not None
    if _jax_has_gpu():
        gpu = jax_device(cuda)
        assert gpu.platform == "gpu" and getattr(gpu, "local_hardware_id", cuda.index) == cuda.index
    else:  # a CPU-only JAX (or JAX_PLATFORMS=cpu): refused naming the device and JAX's devices
        with pytest.raises(ConfigError, match=r"device 'cuda:\d+' for a gymnax device env, but JAX has no GPU"):
            jax_device(cuda)
    with pytest.raises(ConfigError, match="needs 1 or more sub-envs"):
        device_env(0)


# -- Collector(..., engine="device") -----------------------------------------------------------------


def batches(engine: str, policy: Any = None, count: int = 3, **settings: Any) -> list[TensorDictBase]:
    settings.setdefault("seed", 0)
    with Collector(
        SPEC, policy, engine=engine, envs_per_worker=N, num_workers=0, frames_per_batch=N * T, **settings
    ) as collector:
        return [collector.next_batch() for _ in range(count)]


def leaves(batch: TensorDictBase) -> dict[Any, torch.Tensor]:
    return {
        key if isinstance(key, tuple) else (key,): batch.get(key)
        for key in batch.keys(include_nested=True, leaves_only=True)
    }


def assert_same_layout(ours: TensorDictBase, theirs: TensorDictBase) -> None:
    mine, other = leaves(ours), leaves(theirs)
    assert sorted(map(str, mine)) == sorted(map(str, other))
    for key, value in other.items():
        assert (mine[key].dtype, mine[key].shape) == (value.dtype, value.shape), key
    assert ours.batch_size == theirs.batch_size == (N, T)
    assert ours.names == theirs.names


def test_random_batches_have_the_keys_dtypes_and_shapes_of_inprocess_batches() -> None:
    ours, theirs = batches("device"), batches("inprocess")
    for x, y in zip(ours, theirs, strict=True):
        assert_same_layout(x, y)
        assert x["next", "done"].any()
        # random actions are drawn apart (torch on the device, numpy on the host): other values
    assert not torch.equal(ours[0]["action"], theirs[0]["action"])
    assert torch.equal(ours[0]["observation"][:, 0], theirs[0]["observation"][:, 0])  # the seeded starts


@pytest.mark.parametrize(
    "settings",
    [{}, {"max_frames_per_traj": 7}, {"reset_at_each_iter": True, "max_frames_per_traj": 12}],
    ids=["plain", "limit", "reset-each-iter"],
)
def test_batches_equal_the_inprocess_engines_over_the_host_env_value_for_value(settings: dict[str, Any]) -> None:
    ours = batches("device", Argmax(), 4, **settings)
    theirs = batches("inprocess", Argmax(), 4, **settings)
    for n, (x, y) in enumerate(zip(ours, theirs, strict=True)):
        assert_same_layout(x, y)
        for key, value in leaves(y).items():
            assert torch.equal(leaves(x)[key], value), f"batch {n}, {key}"
    done = torch.stack([batch["next", "done"] for batch in ours])
    assert done.any()
    if settings:
        truncated = torch.stack([batch["next", "truncated"] for batch in ours])
        assert truncated.any()  # the limit cut some trajectories (reset_envs by mask)


def test_the_same_seed_gives_the_same_batches_and_another_seed_others() -> None:
    first, again, other = batches("device"), batches("device"), batches("device", seed=1)
    for x, y in zip(first, again, strict=True):
        assert all(torch.equal(u, v) for u, v in zip(leaves(x).values(), leaves(y).values(), strict=True))
    assert not torch.equal(first[0]["observation"], other[0]["observation"])


@pytest.mark.parametrize(
    ("policy", "settings"),
    [(None, {}), (Argmax, {"max_frames_per_traj": 7})],
    ids=["random-rollouts", "module-limit"],
)
def test_a_resumed_device_run_makes_the_batches_of_the_uninterrupted_one(policy: Any, settings: dict[str, Any]) -> None:
    def collector(**more: Any) -> Collector:
        made = None if policy is None else policy()
        return Collector(
            SPEC, made, engine="device", envs_per_worker=N, frames_per_batch=N * T, seed=0, **settings, **more
        )

    with collector() as whole:
        expected = [whole.next_batch() for _ in range(5)]
    with collector(snapshots=True) as first:
        for want in expected[:2]:
            assert torch.equal(first.next_batch()["next", "observation"], want["next", "observation"])
        state = first.state_dict(env_states=True)  # every sub-env mid-episode: keys, state, observations
    with collector(resume=state) as resumed:
        for n, want in enumerate(expected[2:]):
            got = resumed.next_batch()
            for key, value in leaves(want).items():
                assert torch.equal(leaves(got)[key], value), f"batch {n + 2}, {key}"


def test_a_device_state_of_another_env_is_refused_and_nothing_changes() -> None:
    env, acrobot = device_env(), GymnaxBackend().make_device("Acrobot-v1", {}, N, None)
    env.reset(list(range(N)))
    acrobot.reset(list(range(N)))
    before = env.get_state()
    with pytest.raises(
        EnvStateError, match=r"state of gymnax Acrobot-v1 cannot be restored into device env gymnax CartPole-v1"
    ):
        env.set_state(acrobot.get_state())
    with pytest.raises(
        EnvStateError, match=r"state of device env gymnax CartPole-v1 of 8 .* its key arrays are \[\(\(4, 2\)"
    ):
        env.set_state(device_env(4).get_state())
    after = env.get_state()
    for part in ("key", "state", "obs"):
        assert all(np.array_equal(a, b) for a, b in zip(before[part], after[part], strict=True)), part


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("policy", "settings"),
    [(None, {}), (Argmax, {"max_frames_per_traj": 5, "reset_at_each_iter": True})],
    ids=["random", "module-limit-reset"],
)
def test_next_batch_converts_nothing_for_the_host(device: str, policy: Any, settings: dict[str, Any]) -> None:
    module = None if policy is None else policy().to(device)
    config, source = pycollect.plugins.resolve(
        CollectorConfig(frames_per_batch=N * T, envs_per_worker=N, engine="device", seed=0, device=device, **settings),
        SPEC,
        {},
    )
    started = config.engine.start(config, source, module, module)
    try:
        started.next_batch(random_actions=module is None, policy_version=0)  # the first reset takes the seeds
        with forbid_host_transfers(device):
            # numpy (Tensor.numpy, numpy.asarray), cpu, item, tolist, bool(), host-reading aten ops, copies
            # off the device
            out = [started.next_batch(random_actions=module is None, policy_version=n) for n in (1, 2, 3)]
    finally:
        started.close()
    for batch in out:
        assert all(value.device.type == torch.device(device).type for value in leaves(batch).values())
        assert batch["next", "done"].any()


def test_the_backend_builds_a_device_env_of_envs_per_worker_sub_envs_where_asked() -> None:
    assert GymnaxBackend.device_env and GymnaxBackend.batched
    with Collector(
        SPEC, None, engine="device", envs_per_worker=N, frames_per_batch=N * T, device="cpu", seed=0
    ) as collector:
        batch = collector.next_batch()
    assert batch.shape == (N, T) and batch.device == torch.device("cpu")
    with pytest.raises(UnknownEnvError, match="unknown gymnax env id 'CartPol-v1'"):
        Collector("gymnax:CartPol-v1", None, engine="device", envs_per_worker=N, frames_per_batch=N)
    with pytest.raises(ConfigError, match=r"env_kwargs\['num_envs'\]"):
        Collector(SPEC, None, engine="device", envs_per_worker=N, frames_per_batch=N, env_kwargs={"num_envs": 3})
    with pytest.raises(ConfigError, match="engine='device' steps one device env in this process"):
        Collector(SPEC, None, engine="device", envs_per_worker=N, frames_per_batch=2 * N, num_workers=2)
