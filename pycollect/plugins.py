"""The plugin manager: built-in plugins, entry points, and the lookup of names.

pycollect has six extension points, each with one hook (:mod:`pycollect.hookspecs`):

========================  ==========================  =====================================
hook                      contributes                 selected by
========================  ==========================  =====================================
register_env_backend()    :class:`~pycollect.envs.EnvBackend`          ``env="<name>:<target>"``
register_scheme()         :class:`~pycollect.weights.WeightSyncScheme`  ``weight_sync="<name>"``
register_device_policy()  :class:`~pycollect.devices.DevicePolicy`      ``device_policy="<name>"``
register_engine()         :class:`~pycollect.engines.EngineFactory`     ``engine="<name>"``
register_inference_runner()  :class:`~pycollect.inference.InferenceRunner`  ``inference_runner="<name>"``
register_step_backend()   :class:`~pycollect.vector.StepBackend`        ``make_vec(..., step_backend="<name>")``
========================  ==========================  =====================================

Loading happens once per process, on first use, in the trainer: the built-in plugins of
:mod:`pycollect.default_plugins` first, then every entry point of the ``pycollect`` group.
Names are turned into plugin objects in two places: :func:`resolve`, which the collector calls
with its config and env argument, and :func:`resolve_step_backend`, which a vector env calls
with its config; worker processes never load plugins: they receive the objects the trainer
resolved.

Two environment variables choose which installed plugins load (each a comma-separated list of
entry-point or distribution names; built-in plugins always load):

``PYCOLLECT_DISABLE_PLUGINS``
    Plugins not to load.
``PYCOLLECT_LOAD_PLUGINS``
    If set, load only these plugins (set it empty to load none).

A plugin that fails to import, raises in a hook, returns something other than classes of the
extension point's interface, or takes a name another plugin has, is a
:class:`~pycollect.PluginError` naming it, raised before any environment or worker exists.

Code that is not packaged can register a plugin object directly with :func:`register`
(tests do; so can a notebook).
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import os
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeVar, cast

import pluggy

from pycollect import hookspecs
from pycollect._messages import first_line
from pycollect._steps.backend import StepBackend
from pycollect.config import CollectorConfig, VectorConfig
from pycollect.default_plugins import DEFAULT_PLUGINS
from pycollect.devices.placement import DevicePolicy
from pycollect.engines.base import EngineFactory
from pycollect.envs.backend import EnvBackend
from pycollect.envs.pool import PerWorkerSources, per_worker, with_num_envs
from pycollect.envs.source import EnvSource, parse_env
from pycollect.exceptions import (
    ConfigError,
    PluginError,
    PyCollectError,
    UnknownBackendError,
    UnknownDevicePolicyError,
    UnknownEngineError,
    UnknownInferenceRunnerError,
    UnknownSchemeError,
)
from pycollect.inference.runner import InferenceRunner
from pycollect.weights.scheme import WeightSyncScheme

__all__ = [
    "DISABLE_VARIABLE",
    "DISTRIBUTION",
    "ENTRY_POINT_GROUP",
    "LOAD_VARIABLE",
    "Kind",
    "PluginInfo",
    "Registration",
    "device_policy",
    "engine",
    "env_backend",
    "hook_name",
    "inference_runner",
    "instance",
    "names",
    "register",
    "registrations",
    "resolve",
    "resolve_env",
    "resolve_step_backend",
    "scheme",
    "skipped",
    "step_backend",
    "unregister",
]

ENTRY_POINT_GROUP = hookspecs.PROJECT
DISTRIBUTION = "pycollect-rl"
"""The distribution pycollect is installed as (``pip install pycollect-rl``), which provides the built-in plugins.

