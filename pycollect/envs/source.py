"""A user's ``env`` argument, resolved to a backend, a target and kwargs.

:func:`pycollect.plugins.resolve_env` runs in the trainer: it splits the argument
(:func:`parse_env`), looks the backend up in the plugin registry and lets it check the target,
all before any environment exists. The resulting :class:`EnvSource`
carries the backend itself (pickled by reference to its class), so a worker process builds
its environments without looking anything up.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from pycollect._messages import first_line
from pycollect.envs.backend import EnvBackend, GymLikeEnv
from pycollect.envs.batched import SubEnv, as_batched, is_batched, sub_env_count_error
from pycollect.envs.device import device_env_refusal, is_device_env
from pycollect.envs.specs import EnvSpecs
from pycollect.exceptions import ConfigError, EnvCreationError, PyCollectError

__all__ = ["EnvSource", "foreign_env", "parse_env"]

_GYM_API = ("reset", "step", "observation_space", "action_space")


@dataclass(frozen=True)
class EnvSource:
    """A resolved env argument: which backend builds it, from what, with which kwargs.

    It is small and picklable (given a picklable target), so it travels to workers.

    Attributes:
        backend: Builds the envs.
        target: What it builds them from.
        env_kwargs: Keyword arguments for each env's constructor.
        adopters: Backends offered what ``backend`` built when it is not gymnasium-style (see
            :meth:`~pycollect.envs.EnvBackend.adopt`): for the ``callable`` backend, every
            registered backend that adopts (a factory returning a TorchRL env, with
            ``pycollect-torchrl`` installed).
    """

    backend: EnvBackend
    target: Any
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    adopters: tuple[EnvBackend, ...] = ()
    num_envs: int = 1
    """The sub-envs of one batched env a batched backend builds (``envs_per_worker``)."""

    def make(self) -> GymLikeEnv:
        """Build one environment through the backend: a probe, or one env of a worker's ``envs_per_worker``.

        Where the backend (or a factory) builds a batched env, this is its first sub-env as a
        probe: stepping or resetting it steps or resets the whole batch (see
        :mod:`pycollect.envs.batched`), which :meth:`make_envs` never does.

        Raises:
            EnvCreationError: The backend (the env's constructor) raised; the message names
                the env, its kwargs and the error.
            ConfigError: What was built is not a gymnasium-style env or a batched env.
        """
        env = self._build()
        if isinstance(env, SubEnv):
            env.batch.solo = True
        return env

    def make_envs(self, count: int) -> list[GymLikeEnv]:
        """Build ``count`` envs for one group: ``count`` single envs, or every sub-env of one batched env.

        Raises:
            EnvCreationError: An env's constructor raised (the envs built before it are closed).
            ConfigError: A batched env has another number of sub-envs than ``count``.
        """
        if count < 1:
            return []
        first = self._build()
        if isinstance(first, SubEnv):
            batch = first.batch
            if batch.num_envs != count:
                batch.close()
                raise ConfigError(sub_env_count_error(batch, count))
            return list(batch.views())
        envs = [first]
        try:
            while len(envs) < count:
                envs.append(self._build())
        except BaseException:
            for env in envs:
                _close(env)
            raise
        return envs

    def _build(self) -> GymLikeEnv:
        """One env, or the first view of one batched env (:class:`~pycollect.envs.batched.SubEnv`)."""
        try:
            if self.backend.batched:
                env = self.backend.make_batched(self.target, self.env_kwargs, self.num_envs)
            else:
                env = self.backend.make(self.target, self.env_kwargs)
        except PyCollectError:
            raise
        except Exception as exc:
            raise EnvCreationError(
                f"building env {self.describe()!r} with env_kwargs={dict(self.env_kwargs)!r} raised "
                f"{type(exc).__name__}: {first_line(exc)}"
            ) from exc
        if is_device_env(env):  # stepping it here would copy every step to the host
            _close(env)
            raise ConfigError(device_env_refusal(env, self.describe()))
        if is_batched(env):
            view: GymLikeEnv = as_batched(env).views()[0]
            return view
        what = foreign_env(env)
        if what is not None:
            for adopter in self.adopters:
                try:
                    adopted = adopter.adopt(env)
                except BaseException:
                    _close(env)
                    raise
                if adopted is not None:
                    return adopted
        missing = [name for name in _GYM_API if not hasattr(env, name)]
        if what is not None or missing:
            _close(env)
            reason = what or f"a {type(env).__name__}, which lacks {', '.join(missing)}"
            raise ConfigError(
                f"env {self.describe()!r} built {reason}; pycollect needs one gymnasium-style env "
                f"(reset, step, observation_space, action_space) per call{_plugin_hint(what)}"
            )
        return cast(GymLikeEnv, env)

    def specs(self, env: GymLikeEnv) -> EnvSpecs:
        """Report the fields of an environment this source built (through the backend that adopted it, if one did)."""
        for adopter in self.adopters:
            if adopter.adopted(env):
                return adopter.specs(env)
        return self.backend.specs(env)

    def describe(self) -> str:
        """A short human-readable name, e.g. ``gymnasium:CartPole-v1``."""
        target = self.target
        if not isinstance(target, str):
            target = getattr(target, "__qualname__", None) or type(target).__name__
        return f"{self.backend.name}:{target}"


def _close(env: Any) -> None:
    if hasattr(env, "close"):
        env.close()


@dataclass(frozen=True)
class _ForeignLibrary:
    """A library whose envs pycollect recognises and does not step itself.

    Attributes:
        package: Its top-level package, as its classes' ``__module__`` names it.
        label: Its name in messages (``"TorchRL"``).
        classes: The env base classes recognised, by name.
        plugin: The plugin package that steps its envs (adopting what a factory returns), or
            ``None``: no plugin does, and a class of it is no factory.
        returning: The hint's end: what the user's factory returns.
        note: Said after the class name (``": several agents"``).
        counted: Say how many envs an instance holds (``num_envs``) after the class name.
    """

    package: str
    label: str
    classes: tuple[str, ...]
    plugin: str | None = None
    returning: str = ""
    note: str = ""
    counted: bool = False


_FOREIGN_LIBRARIES = (
    _ForeignLibrary("gymnasium", "gymnasium", ("VectorEnv",), counted=True),
    _ForeignLibrary("torchrl", "TorchRL", ("EnvBase",), plugin="pycollect-torchrl", returning="the EnvBase"),
    _ForeignLibrary(
        "pettingzoo",
        "PettingZoo",
        ("ParallelEnv", "AECEnv"),
        plugin="pycollect-pettingzoo",
        returning="the Parallel or AEC env",
        note=": several agents",
    ),
)
"""What :func:`foreign_env` recognises, what :func:`_plugin_hint` says of it, and whose classes
are factories (:data:`_ADOPTABLE_CLASSES`): one row per library, in the order they are tried."""


def _plugin_hint(what: str | None) -> str:
    """Where to get the plugin that steps a foreign env, if one exists (``""`` otherwise)."""
    for library in _FOREIGN_LIBRARIES:
        if what is not None and library.plugin is not None and what.startswith(f"a {library.label} "):
            return (
                f". {library.label} envs step in pycollect through the {library.plugin} plugin (pip install "
                f"{library.plugin}), which adopts what a factory returns (env=make_env, make_env returning "
                f"{library.returning})"
            )
    return ""


_ADOPTABLE_CLASSES = {
    (library.package, name) for library in _FOREIGN_LIBRARIES if library.plugin is not None for name in library.classes
}


def _adoptable_class(obj: Any) -> bool:
    """Whether ``obj`` is a subclass of an env class a plugin adopts (TorchRL's, PettingZoo's): a factory."""
    return isinstance(obj, type) and bool(_ADOPTABLE_CLASSES & _lineage(obj))


def _lineage(cls: type) -> set[tuple[str, str]]:
    """``(top-level package, class name)`` of ``cls`` and every class it derives from.

    Names, not classes: recognising another library's env must not import that library.
    """
    return {(klass.__module__.split(".")[0], klass.__name__) for klass in cls.__mro__}


def foreign_env(obj: Any) -> str | None:
    """Describe ``obj`` if it is an environment of a kind pycollect does not step itself.

    Returns:
        ``"a gymnasium VectorEnv (SyncVectorEnv of 4 envs)"``, ``"a TorchRL EnvBase
        (GymEnv)"`` and the like, or ``None`` for anything else.
    """
    cls = obj if isinstance(obj, type) else type(obj)
    names = _lineage(cls)
    kind = "class" if isinstance(obj, type) else "instance"
    for library in _FOREIGN_LIBRARIES:
        for api in library.classes:
            if (library.package, api) not in names:
                continue
            note = library.note
            if library.counted:
                count = getattr(obj, "num_envs", None) if kind == "instance" else None
                note += f" of {count} envs" if isinstance(count, int) else ""
            return f"a {library.label} {api} {kind} ({cls.__name__}{note})"
    return None


def _refuse_object(env: Any) -> ConfigError:
    what = foreign_env(env)
    if is_batched(env):
        count = getattr(env, "num_envs", "N")
        return ConfigError(
            f"env is an already built batched env ({type(env).__name__} of {count} sub-envs): every worker builds "
            f"its own, so pass a factory that builds it (env=make_envs, make_envs returning the vector env) and "
            f"envs_per_worker={count}, or a batched backend's id ('gymnasium-vector:CartPole-v1', 'envpool:Pong-v5')"
        )
    if what is not None:
        return ConfigError(
            f"env is {what}: pycollect builds and steps its environments itself, envs_per_worker of "
            "them per worker; pass the id of a single environment (env='CartPole-v1') or a factory "
            f"of one (env=make_env), and set envs_per_worker{_plugin_hint(what)}"
        )
    if all(hasattr(env, name) for name in _GYM_API):
        return ConfigError(
            f"env is an already built {type(env).__name__}: every worker builds its own environments, "
            "so pass its id (env='CartPole-v1') or a factory that builds one (env=make_env)"
        )
    return ConfigError(f"env must be an env id string or a factory callable, got {env!r}")


def parse_env(env: Any, env_kwargs: Mapping[str, Any] | None) -> tuple[str, Any, dict[str, Any]]:
    """Split a user's ``env`` argument into a backend name, a target and kwargs, looking nothing up.

    ``"<backend>:<target>"`` names its backend; a bare id is a gymnasium id; a factory callable
    is the ``callable`` backend's target. :func:`pycollect.plugins.resolve_env` then finds the
    backend by name.

    Raises:
        ConfigError: ``env`` or ``env_kwargs`` has the wrong type, or ``env`` is a vector env, a
            TorchRL env or an env instance rather than something to build envs from.
    """
    if env_kwargs is None:
        env_kwargs = {}
    if not isinstance(env_kwargs, Mapping):
        raise ConfigError(f"env_kwargs must be a mapping, got {type(env_kwargs).__name__}: {env_kwargs!r}")
    for key in env_kwargs:
        if not isinstance(key, str):
            raise ConfigError(f"env_kwargs keys must be strings (keyword arguments), got {key!r}")
    if isinstance(env, str):
        prefix, sep, rest = env.partition(":")
        return (prefix, rest, dict(env_kwargs)) if sep else ("gymnasium", env, dict(env_kwargs))
    if callable(env) and (foreign_env(env) is None or _adoptable_class(env)):
        # A TorchRL or PettingZoo env class is a factory like any other: what it builds is adopted (or refused)
        # by EnvSource.make
        return "callable", env, dict(env_kwargs)
    raise _refuse_object(env)
