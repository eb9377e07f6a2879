"""dm_control environments in real pycollect batches: in-process, with workers, reproducibility.

Environments come through the ``callable`` backend (a module-level factory that calls
``DMControlBackend().make``) everywhere, and through ``"dm_control:cheetah-run"`` once
pycollect's plugin registry, which resolves backend names through entry points, exists.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

import dmc_factories
import pytest
import torch
from tensordict import TensorDictBase

import pycollect
from pycollect import Collector
from pycollect_dmcontrol import DMControlBackend

SPEC = "dm_control:cheetah-run"
needs_registry = pytest.mark.skipif(
    importlib.util.find_spec("pycollect.plugins") is None,
    reason="pycollect's plugin registry (pycollect/plugins.py), which resolves 'dm_control:' through "
    "entry points, has not landed yet",
)

OBS_KEYS = [("observation", "position"), ("observation", "velocity")]


def _first_batches(env: str | Callable[..., Any], count: int = 2, **kwargs: Any) -> list[TensorDictBase]:
    with Collector(env, **kwargs) as collector:
        return [collector.next_batch() for _ in range(count)]


def _check_cheetah_batch(batch: TensorDictBase, rows: int, steps: int) -> None:
    assert batch.batch_size == torch.Size([rows, steps])
    for key in OBS_KEYS:
        for full in (key, ("next", *key)):
            assert full in batch.keys(include_nested=True, leaves_only=True), full
    assert batch["observation", "position"].shape == (rows, steps, 8)
    assert batch["observation", "velocity"].shape == (rows, steps, 9)
    assert batch["next", "observation", "velocity"].shape == (rows, steps, 9)
    for key in (*OBS_KEYS, ("next", *OBS_KEYS[0]), ("next", *OBS_KEYS[1])):
        assert batch[key].dtype == torch.float64, key
    assert batch["action"].shape == (rows, steps, 6)
    assert batch["action"].dtype == torch.float64
    assert batch["action"].abs().max() <= 1.0
    assert batch["next", "reward"].shape == (rows, steps, 1)
    assert batch["next", "reward"].dtype == torch.float32
    for flag in ("done", "terminated", "truncated"):
        assert batch["next", flag].dtype == torch.bool
    # A step's observation is the previous step's next observation (no episode ends here).
    torch.testing.assert_close(
        batch["observation", "position"][:, 1:], batch["next", "observation", "position"][:, :-1]
    )
    assert not batch["next", "done"].any()  # cheetah-run episodes last 1000 steps


def _assert_identical(a: list[TensorDictBase], b: list[TensorDictBase]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert set(x.keys(True, True)) == set(y.keys(True, True))
        for key in x.keys(True, True):
            assert torch.equal(x[key], y[key]), key


# -- in-process -------------------------------------------------------------------------------


def test_in_process_batch_keys_shapes_dtypes() -> None:
    (batch,) = _first_batches(dmc_factories.cheetah_run, 1, frames_per_batch=2 * 16, envs_per_worker=2, seed=0)
    _check_cheetah_batch(batch, 2, 16)


def test_in_process_is_reproducible_and_seeds_differ() -> None:
    kwargs: dict[str, Any] = {"frames_per_batch": 2 * 8, "envs_per_worker": 2}
    a = _first_batches(dmc_factories.cheetah_run, seed=0, **kwargs)
    b = _first_batches(dmc_factories.cheetah_run, seed=0, **kwargs)
    c = _first_batches(dmc_factories.cheetah_run, seed=1, **kwargs)
    _assert_identical(a, b)
    assert not torch.equal(a[0]["observation", "position"], c[0]["observation", "position"])
    # the two envs of one collector start from different states
    assert not torch.equal(a[0]["observation", "position"][0, 0], a[0]["observation", "position"][1, 0])


def test_time_limit_shows_as_truncation_and_the_env_resets() -> None:
    (batch,) = _first_batches(dmc_factories.cheetah_run_short, 1, frames_per_batch=2 * 16, envs_per_worker=2, seed=0)
    truncated = batch["next", "truncated"][..., 0]
    expected = torch.zeros(2, 16, dtype=torch.bool)
    expected[:, 4] = expected[:, 9] = expected[:, 14] = True  # 5-step episodes
    assert torch.equal(truncated, expected)
    assert not batch["next", "terminated"].any()
    assert torch.equal(batch["next", "done"][..., 0], expected)
    traj = batch["collector", "traj_ids"]
    assert torch.equal(traj[:, 5], traj[:, 0] + 2)  # a new trajectory after the reset (ids stride by env)
    # the step after a truncation starts from the reset observation, not the terminal one
    assert not torch.equal(batch["observation", "position"][:, 5], batch["next", "observation", "position"][:, 4])


def _batches_on_one_path(monkeypatch: pytest.MonkeyPatch, native: bool) -> tuple[list[TensorDictBase], int]:
    """Two batches of short cheetah-run episodes with the native stepper allowed or not, and how
    many env steps the Python path took (with the native stepper: those it did not store)."""
    from pycollect._rollout import runner
    from pycollect._steps.group import EnvGroup

    taken = [0]
    finish = EnvGroup.finish

    def counting(self: Any, left: Any, t: int | None = None) -> Any:
        taken[0] += len(left)  # the envs the group's Python path checks and stores
        return finish(self, left, t)

    with monkeypatch.context() as patch:
        patch.setattr(runner.EnvRunner, "native", native)
        patch.setattr(EnvGroup, "finish", counting)
        batches = _first_batches(dmc_factories.cheetah_run_short, 2, frames_per_batch=2 * 16, envs_per_worker=2, seed=0)
    return batches, taken[0]


def test_cheetah_steps_stay_native_and_match_the_python_path(monkeypatch: pytest.MonkeyPatch) -> None:
    native, left_to_python = _batches_on_one_path(monkeypatch, native=True)
    python, taken_by_python = _batches_on_one_path(monkeypatch, native=False)
    assert left_to_python == 0  # dm_control's OrderedDict observations and float rewards are stored natively
    assert taken_by_python == 2 * 2 * 16
    for a, b in zip(native, python, strict=True):
        assert set(a.keys(True, True)) == set(b.keys(True, True))
        for key in a.keys(True, True):
            assert torch.equal(a[key], b[key]), key
    assert native[0]["next", "truncated"][:, :-1].any()  # episodes end inside a rollout: resets are compared too


# -- worker processes ---------------------------------------------------------------------------


@pytest.mark.timeout(180)
def test_two_workers_batches_and_reproducibility() -> None:
    kwargs: dict[str, Any] = {"frames_per_batch": 2 * 2 * 16, "envs_per_worker": 2, "num_workers": 2, "seed": 0}
    a = _first_batches(dmc_factories.cheetah_run, **kwargs)
    b = _first_batches(dmc_factories.cheetah_run, **kwargs)
    for batch in a:
        _check_cheetah_batch(batch, 4, 16)
    _assert_identical(a, b)


# -- through the registry: "dm_control:cheetah-run" ---------------------------------------------


@needs_registry
def test_spec_resolves_to_this_backend() -> None:
    with pytest.raises(pycollect.UnknownEnvError, match="cheetah has: run"):
        Collector("dm_control:cheetah-fly", frames_per_batch=8)
    with pytest.raises(pycollect.ConfigError, match="seed="):
        Collector(SPEC, frames_per_batch=8, env_kwargs={"task_kwargs": {"random": 0}})


@needs_registry
def test_spec_in_process_matches_the_factory() -> None:
    kwargs: dict[str, Any] = {"frames_per_batch": 2 * 8, "envs_per_worker": 2, "seed": 3}
    via_spec = _first_batches(SPEC, **kwargs)
    via_factory = _first_batches(dmc_factories.cheetah_run, **kwargs)
    _check_cheetah_batch(via_spec[0], 2, 8)
    _assert_identical(via_spec, via_factory)


@needs_registry
def test_spec_env_kwargs_reach_the_env() -> None:
    (batch,) = _first_batches(
        SPEC, 1, frames_per_batch=8, envs_per_worker=1, seed=0, env_kwargs={"task_kwargs": {"time_limit": 0.05}}
    )
    assert batch["next", "truncated"][0, :, 0].tolist() == [False] * 4 + [True] + [False] * 3


@needs_registry
@pytest.mark.timeout(180)
def test_spec_with_two_workers_is_reproducible() -> None:
    kwargs: dict[str, Any] = {"frames_per_batch": 2 * 2 * 16, "envs_per_worker": 2, "num_workers": 2, "seed": 0}
    a = _first_batches(SPEC, **kwargs)
    b = _first_batches(SPEC, **kwargs)
    for batch in a:
        _check_cheetah_batch(batch, 4, 16)
    _assert_identical(a, b)


# -- pycollect's conformance checker -------------------------------------------------------------


def _checker() -> Callable[..., Any] | None:
    try:
        import pycollect.testing as testing
    except ImportError:
        return None
    checker: Callable[..., Any] | None = getattr(testing, "check_env_backend", None)
    return checker


@pytest.mark.skipif(_checker() is None, reason="pycollect.testing.check_env_backend does not exist yet")
@pytest.mark.timeout(180)
def test_conformance() -> None:
    check = _checker()
    assert check is not None
    check(DMControlBackend, "cheetah-run", num_workers=2, unknown_target="cheetah-fly")
    # scalar observations (walker's height) and short episodes, so resets happen mid-rollout
    check(DMControlBackend, "walker-walk", {"task_kwargs": {"time_limit": 0.1}}, num_workers=2)
