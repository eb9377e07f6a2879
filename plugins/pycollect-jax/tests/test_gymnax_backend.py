"""The ``gymnax`` backend: ids, env_kwargs, registration, and JAX's settings in worker processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import gymnax
import numpy as np
import pytest

import pycollect
from pycollect import ConfigError, UnknownEnvError
from pycollect.exceptions import EnvCreationError
from pycollect_jax import GymnaxBackend, GymnaxBatchedEnv, known_ids
from pycollect_jax.env import OPT_OUT, WORKER_XLA_FLAGS


def test_the_backend_is_registered_under_its_name() -> None:
    from pycollect import plugins

    (registration,) = [r for r in plugins.registrations() if r.name == "gymnax"]
    assert registration.cls is GymnaxBackend
    assert registration.plugin.distribution == "pycollect-jax"
    listing = subprocess.run(
        [sys.executable, "-m", "pycollect", "plugins"], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    assert any(line.split()[:3] == ["env", "backend", "gymnax"] for line in listing.splitlines()), listing


def test_known_ids_are_gymnaxs() -> None:
    assert known_ids() == list(gymnax.registered_envs)
    assert "CartPole-v1" in known_ids()


def test_an_unknown_id_is_refused_by_name_with_the_known_ones() -> None:
    with pytest.raises(UnknownEnvError, match=r"unknown gymnax env id 'CartPol-v1'; gymnax has: CartPole-v1, "):
        GymnaxBackend().check("CartPol-v1", {})
    with pytest.raises(UnknownEnvError, match="non-empty string"):
        GymnaxBackend().check("", {})
    with pytest.raises(UnknownEnvError, match="'Nope-v0'"):
        GymnaxBackend().make_batched("Nope-v0", {}, 2)


def test_an_unknown_id_is_refused_before_anything_starts() -> None:
    with pytest.raises(UnknownEnvError, match="'CartPol-v1'"):
        pycollect.Collector("gymnax:CartPol-v1", None, frames_per_batch=16, envs_per_worker=2, num_workers=2)
    with pytest.raises(UnknownEnvError, match="'CartPol-v1'"):
        pycollect.make_vec("gymnax:CartPol-v1", 4, num_workers=2, autoreset_mode="same_step")


def test_env_kwargs_are_constructor_arguments_and_params_fields() -> None:
    deep_sea = GymnaxBackend().make_batched("DeepSea-bsuite", {"size": 5}, 2)
    assert deep_sea.single_observation_space.shape == (5, 5)
    short = GymnaxBackend().make_batched("CartPole-v1", {"params": {"max_steps_in_episode": 3}}, 2)
    assert short.params.max_steps_in_episode == 3
    short.reset_batch([0, 1], None)
    assert [bool(short.step_batch(np.array([t % 2, t % 2]))[3].all()) for t in range(3)] == [False, False, True]


@pytest.mark.parametrize(
    ("env_kwargs", "match"),
    [
        ({"num_envs": 4}, "sets it itself"),
        ({"seed": 0}, "sets it itself"),
        ({"sizes": 5}, r"unknown env_kwargs key 'sizes' for gymnax:DeepSea-bsuite; accepted: size, "),
        ({"params": 5}, "must be a mapping"),
        ({"params": {1: 2}}, "field names"),
    ],
)
def test_bad_env_kwargs_are_refused_by_check(env_kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        GymnaxBackend().check("DeepSea-bsuite", env_kwargs)


def test_an_unknown_params_field_is_refused_when_the_env_is_built() -> None:
    with pytest.raises(ConfigError, match=r"'max_steps': .* no such field; fields: .*max_steps_in_episode"):
        GymnaxBackend().make_batched("CartPole-v1", {"params": {"max_steps": 3}}, 2)


BROKEN = "PycollectBroken-test"


def _broken() -> None:
    raise ValueError("no such env")


def test_a_failing_constructor_or_env_is_an_env_creation_error() -> None:
    if BROKEN not in gymnax.registered_envs:
        gymnax.register(BROKEN, _broken)
    assert BROKEN in known_ids()  # ids registered at run time are gymnax's too
    with pytest.raises(EnvCreationError, match=rf"gymnax.make\('{BROKEN}'\) .* ValueError: no such env"):
        GymnaxBackend().make_batched(BROKEN, {}, 2)
    # a constructor that takes what it cannot use: the error comes when the env's step is traced
    with pytest.raises(
        EnvCreationError, match=r"gymnax:Catch-bsuite with env_kwargs=\{'rows': 'ten'\}: tracing .* TypeError"
    ):
        GymnaxBackend().make_batched("Catch-bsuite", {"rows": "ten"}, 2)


def test_make_is_for_single_envs_only() -> None:
    backend = GymnaxBackend()
    assert backend.batched
    with pytest.raises(NotImplementedError):
        backend.make("CartPole-v1", {})
    assert isinstance(backend.make_batched("CartPole-v1", {}, 3), GymnaxBatchedEnv)


# -- JAX's settings -------------------------------------------------------------------------------

_PROBE = """
import json, os, sys
import pycollect_jax
assert "jax" not in sys.modules, "importing the plugin imported JAX"
env = pycollect_jax.GymnaxBackend().make_batched("CartPole-v1", {}, 2)
print(json.dumps({**env.jax_runtime, "platforms": os.environ.get("JAX_PLATFORMS")}))
"""


def _probe(**environ: str) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYCOLLECT_WORKER", "XLA_FLAGS", "JAX_PLATFORMS", OPT_OUT)}
    env.update(environ)
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, check=True, timeout=120
    )
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_in_a_worker_jax_runs_on_one_cpu_thread_synchronously() -> None:
    runtime = _probe(PYCOLLECT_WORKER="0")
    assert runtime["configured"] is True
    assert runtime["platforms"] == "cpu" and runtime["async_dispatch"] is False
    assert runtime["xla_flags"] == " ".join(WORKER_XLA_FLAGS)
    assert "cpu" in str(runtime["device"]).lower()


def test_a_users_settings_are_kept_and_the_trainer_is_left_alone() -> None:
    kept = _probe(PYCOLLECT_WORKER="0", XLA_FLAGS="--xla_cpu_multi_thread_eigen=true", JAX_PLATFORMS="cpu")
    assert kept["xla_flags"] == "--xla_cpu_multi_thread_eigen=true" and kept["configured"] is True
    trainer = _probe()
    assert trainer["configured"] is False and trainer["platforms"] is None and trainer["async_dispatch"] is True
    opted_out = _probe(PYCOLLECT_WORKER="0", **{OPT_OUT: "0"})
    assert opted_out["configured"] is False and opted_out["async_dispatch"] is True
