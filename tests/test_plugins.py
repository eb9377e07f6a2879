"""The plugin manager: discovery through entry points, order, clashes, broken plugins, filters,
lookups, the ``pycollect plugins`` command, and workers that never scan entry points."""

from __future__ import annotations

import importlib
import json
import sys
import textwrap
import threading
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import pycollect
from pycollect import (
    Collector,
    ConfigError,
    PluginError,
    UnknownBackendError,
    UnknownDevicePolicyError,
    UnknownSchemeError,
    plugins,
)
from pycollect.cli import main
from pycollect.envs import EnvBackend
from pycollect.testing.envs import CountingEnv

pytestmark = pytest.mark.timeout(120)

BUILTINS = {
    "env_backend": ["gymnasium", "callable"],
    "scheme": ["shared_memory", "no_sync"],
    "device_policy": ["cpu", "round_robin", "explicit"],
}


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """A registry that loads again, from what is installed now (and from fake distributions)."""
    monkeypatch.setattr(plugins, "_registry", plugins._Registry())
    monkeypatch.delenv(plugins.DISABLE_VARIABLE, raising=False)
    monkeypatch.delenv(plugins.LOAD_VARIABLE, raising=False)


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh: None) -> Callable[..., None]:
    """Install a fake distribution: its modules and ``pycollect`` entry points, on sys.path."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))

    def install(distribution: str, entry_points: dict[str, str], modules: dict[str, str]) -> None:
        info = site / f"{distribution.replace('-', '_')}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 1.0\n")
        lines = "".join(f"{name} = {target}\n" for name, target in entry_points.items())
        (info / "entry_points.txt").write_text(f"[pycollect]\n{lines}")
        for module, source in modules.items():
            (site / f"{module}.py").write_text(textwrap.dedent(source))
            monkeypatch.delitem(sys.modules, module, raising=False)  # a module of an earlier test
        importlib.invalidate_caches()

    return install


BACKEND = """
    import pycollect
    from pycollect.envs import EnvBackend
    from pycollect.testing.envs import CountingEnv

    class {cls}(EnvBackend):
        name = {name!r}

        def make(self, target, env_kwargs):
            return CountingEnv(**env_kwargs)

    @pycollect.hookimpl
    def register_env_backend():
        return {cls}
