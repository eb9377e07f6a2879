"""The ``dm_control`` env backend: ``"dm_control:<domain>-<task>"`` through ``dm_control.suite.load``.

dm_control is imported on first use, not when pycollect loads this plugin: a trainer that
collects from another backend never pays for importing MuJoCo.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from pycollect import ConfigError, UnknownEnvError
from pycollect.envs import EnvBackend
from pycollect.envs.backend import keyword_parameters
from pycollect.exceptions import EnvCreationError
from pycollect_dmcontrol.env import DMControlEnv

if TYPE_CHECKING:
    from types import ModuleType

__all__ = ["ENV_KWARGS", "DMControlBackend", "split_target"]

ENV_KWARGS = ("task_kwargs", "environment_kwargs", "visualize_reward")
"""The ``env_kwargs`` keys the backend accepts: the keyword arguments of ``suite.load``."""

# Arguments of dm_control.rl.control.Environment that suite tasks never set themselves.
_ENVIRONMENT_OWN = ("physics", "task", "self")


def _suite() -> ModuleType:
    from dm_control import suite

    module: ModuleType = suite
    return module


def split_target(target: Any) -> tuple[str, str]:
    """Split ``"domain-task"`` at the first ``-`` and check both parts against the suite.

    Domains never contain ``-``; tasks may contain ``_`` (``"cartpole-swingup_sparse"``,
    ``"ball_in_cup-catch"``). Nothing is built.

    Args:
        target: What follows ``"dm_control:"`` in the env spec.

    Returns:
        ``(domain, task)``.

    Raises:
        UnknownEnvError: Not a string, no ``-``, or an unknown domain or task; the message
            lists the domains, or the tasks of the domain.
    """
    if not isinstance(target, str) or not target:
        raise UnknownEnvError(f"dm_control target must be a 'domain-task' string such as 'cheetah-run', got {target!r}")
    suite = _suite()
    tasks_by_domain: dict[str, list[str]] = {}
    for domain_name, task_name in suite.ALL_TASKS:
        tasks_by_domain.setdefault(domain_name, []).append(task_name)
    domain, sep, task = target.partition("-")
    if domain not in tasks_by_domain:
        raise UnknownEnvError(
            f"unknown dm_control domain {domain!r} in {target!r}; domains: {', '.join(sorted(tasks_by_domain))}"
        )
    if not sep or task not in tasks_by_domain[domain]:
        what = f"task {target!r}" if sep else f"target {target!r} (write 'domain-task')"
        raise UnknownEnvError(f"unknown dm_control {what}; {domain} has: {', '.join(tasks_by_domain[domain])}")
    return domain, task


def _task_function(domain: str, task: str) -> Callable[..., Any] | None:
    """The suite function that builds ``domain-task`` (for its signature), if it can be found."""
    module = getattr(_suite(), domain, None)
    registry = getattr(module, "SUITE", None)
    try:
        function: Callable[..., Any] = registry[task]  # type: ignore[index]
    except (KeyError, TypeError):
        return None
    return function


def _mapping(name: str, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"env_kwargs[{name!r}] must be a mapping, got {type(value).__name__}: {value!r}")
    bad = [key for key in value if not isinstance(key, str)]
    if bad:
        raise ConfigError(f"env_kwargs[{name!r}] keys must be strings, got {bad[0]!r}")
    return dict(value)


def load_kwargs(domain: str, task: str, env_kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Check ``env_kwargs`` for ``suite.load(domain, task, ...)`` and return them as its kwargs.

    Args:
        domain: A suite domain.
        task: One of its tasks.
        env_kwargs: The collector's ``env_kwargs``: ``task_kwargs``, ``environment_kwargs``
            and ``visualize_reward``, all optional.

    Returns:
        Keyword arguments for ``suite.load`` (only those given).

    Raises:
        ConfigError: An unknown key (at the top, in ``task_kwargs`` or in
            ``environment_kwargs``), a value of the wrong type, ``task_kwargs["random"]``
            (pycollect seeds the task itself), or an environment argument the task function
            takes itself (``time_limit`` belongs in ``task_kwargs``). The message names the
            bad key and lists the accepted ones.
    """
    unknown = [key for key in env_kwargs if key not in ENV_KWARGS]
    if unknown:
        raise ConfigError(
            f"unknown env_kwargs key {unknown[0]!r} for dm_control:{domain}-{task}; "
            f"accepted: {', '.join(ENV_KWARGS)} (the keyword arguments of dm_control.suite.load)"
        )
    out: dict[str, Any] = {}
    function = _task_function(domain, task)
    task_params = keyword_parameters(function)
    if "task_kwargs" in env_kwargs:
        task_kwargs = _mapping("task_kwargs", env_kwargs["task_kwargs"])
        if "random" in task_kwargs:
            raise ConfigError(
                "env_kwargs['task_kwargs']['random'] conflicts with pycollect's seeding: pass the "
                "collector's seed=... instead (every environment's first reset reseeds its task's "
                "random state with its own seed derived from it)"
            )
        if "environment_kwargs" in task_kwargs:
            raise ConfigError(
                "env_kwargs['task_kwargs']['environment_kwargs']: pass environment_kwargs at the top "
                "level of env_kwargs instead"
            )
        if task_params is not None:
            accepted = [p for p in task_params if p not in ("random", "environment_kwargs")]
            for key in task_kwargs:
                if key not in accepted:
                    raise ConfigError(
                        f"unknown task_kwargs key {key!r} for dm_control:{domain}-{task}; accepted: "
                        f"{', '.join(accepted) or 'none'}"
                    )
        out["task_kwargs"] = task_kwargs
    if "environment_kwargs" in env_kwargs:
        environment_kwargs = _mapping("environment_kwargs", env_kwargs["environment_kwargs"])
        from dm_control.rl import control

        own = [p for p in task_params or () if p not in ("random", "environment_kwargs")]
        accepted = [p for p in keyword_parameters(control.Environment.__init__) or () if p not in _ENVIRONMENT_OWN]
        for key in environment_kwargs:
            if key in own:
                raise ConfigError(
                    f"environment_kwargs key {key!r}: dm_control:{domain}-{task} sets it itself; "
                    f"pass it in task_kwargs instead (env_kwargs={{'task_kwargs': {{{key!r}: ...}}}})"
                )
            if accepted and key not in accepted:
                raise ConfigError(
                    f"unknown environment_kwargs key {key!r} for dm_control:{domain}-{task}; accepted: "
                    f"{', '.join(p for p in accepted if p not in own)}"
                )
        out["environment_kwargs"] = environment_kwargs
    if "visualize_reward" in env_kwargs:
        visualize = env_kwargs["visualize_reward"]
        if not isinstance(visualize, bool):
            raise ConfigError(f"env_kwargs['visualize_reward'] must be a bool, got {visualize!r}")
        out["visualize_reward"] = visualize
    return out