It is pyproject.toml's ``[project] name`` (tests/test_release.py checks the two agree); the import
name stays ``pycollect`` (``pycollect`` on PyPI is an unrelated project).
"""
DISABLE_VARIABLE = "PYCOLLECT_DISABLE_PLUGINS"
LOAD_VARIABLE = "PYCOLLECT_LOAD_PLUGINS"

Kind = Literal["env_backend", "scheme", "device_policy", "engine", "inference_runner", "step_backend"]
"""An extension point, named like the hook that feeds it."""


@dataclass(frozen=True)
class _ExtensionPoint:
    kind: Kind
    hook: str
    interface: type
    noun: str  # in messages: "env backend"
    unknown: type[ConfigError]
    public: str = ""  # in messages, where the interface's public name is not pycollect.<its name>

    def interface_name(self) -> str:
        """The interface as users import it, for messages."""
        return self.public or f"pycollect.{self.interface.__qualname__}"


_POINTS: dict[Kind, _ExtensionPoint] = {
    "env_backend": _ExtensionPoint(
        "env_backend", "register_env_backend", EnvBackend, "env backend", UnknownBackendError
    ),
    "scheme": _ExtensionPoint("scheme", "register_scheme", WeightSyncScheme, "weight-sync scheme", UnknownSchemeError),
    "device_policy": _ExtensionPoint(
        "device_policy",
        "register_device_policy",
        DevicePolicy,
        "device placement policy",
        UnknownDevicePolicyError,
    ),
    "engine": _ExtensionPoint("engine", "register_engine", EngineFactory, "engine", UnknownEngineError),
    "inference_runner": _ExtensionPoint(
        "inference_runner",
        "register_inference_runner",
        InferenceRunner,
        "inference runner",
        UnknownInferenceRunnerError,
    ),
    # ConfigError itself: pycollect.exceptions has no UnknownStepBackendError (yet); the message names the value
    "step_backend": _ExtensionPoint(
        "step_backend",
        "register_step_backend",
        StepBackend,
        "step backend",
        ConfigError,
        "pycollect.vector.StepBackend",
    ),
}

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.\-]*")


@dataclass(frozen=True)
class PluginInfo:
    """Where a plugin comes from.

    Attributes:
        name: The name it is registered under: its entry-point name, the module path of a
            built-in plugin, or the name given to :func:`register`.
        distribution: The installed distribution that provides it (``None`` for plugins
            registered with :func:`register`).
        version: That distribution's version.
        builtin: Whether it is one of pycollect's own :mod:`~pycollect.default_plugins`.
    """

    name: str
    distribution: str | None
    version: str | None
    builtin: bool

    def describe(self) -> str:
        """``'name' (distribution version)`` for messages."""
        origin = "built-in" if self.builtin else self.distribution and f"{self.distribution} {self.version}"
        return f"{self.name!r} ({origin or 'registered at runtime'})"


@dataclass(frozen=True)
class Registration:
    """One class contributed to an extension point.

    Attributes:
        kind: The extension point.
        name: The name users select it by.
        cls: The class.
        plugin: The plugin that contributed it.
    """

    kind: Kind
    name: str
    cls: type
    plugin: PluginInfo


class _Registry:
    """The pluggy manager plus what pycollect knows about each plugin; one per process."""

    def __init__(self) -> None:
        self.manager = pluggy.PluginManager(hookspecs.PROJECT)
        self.manager.add_hookspecs(hookspecs)
        self.info: dict[str, PluginInfo] = {}
        self.order: list[str] = []  # plugin names, in registration order
        self.skipped: dict[str, str] = {}  # entry points not loaded, and why
        self.loaded = False
        self.cache: dict[Kind, dict[str, Registration]] = {}
        self.lock = threading.RLock()  # collectors built in two threads at once load plugins once

    # -- loading ---------------------------------------------------------------------------

    def load(self) -> None:
        """Register the built-in plugins, then the allowed entry points (once)."""
        if self.loaded:
            return
        added: list[str] = []
        try:
            for module in DEFAULT_PLUGINS:
                self.add(importlib.import_module(module), PluginInfo(module, DISTRIBUTION, _version(), True))
                added.append(module)
            for entry_point, info in self._entry_points():
                try:
                    plugin = entry_point.load()
                except (Exception, SystemExit) as exc:  # sys.exit() in a plugin must not end the program
                    raise _broken(info, f"failed to import ({entry_point.value})", exc) from exc
                self.add(plugin, info)
                added.append(info.name)
            for point in _POINTS.values():  # collect now: a broken plugin fails here, not later
                self.collect(point)
        except BaseException:
            for name in reversed(added):
                self.remove(name)
            raise
        self.loaded = True

    def _entry_points(self) -> Iterable[tuple[importlib.metadata.EntryPoint, PluginInfo]]:
        disabled = _name_list(os.environ.get(DISABLE_VARIABLE, ""))
        only = os.environ.get(LOAD_VARIABLE)
        allowed = None if only is None else _name_list(only)
        self.skipped = {}
        seen: set[tuple[str, str]] = set()
        for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            if (entry_point.name, entry_point.value) in seen:
                continue  # one distribution seen twice on sys.path
            seen.add((entry_point.name, entry_point.value))
            dist = entry_point.dist
            info = PluginInfo(entry_point.name, dist.name if dist else None, dist.version if dist else None, False)
            names = {_normalise(entry_point.name), _normalise(info.distribution or "")}
            if names & disabled:
                self.skipped[info.name] = f"disabled by {DISABLE_VARIABLE}"
            elif allowed is not None and not names & allowed:
                self.skipped[info.name] = f"not in {LOAD_VARIABLE}"
            else:
                yield entry_point, info

    def add(self, plugin: object, info: PluginInfo) -> None:
        if info.name in self.info:
            raise PluginError(f"a plugin named {info.name!r} is already registered", plugin=info.name)
        try:
            self.manager.register(plugin, name=info.name)
        except (ValueError, pluggy.PluginValidationError) as exc:
            raise PluginError(f"plugin {info.describe()} cannot be registered: {exc}", plugin=info.name) from exc
        try:
            self.manager.check_pending()  # a hookimpl whose name is no pycollect hook (a typo)
        except pluggy.PluginValidationError as exc:
            self.manager.unregister(name=info.name)
            known = ", ".join(point.hook for point in _POINTS.values())
            raise PluginError(f"plugin {info.describe()}: {exc}; the hooks are {known}", plugin=info.name) from exc
        self.info[info.name] = info
        self.order.append(info.name)
        self.cache.clear()

    def remove(self, name: str) -> None:
        self.manager.unregister(name=name)
        del self.info[name]
        self.order.remove(name)
        self.cache.clear()

    # -- lookup ----------------------------------------------------------------------------

    def collect(self, point: _ExtensionPoint) -> dict[str, Registration]:
        """Every class of one extension point by name, each from the plugin that gave it."""
        if point.kind in self.cache:
            return self.cache[point.kind]
        caller = getattr(self.manager.hook, point.hook)
        impls = sorted(caller.get_hookimpls(), key=lambda impl: self.order.index(impl.plugin_name))
        found: dict[str, Registration] = {}
        for impl in impls:
            info = self.info[impl.plugin_name]
            try:
                returned = impl.function()
            except (Exception, SystemExit) as exc:
                raise _broken(info, f"raised in {point.hook}()", exc) from exc
            for cls in _classes(returned):
                name = _checked(cls, point, info)
                if name in found:
                    first = found[name].plugin
                    raise PluginError(
                        f"two plugins register a {point.noun} named {name!r}: {first.describe()} "
                        f"({found[name].cls.__module__}.{found[name].cls.__qualname__}) and {info.describe()} "
                        f"({cls.__module__}.{cls.__qualname__}); uninstall one, or {_how_to_disable(info)}",
                        plugin=info.name,
                    )
                found[name] = Registration(point.kind, name, cls, info)
        self.cache[point.kind] = found
        return found


def _classes(returned: Any) -> list[Any]:
    if returned is None:
        return []
    if isinstance(returned, list | tuple):
        return list(returned)
    return [returned]


def _checked(cls: Any, point: _ExtensionPoint, info: PluginInfo) -> str:
    interface = point.interface
    if not (isinstance(cls, type) and issubclass(cls, interface)):
        raise PluginError(
            f"plugin {info.describe()}: {point.hook}() returned {cls!r}; expected a subclass of "
            f"{point.interface_name()} (or a list of them)",
            plugin=info.name,
        )
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise PluginError(
            f"plugin {info.describe()}: {point.noun} {cls.__qualname__} has name {name!r}; set the class "
            "attribute `name` to a string of letters, digits, '_', '-' or '.' that starts with a letter",
            plugin=info.name,
        )
    return name


def _name_list(text: str) -> set[str]:
    return {_normalise(part) for part in text.split(",") if part.strip()}


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name.strip()).lower()


def _broken(info: PluginInfo, doing: str, exc: BaseException) -> PluginError:
    return PluginError(
        f"plugin {info.describe()} {doing}: {type(exc).__name__}: {first_line(exc)}; {_how_to_disable(info)}",
        plugin=info.name,
    )


def _how_to_disable(info: PluginInfo) -> str:
    if info.builtin or info.distribution is None:
        return "fix or unregister it"
    return f"disable it with {DISABLE_VARIABLE}={info.name}"


def _version() -> str:
    from pycollect._native import _core

    return _core.__version__


_registry = _Registry()


def _loaded() -> _Registry:
    _registry.load()
    return _registry


F = TypeVar("F", bound=Callable[..., Any])


def _synchronized(function: F) -> F:
    """Hold the registry's lock while ``function`` runs: collectors may be built in threads."""

    @functools.wraps(function)
    def locked(*args: Any, **kwargs: Any) -> Any:
        with _registry.lock:
            return function(*args, **kwargs)

    return cast(F, locked)


