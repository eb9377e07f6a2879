"""The config is the input, and it travels whole: to the engine, the worker spec and the native supervisor."""

from __future__ import annotations

import dataclasses
import warnings

import pytest

from pycollect import Collector, CollectorConfig, ConfigError, SupervisionConfig, UnknownEngineError
from pycollect._workers.spec import read_spec
from pycollect.testing.envs import CountingEnv
from pycollect.testing.settings import changed_supervision, same_setting, unchanged_settings

pytestmark = pytest.mark.timeout(180)

SUPERVISION = changed_supervision()  # every setting away from its default: a dropped one shows


def test_every_supervision_setting_differs_from_its_default_here() -> None:
    assert not unchanged_settings(SUPERVISION, SupervisionConfig())


def test_a_whole_config_and_overrides_make_one_config() -> None:
    config = CollectorConfig(frames_per_batch=16, envs_per_worker=2, supervision=SUPERVISION)
    with Collector(CountingEnv, config=config) as collector:
        assert collector.config.frames_per_batch == 16 and collector.config.supervision == SUPERVISION
    with Collector(CountingEnv, config=config, frames_per_batch=8, max_restarts=9) as collector:
        assert collector.config.frames_per_batch == 8 and collector.config.envs_per_worker == 2
        assert collector.config.supervision == dataclasses.replace(SUPERVISION, max_restarts=9)
    with Collector(CountingEnv, frames_per_batch=8, shutdown_grace_s=0.5, term_timeout_s=0.25) as collector:
        assert (collector.config.supervision.shutdown_grace_s, collector.config.supervision.term_timeout_s) == (
            0.5,
            0.25,
        )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"frames_per_batch": 8, "frame_per_batch": 3},
            "'frame_per_batch' is not a setting (did you mean 'frames_per_batch'?)",
        ),
        ({"frames_per_batch": 8, "max_restart": 3}, "'max_restart' is not a setting (did you mean 'max_restarts'?)"),
        ({}, "frames_per_batch is required"),
        ({"config": {"frames_per_batch": 8}}, "config must be a CollectorConfig, got dict"),
        ({"frames_per_batch": 8, "backoff_max_s": 0}, "backoff_max_s must be a positive number of seconds"),
        ({"frames_per_batch": 8, "supervision": "fast"}, "supervision must be a SupervisionConfig, got 'fast'"),
    ],
)
def test_bad_settings_are_config_errors_naming_them(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        Collector(CountingEnv, **kwargs)  # type: ignore[arg-type]
    assert message in str(info.value)


def test_plugin_names_are_resolved_by_the_collector_not_the_config() -> None:
    config = CollectorConfig(frames_per_batch=8, engine="no-such-engine")  # a name: nothing is looked up yet
    assert config.engine == "no-such-engine"
    with pytest.raises(UnknownEngineError, match="unknown engine 'no-such-engine'"):
        Collector(CountingEnv, config=config)
    with Collector(CountingEnv, frames_per_batch=8, num_workers=0) as collector:
        resolved = collector.config
    assert resolved.engine.name == "inprocess" and resolved.weight_sync.name == "shared_memory"  # type: ignore[union-attr]
    assert resolved.device_policy.name == "cpu"  # type: ignore[union-attr]


def test_the_config_reaches_the_workers_and_every_supervision_setting_the_native_supervisor() -> None:
    config = CollectorConfig(
        frames_per_batch=16, envs_per_worker=2, num_workers=2, max_frames_per_traj=3, seed=11, supervision=SUPERVISION
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a whole config is not a reason to warn
        collector = Collector(CountingEnv, config=config)
    with collector:
        pool = collector._engine  # type: ignore[attr-defined]
        assert pool.supervisor.supervision == dataclasses.asdict(SUPERVISION)
        spec = read_spec(pool._spec_fd)
        for field in dataclasses.fields(CollectorConfig):  # whole, as resolved in the trainer
            assert same_setting(getattr(collector.config, field.name), getattr(spec.config, field.name)), field.name
        batch = collector.next_batch()
        assert batch.shape == (4, 4) and int(batch["next", "truncated"].sum()) > 0  # max_frames_per_traj applied