class DMControlBackend(EnvBackend):
    """Builds DeepMind Control Suite tasks: ``"dm_control:cheetah-run"``.

    The target is ``"<domain>-<task>"`` (split at the first ``-``), one of
    ``dm_control.suite.ALL_TASKS``. ``env_kwargs`` are ``suite.load``'s keyword arguments:
    ``task_kwargs`` (e.g. ``{"time_limit": 5}``), ``environment_kwargs`` (e.g.
    ``{"flat_observation": True}``) and ``visualize_reward``. Environments are
    :class:`~pycollect_dmcontrol.env.DMControlEnv` s: Dict observations, one Box per
    observation array, and a Box action space.

    The backend holds no state, so it pickles to worker processes as a bare class reference.
    """

    name: ClassVar[str] = "dm_control"

    def check(self, target: Any, env_kwargs: Mapping[str, Any]) -> None:
        """Validate the target and ``env_kwargs`` against the suite, building no physics.

        Raises:
            UnknownEnvError: The domain or task does not exist; the message lists what does.
            ConfigError: A bad ``env_kwargs`` key or value (see :func:`load_kwargs`).
        """
        domain, task = split_target(target)
        load_kwargs(domain, task, env_kwargs)

    def make(self, target: Any, env_kwargs: Mapping[str, Any]) -> DMControlEnv:
        """Build one environment with ``dm_control.suite.load``.

        Raises:
            UnknownEnvError: See :meth:`check`.
            ConfigError: See :meth:`check`.
            EnvCreationError: ``suite.load`` rejected the arguments anyway (e.g. an
                environment argument that this task sets itself, such as walker's
                ``control_timestep``); the message names the env, the kwargs and the error.
        """
        domain, task = split_target(target)
        kwargs = load_kwargs(domain, task, env_kwargs)
        try:
            env = _suite().load(domain, task, **kwargs)
        except (TypeError, ValueError) as exc:
            raise EnvCreationError(
                f"dm_control.suite.load({domain!r}, {task!r}) with env_kwargs={dict(env_kwargs)!r} "
                f"failed: {type(exc).__name__}: {exc}"
            ) from exc
        return DMControlEnv(env)