# -- the public functions ------------------------------------------------------------------


@_synchronized
def register(plugin: object, name: str | None = None) -> str:
    """Register a plugin object (a module or any object with ``@hookimpl`` functions) now.

    Built-in and installed plugins load first, so a name clash with one of them is reported.

    Args:
        plugin: The plugin.
        name: Its name in listings; default: its ``__name__`` or class name.

    Returns:
        The name it was registered under (for :func:`unregister`).

    Raises:
        PluginError: The plugin does not validate, or clashes with a registered one.
    """
    registry = _loaded()
    name = name or getattr(plugin, "__name__", None) or type(plugin).__name__
    registry.add(plugin, PluginInfo(name, None, None, False))
    try:
        for point in _POINTS.values():
            registry.collect(point)
    except PluginError:
        registry.remove(name)
        raise
    return name


@_synchronized
def unregister(name: str) -> None:
    """Remove a plugin registered with :func:`register` (or any plugin, by name)."""
    registry = _loaded()
    if name not in registry.info:
        raise ConfigError(f"no plugin named {name!r} is registered; registered: {', '.join(registry.order)}")
    registry.remove(name)


@_synchronized
def registrations(kind: Kind | None = None) -> list[Registration]:
    """What every plugin contributes (to one extension point, or to all), in load order."""
    registry = _loaded()
    points = [_POINTS[kind]] if kind is not None else list(_POINTS.values())
    return [registration for point in points for registration in registry.collect(point).values()]