"""


def _backend_module(name: str, cls: str = "PlantedBackend") -> str:
    return BACKEND.format(name=name, cls=cls)


def test_builtins_register_first_then_entry_points(install: Callable[..., None]) -> None:
    install("pycollect-planted", {"planted": "planted_plugin"}, {"planted_plugin": _backend_module("planted")})
    found = plugins.registrations("env_backend")
    assert [r.name for r in found[:2]] == BUILTINS["env_backend"] and found[0].plugin.builtin
    planted = next(r for r in found if r.name == "planted")
    assert (planted.plugin.name, planted.plugin.distribution, planted.plugin.version) == (
        "planted",
        "pycollect-planted",
        "1.0",
    )
    assert not planted.plugin.builtin and planted.cls.__name__ == "PlantedBackend"
    for kind, names in BUILTINS.items():
        assert set(names) <= set(plugins.names(kind))  # type: ignore[arg-type]


def test_a_name_taken_twice_names_both_plugins(install: Callable[..., None]) -> None:
    install("pycollect-clash", {"clash": "clash_plugin"}, {"clash_plugin": _backend_module("gymnasium")})
    with pytest.raises(
        PluginError, match=r"'gymnasium'.*gymnasium_backend' \(built-in\).*'clash' \(pycollect-clash 1.0\)"
    ):
        plugins.registrations()


def test_a_plugin_that_fails_to_import_is_named_and_nothing_starts(install: Callable[..., None]) -> None:
    install("pycollect-broken", {"broken": "broken_plugin"}, {"broken_plugin": "raise ImportError('no libfoo.so')"})
    with pytest.raises(
        PluginError, match=r"'broken' \(pycollect-broken 1.0\) failed to import.*ImportError: no libfoo.so"
    ) as info:
        Collector("CartPole-v1", frames_per_batch=8, num_workers=2)
    assert info.value.plugin == "broken"
    assert f"{plugins.DISABLE_VARIABLE}=broken" in str(info.value)


def test_a_plugin_that_raises_while_registering_is_named(install: Callable[..., None]) -> None:
    source = """
        import pycollect

        @pycollect.hookimpl
        def register_scheme():
            raise RuntimeError("licence server unreachable")
    """
    install("pycollect-raising", {"raising": "raising_plugin"}, {"raising_plugin": source})
    with pytest.raises(PluginError, match=r"'raising'.*raised in register_scheme\(\): RuntimeError: licence server"):
        plugins.names("scheme")


@pytest.mark.parametrize(
    ("returned", "match"),
    [
        ("42", "returned 42; expected a subclass of pycollect.EnvBackend"),
        ("CountingEnv", "expected a subclass of pycollect.EnvBackend"),
        ("type('Nameless', (EnvBackend,), {'make': lambda *a: None})", "has name None"),
        ("type('Spaced', (EnvBackend,), {'name': 'has space', 'make': lambda *a: None})", "has name 'has space'"),
    ],
)
def test_a_hook_must_return_named_subclasses_of_the_interface(
    install: Callable[..., None], returned: str, match: str
) -> None:
    source = f"""
        import pycollect
        from pycollect.envs import EnvBackend
        from pycollect.testing.envs import CountingEnv

        @pycollect.hookimpl
        def register_env_backend():
            return {returned}
    """
    install("pycollect-odd", {"odd": "odd_plugin"}, {"odd_plugin": source})
    with pytest.raises(PluginError, match=match):
        plugins.registrations()


def test_a_misspelled_hook_is_refused(install: Callable[..., None]) -> None:
    source = """
        import pycollect

        @pycollect.hookimpl
        def register_env_backends():
            return []
    """
    install("pycollect-typo", {"typo": "typo_plugin"}, {"typo_plugin": source})
    with pytest.raises(PluginError, match="register_env_backends.*the hooks are register_env_backend"):
        plugins.registrations()


def test_disable_and_allow_lists(install: Callable[..., None], monkeypatch: pytest.MonkeyPatch) -> None:
    install("pycollect-one", {"one": "one_plugin"}, {"one_plugin": _backend_module("one", "One")})
    install("pycollect-two", {"two": "two_plugin"}, {"two_plugin": _backend_module("two", "Two")})

    def loaded(**variables: str) -> tuple[set[str], dict[str, str]]:
        monkeypatch.setattr(plugins, "_registry", plugins._Registry())
        for name in (plugins.DISABLE_VARIABLE, plugins.LOAD_VARIABLE):
            monkeypatch.delenv(name, raising=False)
        for name, value in variables.items():
            monkeypatch.setenv(name, value)
        ours = {"one", "two"}  # other installed plugins (pycollect-dmcontrol) may be there too
        return set(plugins.names("env_backend")) & ours, {k: v for k, v in plugins.skipped().items() if k in ours}

    assert loaded() == ({"one", "two"}, {})
    names, skipped = loaded(PYCOLLECT_DISABLE_PLUGINS="one")
    assert names == {"two"} and skipped == {"one": f"disabled by {plugins.DISABLE_VARIABLE}"}
    assert loaded(PYCOLLECT_DISABLE_PLUGINS="pycollect_two, one")[0] == set()  # distribution names too
    names, skipped = loaded(PYCOLLECT_LOAD_PLUGINS="two")
    assert names == {"two"} and skipped == {"one": f"not in {plugins.LOAD_VARIABLE}"}
    names, _ = loaded(PYCOLLECT_LOAD_PLUGINS="")
    assert names == set() and set(BUILTINS["env_backend"]) <= set(plugins.names("env_backend"))


def test_runtime_registration_and_clashes(fresh: None) -> None:
    class Local(EnvBackend):
        name = "local"

        def make(self, target, env_kwargs):  # type: ignore[no-untyped-def]
            return CountingEnv()

    plugin = types.SimpleNamespace(register_env_backend=pycollect.hookimpl(lambda: Local))
    name = plugins.register(plugin, name="my-local")
    assert plugins.env_backend("local") is Local
    clash = types.SimpleNamespace(register_env_backend=pycollect.hookimpl(lambda: Local))
    with pytest.raises(PluginError, match="'local'.*'my-local' .*'again'"):
        plugins.register(clash, name="again")
    plugins.unregister(name)
    with pytest.raises(UnknownBackendError, match="'local'"):
        plugins.env_backend("local")
    with pytest.raises(ConfigError, match="no plugin named 'my-local'"):
        plugins.unregister(name)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (
            {"weight_sync": "carrier_pigeon"},
            UnknownSchemeError,
            "unknown weight-sync scheme 'carrier_pigeon'; registered: .*shared_memory",
        ),
        (
            {"device_policy": "tpu"},
            UnknownDevicePolicyError,
            "unknown device placement policy 'tpu'; registered: cpu, explicit, round_robin",
        ),
        ({"weight_sync": 3}, UnknownSchemeError, "weight_sync=3: expected the name of a registered weight-sync scheme"),
        ({"device_policy": object}, UnknownDevicePolicyError, "expected the name of a registered device placement"),
    ],
)
def test_unknown_names_fail_before_any_worker_starts(kwargs: dict, error: type, match: str) -> None:
    before = pycollect.testing.snapshot()
    with pytest.raises(error, match=match):
        Collector("CartPole-v1", frames_per_batch=8, num_workers=2, **kwargs)
    assert not pycollect.testing.leftovers(before, timeout_s=0)


def test_workers_never_scan_entry_points(install: Callable[..., None]) -> None:
    """A plugin module that may not be imported in a worker: if a worker loaded entry points,
    it would import it and die; the backend it uses comes from another module, by reference."""
    tripwire = """
        import os
        if os.environ.get("PYCOLLECT_WORKER") is not None:
            raise ImportError("a worker scanned the entry points")
    """
    install(
        "pycollect-planted",
        {"planted": "planted_plugin", "tripwire": "tripwire_plugin"},
        {"planted_plugin": _backend_module("planted"), "tripwire_plugin": tripwire},
    )
    with Collector("planted:anything", frames_per_batch=16, num_workers=2, restart="never", seed=0) as collector:
        batch = collector.next_batch()
    assert batch.batch_size == (2, 8)


def test_cli_lists_plugins(install: Callable[..., None], capsys: pytest.CaptureFixture[str]) -> None:
    install("pycollect-planted", {"planted": "planted_plugin"}, {"planted_plugin": _backend_module("planted")})
    assert main(["plugins"]) == 0
    text = capsys.readouterr().out
    assert "env backend         planted" in text and "pycollect-planted 1.0" in text
    assert "weight-sync scheme  shared_memory" in text and "(built-in)" in text
    assert main(["plugins", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    planted = next(item for item in listing["env_backends"] if item["name"] == "planted")
    assert planted == {
        "name": "planted",
        "class": "planted_plugin.PlantedBackend",
        "plugin": "planted",
        "distribution": "pycollect-planted",
        "version": "1.0",
        "builtin": False,
    }
    assert {item["name"] for item in listing["schemes"]} >= {"shared_memory", "no_sync"}
    assert next(item["name"] for item in listing["device_policies"]) == "cpu"


def test_cli_reports_a_broken_plugin_in_one_line(
    install: Callable[..., None], capsys: pytest.CaptureFixture[str]
) -> None:
    install("pycollect-broken", {"broken": "broken_plugin"}, {"broken_plugin": "1/0"})
    assert main(["plugins"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "'broken' (pycollect-broken 1.0) failed to import" in error
    assert main(["run", "--frames", "10", "--no-progress"]) == 2
    assert "ZeroDivisionError" in capsys.readouterr().err


@pytest.mark.parametrize(
    "weight_sync", ["no_sync", "pycollect.default_plugins.no_sync_scheme.NoSyncScheme", "instance"]
)
def test_a_scheme_is_chosen_by_name_class_or_instance(weight_sync: str) -> None:
    from pycollect.default_plugins.no_sync_scheme import NoSyncScheme

    choice: object = {"no_sync": "no_sync", "instance": NoSyncScheme()}.get(weight_sync, NoSyncScheme)
    policy = torch.nn.Linear(2, 1)
    with (
        pytest.warns(pycollect.PyCollectWarning, match="no_sync"),
        Collector(CountingEnv, _Zero(policy), frames_per_batch=8, num_workers=1, weight_sync=choice) as collector,
    ):
        collector.next_batch()
        collector.update_policy_weights_()  # no_sync: warns that the workers keep their weights
    assert collector.policy_version == 1


class _Zero(torch.nn.Module):
    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return torch.zeros(observation.shape[0], dtype=torch.long)


def test_plugins_load_once_when_threads_race(fresh: None) -> None:
    results: list[list[str]] = []
    errors: list[BaseException] = []

    def look_up() -> None:
        try:
            results.append(plugins.names("scheme"))
        except BaseException as exc:  # a half-loaded registry raises "already registered"
            errors.append(exc)

    threads = [threading.Thread(target=look_up) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors and len(results) == 8 and all(r == results[0] for r in results)


@pytest.mark.parametrize(
    ("source", "match"),
    [
        ("import sys\nsys.exit(3)", r"'exiting' \(pycollect-exiting 1.0\) failed to import.*SystemExit: 3"),
        (
            "import pycollect, sys\n\n@pycollect.hookimpl\ndef register_scheme():\n    sys.exit('no licence')\n",
            r"'exiting' \(pycollect-exiting 1.0\) raised in register_scheme\(\): SystemExit: no licence",
        ),
    ],
    ids=["on-import", "in-a-hook"],
)
def test_a_plugin_that_calls_sys_exit_is_a_plugin_error(install: Callable[..., None], source: str, match: str) -> None:
    install("pycollect-exiting", {"exiting": "exiting_plugin"}, {"exiting_plugin": source})
    with pytest.raises(PluginError, match=match) as info:
        Collector("CartPole-v1", frames_per_batch=8)
    assert info.value.plugin == "exiting"


FRAGILE = """
    import pycollect
    from pycollect.devices import DevicePolicy
    from pycollect.engines import EngineFactory
    from pycollect.weights import WeightSyncScheme

    class FragileScheme(WeightSyncScheme):
        name = "fragile_scheme"

        def __init__(self):
            raise RuntimeError("no transport configured")

        def sender(self, context):
            raise AssertionError("unreachable")

    class FragileDevices(DevicePolicy):
        name = "fragile_devices"

        def __init__(self):
            raise KeyError("CUDA_VISIBLE_DEVICES")

        def place(self, worker, num_workers, devices):
            raise AssertionError("unreachable")

    class FragileEngine(EngineFactory):
        name = "fragile_engine"

        def __init__(self):
            raise ImportError("no module named 'cluster'")

        def start(self, config, env_source, policy, weights_module):
            raise AssertionError("unreachable")

    @pycollect.hookimpl
    def register_scheme():
        return FragileScheme

    @pycollect.hookimpl
    def register_device_policy():
        return FragileDevices

    @pycollect.hookimpl
    def register_engine():
        return FragileEngine
