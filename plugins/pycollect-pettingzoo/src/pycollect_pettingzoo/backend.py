"""The ``pettingzoo`` env backend: PettingZoo envs in pycollect's workers, TorchRL's multi-agent keys in batches.

Three ways in, all ending in a :class:`~pycollect_pettingzoo.env.MultiAgentEnv`:

* a factory passed as ``env=`` (a function, an env class with ``env_kwargs``) that returns a
  PettingZoo ``ParallelEnv`` or AEC env goes through pycollect's ``callable`` backend, which
  offers it to this backend (:meth:`PettingZooBackend.adopt`, with the default
  :class:`~pycollect_pettingzoo.env.Options`);
* ``env=PettingZoo(make_env, group_map=..., use_mask=...)`` (:class:`PettingZoo`) chooses the options;
* ``env="pettingzoo:package.module:factory"`` names this backend and the factory by import path
  (``"pettingzoo:mpe2.simple_spread_v3:parallel_env"``).

Nothing here imports PettingZoo when the module loads: pycollect loads the plugin in every trainer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from pycollect import ConfigError
from pycollect.envs import EnvBackend, import_factory
from pycollect.envs.specs import EnvSpecs

__all__ = ["PettingZoo", "PettingZooBackend", "is_pettingzoo_env"]


def is_pettingzoo_env(obj: Any) -> bool:
    """Whether ``obj`` is a PettingZoo ``ParallelEnv`` or ``AECEnv`` (checked without importing PettingZoo)."""
    return any(
        (klass.__module__.split(".")[0], klass.__name__) in {("pettingzoo", "ParallelEnv"), ("pettingzoo", "AECEnv")}
        for klass in type(obj).__mro__
    )


def _describe(factory: Any) -> str:
    if isinstance(factory, str):
        return factory
    return str(getattr(factory, "__qualname__", None) or type(factory).__name__)


@dataclass(frozen=True)
class PettingZoo:
    """A factory of PettingZoo envs with the layout options: ``env=PettingZoo(make_env, use_mask=True)``.

    Calling it builds ``factory(**env_kwargs)`` (a Parallel env, or an AEC env PettingZoo can
    convert) and returns it as a :class:`~pycollect_pettingzoo.env.MultiAgentEnv`. It pickles
    as its factory and options, so worker processes build their own envs.

    Args:
        factory: A callable returning one PettingZoo env (``simple_spread_v3.parallel_env``, an
            env class), or an import path ``"package.module:factory"``.
        group_map: See :class:`~pycollect_pettingzoo.env.Options`.
        use_mask: See :class:`~pycollect_pettingzoo.env.Options`.
        done_on_any: See :class:`~pycollect_pettingzoo.env.Options`.
        return_state: See :class:`~pycollect_pettingzoo.env.Options`.
    """

    factory: Callable[..., Any] | str
    group_map: Any = None
    use_mask: bool = False
    done_on_any: bool | None = None
    return_state: bool = False

    def __call__(self, **env_kwargs: Any) -> Any:
        """Build one env and lay it out."""
        from pycollect_pettingzoo.env import MultiAgentEnv, Options, to_parallel

        name = _describe(self.factory)
        built = import_factory(self.factory, "pettingzoo", "PettingZoo env factory")(**env_kwargs)
        try:
            options = Options(self.group_map, self.use_mask, self.done_on_any, self.return_state)
            return MultiAgentEnv(to_parallel(built, name), options, name)
        except BaseException:
            if hasattr(built, "close"):
                built.close()
            raise


class PettingZooBackend(EnvBackend):
    """Steps PettingZoo envs: ``env=make_env`` (adopted), ``PettingZoo(make_env)``, ``"pettingzoo:module:factory"``.

    The backend holds no state, so it pickles to worker processes as a bare class reference.
    """

    name: ClassVar[str] = "pettingzoo"

    def check(self, target: Any, env_kwargs: Mapping[str, Any]) -> None:
        """Import the factory of an import-path target; check that the target is callable.

        Raises:
            UnknownEnvError: Not callable, or an import path that does not import.
        """
        import_factory(target, self.name, "PettingZoo env factory")

    def make(self, target: Any, env_kwargs: Mapping[str, Any]) -> Any:
        """``factory(**env_kwargs)``, a PettingZoo env, laid out with the default options.

        Raises:
            ConfigError: The factory built something else, or an AEC env PettingZoo cannot
                convert; the message names it.
        """
        built = import_factory(target, self.name, "PettingZoo env factory")(**dict(env_kwargs))
        adopted = self.adopt(built, _describe(target))
        if adopted is None:
            if hasattr(built, "close"):
                built.close()
            raise ConfigError(
                f"pettingzoo env factory {_describe(target)!r} built a {type(built).__name__}, not a PettingZoo "
                "ParallelEnv or AECEnv"
            )
        return adopted

    def adopt(self, env: Any, name: str | None = None) -> Any:
        """A :class:`~pycollect_pettingzoo.env.MultiAgentEnv` stepping ``env``, if it is a PettingZoo env.

        Raises:
            ConfigError: An AEC env that cannot be converted, a bad grouping (see
                :func:`~pycollect_pettingzoo.groups.group_map`).
        """
        if not is_pettingzoo_env(env):
            return None
        from pycollect_pettingzoo.env import MultiAgentEnv, to_parallel

        label = name or str(getattr(env, "metadata", {}).get("name", type(env).__name__))
        try:
            return MultiAgentEnv(to_parallel(env, label), None, label)
        except BaseException:
            env.close()
            raise

    def adopted(self, env: Any) -> bool:
        """Whether ``env`` is a :class:`~pycollect_pettingzoo.env.MultiAgentEnv`."""
        return type(env).__name__ == "MultiAgentEnv" and type(env).__module__ == "pycollect_pettingzoo.env"

    def specs(self, env: Any) -> EnvSpecs:
        """The env's fields under TorchRL's multi-agent keys (see :mod:`pycollect_pettingzoo.env`)."""
        specs: EnvSpecs = env.specs()
        return specs