def hook_name(kind: Kind) -> str:
    """The hook that feeds an extension point (``"register_scheme"`` for ``"scheme"``)."""
    return _POINTS[kind].hook


@_synchronized
def names(kind: Kind) -> list[str]:
    """The registered names of one extension point, sorted."""
    return sorted(_loaded().collect(_POINTS[kind]))


@_synchronized
def skipped() -> dict[str, str]:
    """Installed plugins that were not loaded, and why (the environment variables above)."""
    return dict(_loaded().skipped)


@_synchronized
def _lookup(kind: Kind, name: Any, hint: str = "") -> type:
    point = _POINTS[kind]
    found = _loaded().collect(point)
    if not isinstance(name, str) or name not in found:
        raise point.unknown(
            f"unknown {point.noun} {name!r}; registered: {', '.join(sorted(found)) or 'none'}{hint}. "
            f"Plugins add more ({point.hook}() hook; `pycollect plugins` lists them)"
        )
    return found[name].cls


def env_backend(name: str) -> type[EnvBackend]:
    """The env backend class registered as ``name``.

    Raises:
        UnknownBackendError: No backend has that name; the message lists the known ones.
    """
    hint = ". For gymnasium's 'module:EnvId' form write 'gymnasium:module:EnvId'"
    return cast(type[EnvBackend], _lookup("env_backend", name, hint))


def scheme(name: str) -> type[WeightSyncScheme]:
    """The weight-sync scheme class registered as ``name``.

    Raises:
        UnknownSchemeError: No scheme has that name; the message lists the known ones.
    """
    return cast(type[WeightSyncScheme], _lookup("scheme", name))


def device_policy(name: str) -> type[DevicePolicy]:
    """The device placement policy class registered as ``name``.

    Raises:
        UnknownDevicePolicyError: No policy has that name; the message lists the known ones.
    """
    return cast(type[DevicePolicy], _lookup("device_policy", name))


def engine(name: str) -> type[EngineFactory]:
    """The engine factory class registered as ``name``.

    Raises:
        UnknownEngineError: No engine has that name; the message lists the known ones.
    """
    return cast(type[EngineFactory], _lookup("engine", name))


def inference_runner(name: str) -> type[InferenceRunner]:
    """The inference runner class registered as ``name``.

    Raises:
        UnknownInferenceRunnerError: No runner has that name; the message lists the known ones.
    """
    return cast(type[InferenceRunner], _lookup("inference_runner", name))


