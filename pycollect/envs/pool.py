"""Heterogeneous pools: one env source per worker (different levels, kwargs or simulators per worker).

``env=[...]`` (one entry per worker: an id, a ``"<backend>:<target>"`` spec, a factory or a
batched factory) or ``env_kwargs=[...]`` (one dict per worker) resolve to a
:class:`PerWorkerSources`: an :class:`~pycollect.envs.source.EnvSource` that is its first worker's
source wherever one env stands for all (the probe that reports the batch's fields, a name in
messages) and hands each worker its own (:func:`source_for`). The trainer probes every distinct
source before any worker starts and refuses a pool whose envs would not fill one batch layout
(:func:`check_same_layout`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pycollect.envs.source import EnvSource
from pycollect.exceptions import ConfigError

__all__ = [
    "PerWorkerSources",
    "check_pool",
    "check_same_layout",
    "distinct_sources",
    "per_worker",
    "source_for",
    "with_num_envs",
]


@dataclass(frozen=True)
class PerWorkerSources(EnvSource):
    """One :class:`~pycollect.envs.source.EnvSource` per worker; as an ``EnvSource``, the first worker's.

    Attributes:
        sources: Worker ``w``'s source at index ``w``.
    """

    sources: tuple[EnvSource, ...] = ()

    @classmethod
    def of(cls, sources: Sequence[EnvSource]) -> PerWorkerSources:
        """The pool of ``sources`` (one per worker, at least one)."""
        if not sources:
            raise ConfigError("a pool of envs needs one env per worker, got none")
        first = sources[0]
        return cls(first.backend, first.target, first.env_kwargs, first.adopters, first.num_envs, tuple(sources))

    def describe(self) -> str:
        """Each worker's env, repeats counted: ``[gymnasium:CartPole-v1 x3, callable:make_level]``."""
        names = [source.describe() for source in self.sources]
        runs: list[tuple[str, int]] = []
        for name in names:
            if runs and runs[-1][0] == name:
                runs[-1] = (name, runs[-1][1] + 1)
            else:
                runs.append((name, 1))
        return "[" + ", ".join(name if count == 1 else f"{name} x{count}" for name, count in runs) + "]"

    def with_num_envs(self, num_envs: int) -> PerWorkerSources:
        """Every worker's source building batched envs of ``num_envs`` sub-envs."""
        return PerWorkerSources.of([dataclasses.replace(source, num_envs=num_envs) for source in self.sources])


def with_num_envs(source: EnvSource, num_envs: int) -> EnvSource:
    """``source`` (each worker's, in a pool) building batched envs of ``num_envs`` sub-envs."""
    if isinstance(source, PerWorkerSources):
        return source.with_num_envs(num_envs)
    return dataclasses.replace(source, num_envs=num_envs)


def per_worker(env: Any, env_kwargs: Any, num_workers: int) -> list[tuple[Any, Any]] | None:
    """Each worker's ``(env, env_kwargs)`` where either is a list (a pool), else ``None``.

    Raises:
        ConfigError: A list of another length than ``num_workers``, a list with no workers to
            give it to, or an ``env_kwargs`` entry that is not a mapping.
    """
    envs = list(env) if isinstance(env, list | tuple) else None
    kwargs = list(env_kwargs) if isinstance(env_kwargs, list | tuple) else None
    if envs is None and kwargs is None:
        return None
    if num_workers == 0:
        raise ConfigError(
            "a list of envs (or of env_kwargs) gives one env per worker, but num_workers=0 steps every env in this "
            "process: set num_workers to the list's length"
        )
    for name, given, what in (("env", envs, "envs"), ("env_kwargs", kwargs, "dicts")):
        if given is not None and len(given) != num_workers:
            raise ConfigError(
                f"{name} is a list of {len(given)} {what}, one per worker, but num_workers={num_workers}: give "
                f"{num_workers} (or set num_workers={len(given)})"
            )
    for index, entry in enumerate(kwargs or ()):
        if entry is not None and not isinstance(entry, Mapping):
            raise ConfigError(f"env_kwargs[{index}] must be a mapping (worker {index}'s kwargs), got {entry!r}")
    return [
        (envs[worker] if envs is not None else env, kwargs[worker] if kwargs is not None else env_kwargs)
        for worker in range(num_workers)
    ]


def source_for(source: EnvSource, worker: int) -> EnvSource:
    """Worker ``worker``'s source: its own in a pool, else ``source`` itself."""
    if isinstance(source, PerWorkerSources):
        return source.sources[worker]
    return source


def distinct_sources(source: EnvSource) -> list[tuple[list[int], EnvSource]]:
    """Each distinct source and the workers that use it (``[([0, 1, ...], source)]`` without a pool)."""
    if not isinstance(source, PerWorkerSources):
        return [([], source)]
    found: list[tuple[list[int], EnvSource]] = []
    for worker, each in enumerate(source.sources):
        for workers, seen in found:
            if _same(seen, each):
                workers.append(worker)
                break
        else:
            found.append(([worker], each))
    return found


def check_pool(
    source: EnvSource,
    describe: Callable[[EnvSource, Any], dict[str, Any]],
    check: Callable[[Any], None] | None = None,
) -> None:
    """In the trainer, before any worker starts: every distinct env of a pool fills one batch layout.

    Builds one probe env of each distinct source, checks it (``check``, e.g.
    :func:`~pycollect.envs.batched.check_probe`) and compares what ``describe`` says of it (its
    spaces, its fields) with the first worker's. Nothing to do without a pool.

    Raises:
        ConfigError: The envs disagree (naming the workers, what differs and both values), or
            what ``check`` raises.
    """
    found = distinct_sources(source)
    if len(found) < 2:
        return
    described: dict[str, list[tuple[str, Any]]] = {}
    for workers, each in found:
        probe = each.make()
        try:
            if check is not None:
                check(probe)
            name = f"worker{'s' if len(workers) > 1 else ''} {', '.join(map(str, workers))}'s env {each.describe()!r}"
            for what, value in describe(each, probe).items():
                described.setdefault(what, []).append((name, value))
        finally:
            probe.close()
    for what, values in described.items():
        check_same_layout(values, what)


def check_same_layout(described: Sequence[tuple[str, Any]], what: str) -> None:
    """Refuse a pool whose envs disagree on ``what`` (their spaces, their fields).

    Args:
        described: ``(which workers' env, its value of what)`` per distinct env; the first is
            the reference.
        what: What is compared, for the message (``"observation space"``).

    Raises:
        ConfigError: Naming both envs and both values.
    """
    first_name, first = described[0]
    for name, value in described[1:]:
        if value != first:
            raise ConfigError(
                f"the pool's envs disagree on their {what}: {first_name} has {first}, {name} has {value}; every "
                "worker's env must fill the same batch layout"
            )


def _same(a: EnvSource, b: EnvSource) -> bool:
    try:
        return bool(a == b)
    except Exception:  # kwargs whose values do not compare (arrays): built and probed apart
        return False
