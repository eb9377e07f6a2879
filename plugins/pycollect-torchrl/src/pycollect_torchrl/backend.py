"""The ``torchrl`` env backend: TorchRL ``EnvBase`` s stepped in pycollect's workers.

Two ways in. A factory (any callable returning one unbatched ``EnvBase``: a function, a
lambda, an ``EnvCreator``, an env class with ``env_kwargs``) passed as ``env=`` goes through
pycollect's ``callable`` backend, which offers what it builds to this backend
(:meth:`TorchRLBackend.adopt`); ``env="torchrl:package.module:make_env"`` names this backend
and the factory by import path. Either way the envs are
:class:`~pycollect_torchrl.env.TorchRLEnv` s and their fields are the env's TorchRL keys.

Nothing here imports torch or TorchRL when the module loads: pycollect loads the plugin in
every trainer, and a worker that steps gymnasium envs unpickles this backend too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pycollect import ConfigError
from pycollect.envs import EnvBackend, import_factory
from pycollect.envs.specs import EnvSpecs

__all__ = ["TorchRLBackend", "is_torchrl_env"]


def is_torchrl_env(obj: Any) -> bool:
    """Whether ``obj`` is a TorchRL ``EnvBase`` instance (checked without importing TorchRL)."""
    return any(
        (klass.__module__.split(".")[0], klass.__name__) == ("torchrl", "EnvBase") for klass in type(obj).__mro__
    )


class TorchRLBackend(EnvBackend):
    """Steps unbatched TorchRL envs: ``env=make_env`` (adopted) or ``env="torchrl:module:make_env"``.

    The backend holds no state, so it pickles to worker processes as a bare class reference.
    """

    name: ClassVar[str] = "torchrl"

    def check(self, target: Any, env_kwargs: Mapping[str, Any]) -> None:
        """Import the factory of an import-path target; check that the target is callable.

        Raises:
            UnknownEnvError: Not callable, or an import path that does not import.
        """
        import_factory(target, self.name, "TorchRL env factory")

    def make(self, target: Any, env_kwargs: Mapping[str, Any]) -> Any:
        """``factory(**env_kwargs)``, which must return one unbatched TorchRL env, wrapped.

        Raises:
            ConfigError: The factory built something else, or an env whose specs pycollect cannot
                lay out (see :func:`pycollect_torchrl.layout.layout`).
        """
        env = import_factory(target, self.name, "TorchRL env factory")(**dict(env_kwargs))
        adopted = self.adopt(env)
        if adopted is None:
            if hasattr(env, "close"):
                env.close()
            raise ConfigError(f"torchrl env factory {target!r} built a {type(env).__name__}, not a TorchRL EnvBase")
        return adopted

    def adopt(self, env: Any) -> Any:
        """A :class:`~pycollect_torchrl.env.TorchRLEnv` stepping ``env``, if it is a TorchRL env.

        Raises:
            ConfigError: ``env`` is batched, or its specs cannot be laid out in fixed-size fields;
                the message names the key and why.
        """
        if not is_torchrl_env(env):
            return None
        from pycollect_torchrl.env import TorchRLEnv

        return TorchRLEnv(env)

    def adopted(self, env: Any) -> bool:
        """Whether ``env`` is a :class:`~pycollect_torchrl.env.TorchRLEnv`."""
        return type(env).__name__ == "TorchRLEnv" and type(env).__module__ == "pycollect_torchrl.env"

    def specs(self, env: Any) -> EnvSpecs:
        """The env's fields under its TorchRL keys (see :mod:`pycollect_torchrl.layout`)."""
        specs: EnvSpecs = env.layout.specs()
        return specs