def step_backend(name: str) -> type[StepBackend]:
    """The step backend class registered as ``name``.

    Raises:
        ConfigError: No step backend has that name; the message lists the known ones.
    """
    return cast(type[StepBackend], _lookup("step_backend", name))


def instance(kind: Literal["scheme", "device_policy", "engine", "inference_runner"], value: Any, argument: str) -> Any:
    """Resolve a ``weight_sync`` / ``device_policy`` / ``engine`` / ``inference_runner`` argument.

    The value is a registered name, a class or an instance.

    A name or a class is built with its defaults (no arguments).

    Raises:
        ConfigError: (a subclass naming the kind) for an unknown name or a value of the wrong type;
            a plain ``ConfigError`` naming the class if the constructor of a class given
            directly raises (its own ``PyCollectError`` passes through).
        PluginError: The constructor of a registered class raised; naming the plugin.
    """
    point = _POINTS[kind]
    if isinstance(value, point.interface):
        return value
    if isinstance(value, str):
        return _construct(point, _lookup(kind, value), argument)
    if isinstance(value, type) and issubclass(value, point.interface):
        return _construct(point, value, argument)  # a class, built with its defaults as a registered name would be
    raise point.unknown(
        f"{argument}={value!r}: expected the name of a registered {point.noun}, or an instance of "
        f"{point.interface.__module__.rsplit('.', 1)[0]}.{point.interface.__qualname__}"
    )


def _construct(point: _ExtensionPoint, cls: type, argument: str) -> Any:
    """``cls()``, with what its constructor raises named: the plugin that registered it, or the class."""
    try:
        return cls()
    except PyCollectError:
        raise  # already says what is wrong (e.g. a ConfigError about the plugin's own setting)
    except Exception as exc:
        registration = _registered_as(point, cls)
        call = f"{cls.__module__}.{cls.__qualname__}()"
        cause = f"{type(exc).__name__}: {first_line(exc)}"
        if registration is None:
            raise ConfigError(
                f"{argument}={cls.__module__}.{cls.__qualname__}: {cls.__name__}() raised {cause}"
            ) from exc
        info = registration.plugin
        raise PluginError(
            f"plugin {info.describe()}: {point.noun} {registration.name!r} ({call}) raised {cause}; "
            f"{_how_to_disable(info)}",
            plugin=info.name,
        ) from exc


@_synchronized
def _registered_as(point: _ExtensionPoint, cls: type) -> Registration | None:
    """The registration of ``cls`` at ``point``, if a plugin registered it."""
    return next((r for r in _loaded().collect(point).values() if r.cls is cls), None)


def resolve(
    config: CollectorConfig,
    env: str | Callable[..., Any] | EnvSource | Sequence[Any],
    env_kwargs: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
) -> tuple[CollectorConfig, EnvSource]:
    """Turn every plugin name a collector was given into the plugin's object, and check them.

    The one place where names are resolved: the engine (``None``: the registered ``inprocess``
    engine for ``num_workers=0``, ``workers`` otherwise), the weight-sync scheme (``None``: the
    engine's :attr:`~pycollect.engines.EngineFactory.default_weight_sync`), the device policy,
    the inference runner, and the env's backend. The engine's :meth:`~pycollect.engines.EngineFactory.check` then
    sees the resolved config.

    Args:
        config: The collector's settings, as given.
        env: The collector's ``env`` argument (see :func:`resolve_env`).
        env_kwargs: Keyword arguments for the environment constructor.

    Returns:
        The config with ``engine``, ``weight_sync``, ``device_policy`` and ``inference_runner``
        replaced by instances,
        and the resolved env.

    Raises:
        ConfigError: (a subclass naming the kind) an unknown name, a value of the wrong type,
            or a setting the engine refuses.
        PluginError: An installed plugin is broken, or a plugin's constructor raised.
    """
    default_engine = "workers" if config.num_workers else "inprocess"
    factory = instance("engine", default_engine if config.engine is None else config.engine, "engine")
    chosen_scheme = factory.default_weight_sync if config.weight_sync is None else config.weight_sync
    resolved = replace(
        config,
        engine=factory,
        weight_sync=instance("scheme", chosen_scheme, "weight_sync"),
        device_policy=instance("device_policy", config.device_policy, "device_policy"),
        inference_runner=instance("inference_runner", config.inference_runner, "inference_runner"),
    )
    factory.check(resolved)
    source = resolve_env(env, env_kwargs, num_workers=resolved.num_workers)
    if isinstance(source, PerWorkerSources) and factory.name not in _POOL_ENGINES:
        raise ConfigError(
            f"engine {factory.name!r} takes one env for all its workers; a list of envs (one per worker) runs on "
            f"engine={' or '.join(map(repr, _POOL_ENGINES))}"
        )
    # A batched backend builds one batched env of envs_per_worker sub-envs per worker
    return resolved, with_num_envs(source, resolved.envs_per_worker)