"""


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (
            {"num_workers": 1, "weight_sync": "fragile_scheme"},
            r"'fragile' \(pycollect-fragile 1.0\): weight-sync scheme 'fragile_scheme' "
            r"\(fragile_plugin.FragileScheme\(\)\) raised RuntimeError: no transport configured",
        ),
        (
            {"num_workers": 1, "device_policy": "fragile_devices"},
            r"'fragile' .*device placement policy 'fragile_devices' .*raised KeyError: 'CUDA_VISIBLE_DEVICES'",
        ),
        ({"engine": "fragile_engine"}, r"'fragile' .*engine 'fragile_engine' .*raised ImportError: no module"),
    ],
    ids=["scheme", "device_policy", "engine"],
)
def test_a_plugin_class_whose_constructor_raises_is_a_plugin_error_naming_it(
    install: Callable[..., None], kwargs: dict[str, Any], match: str
) -> None:
    install("pycollect-fragile", {"fragile": "fragile_plugin"}, {"fragile_plugin": FRAGILE})
    before = pycollect.testing.snapshot()
    with pytest.raises(PluginError, match=match) as info:
        Collector(CountingEnv, frames_per_batch=8, **kwargs)
    assert info.value.plugin == "fragile"
    assert not pycollect.testing.leftovers(before, timeout_s=0)


def test_a_class_given_directly_whose_constructor_raises_is_a_config_error_naming_it() -> None:
    from pycollect.default_plugins.no_sync_scheme import NoSyncScheme

    class Unready(NoSyncScheme):
        def __init__(self) -> None:
            raise RuntimeError("not ready")

    with pytest.raises(ConfigError, match=r"weight_sync=.*Unready.*: Unready\(\) raised RuntimeError: not ready"):
        Collector(CountingEnv, frames_per_batch=8, num_workers=1, weight_sync=Unready)