_POOL_ENGINES = ("workers", "central")
"""The engines that give each worker its own env source (a heterogeneous pool)."""


def resolve_env(
    env: str | Callable[..., Any] | EnvSource | Sequence[Any],
    env_kwargs: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
    *,
    num_workers: int | None = None,
) -> EnvSource:
    """Resolve and check a user's ``env`` argument, building nothing.

    ``env`` or ``env_kwargs`` may be a list, one entry per worker (with ``num_workers``): a
    heterogeneous pool, resolved entry by entry into a
    :class:`~pycollect.envs.pool.PerWorkerSources`.

    Args:
        env: ``"<backend>:<target>"``, a bare gymnasium id such as ``"CartPole-v1"``, or a
            factory callable (the ``callable`` backend), or an :class:`~pycollect.envs.source.EnvSource`
            resolved before (returned as it is).
        env_kwargs: Keyword arguments for the environment constructor.
        num_workers: The workers a list of envs (or of env_kwargs) is given to.

    Raises:
        UnknownBackendError: The prefix names no registered backend.
        UnknownEnvError: The backend does not know the target.
        ConfigError: ``env`` or ``env_kwargs`` has the wrong type, or ``env`` is a vector
            env, a TorchRL env or an env instance rather than something to build envs from, or
            a list of another length than ``num_workers``.
        PluginError: An installed plugin is broken.
    """
    if isinstance(env, list | tuple) or isinstance(env_kwargs, list | tuple):
        if num_workers is None:
            raise ConfigError("a list of envs (or of env_kwargs) gives one env per worker: here there are no workers")
        pool = per_worker(env, env_kwargs, num_workers)
        assert pool is not None
        return PerWorkerSources.of([resolve_env(entry, kwargs) for entry, kwargs in pool])
    if isinstance(env, EnvSource):  # already resolved (an engine building collectors elsewhere)
        if env_kwargs:
            raise ConfigError("env_kwargs cannot be given with a resolved EnvSource: it carries its own")
        return env
    name, target, kwargs = parse_env(env, cast(Mapping[str, Any] | None, env_kwargs))  # a list went above
    backend = env_backend(name)()
    backend.check(target, kwargs)
    return EnvSource(backend, target, kwargs, _adopters() if name == "callable" else ())


def _adopters() -> tuple[EnvBackend, ...]:
    """An instance of every registered env backend that adopts foreign envs (overrides ``EnvBackend.adopt``)."""
    found = _loaded().collect(_POINTS["env_backend"])
    classes = [cast(type[EnvBackend], reg.cls) for reg in found.values()]
    return tuple(cls() for cls in classes if cls.adopt is not EnvBackend.adopt)


def resolve_step_backend(value: str | type[StepBackend] | None, config: VectorConfig) -> type[StepBackend]:
    """Resolve a vector env's ``step_backend`` argument to a class, and let it check the settings.

    The step backend's counterpart of :func:`resolve`, which ``make_vec``, ``SB3VecEnv`` and
    :func:`pycollect.vector.start_backend` call before anything is built.

    Args:
        value: A registered name, a :class:`~pycollect.vector.StepBackend` subclass (taken as
            it is, registered or not), or ``None``: the registered ``inprocess`` backend for
            ``num_workers=0``, ``workers`` otherwise.
        config: The vector env's settings, which the class's ``check`` sees.

    Raises:
        ConfigError: An unknown name (the message lists the registered ones), a value of
            the wrong type, or settings the backend refuses.
        PluginError: An installed plugin is broken.
    """
    point = _POINTS["step_backend"]
    if value is None:
        value = "workers" if config.num_workers else "inprocess"
    if isinstance(value, str):
        cls = step_backend(value)
    elif isinstance(value, type) and issubclass(value, StepBackend):
        cls = value
    else:
        raise point.unknown(
            f"step_backend={value!r}: expected the name of a registered {point.noun}, or a subclass of "
            f"{point.interface_name()}"
        )
    cls.check(config)
    return cls
