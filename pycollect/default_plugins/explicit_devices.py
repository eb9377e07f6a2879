"""The ``explicit`` device placement policy: the user says where each worker goes."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from pycollect.devices.placement import DevicePolicy, Placement
from pycollect.exceptions import ConfigError
from pycollect.hookspecs import hookimpl

__all__ = ["ExplicitPolicy"]

_DEVICE = re.compile(r"cpu|cuda(:\d+)?")
_HOW = 'pass an instance, e.g. device_policy=ExplicitPolicy(["cuda:0", "cpu"]) (from pycollect import ExplicitPolicy)'

Where = str | Placement
"""One worker's place: a device name (``"cpu"``, ``"cuda:1"``, a ``torch.device``) or a whole :class:`Placement`."""


def _placement(value: Any, what: str) -> Placement:
    """A device (name or ``torch.device``) as a placement, or a :class:`Placement` as given."""
    if isinstance(value, Placement):
        return value
    if not isinstance(value, str) and hasattr(value, "type") and hasattr(value, "index"):  # a torch.device
        value = value.type if value.index is None else f"{value.type}:{value.index}"
    if not isinstance(value, str) or not _DEVICE.fullmatch(value.strip()):
        raise ConfigError(f"ExplicitPolicy: {what} is {value!r}; expected 'cpu', 'cuda:<index>' or a Placement")
    device = value.strip()
    if device == "cpu":
        return Placement()
    if device == "cuda":
        device = "cuda:0"
    return Placement(policy_device=device, storing_device=device, cuda=True)


class ExplicitPolicy(DevicePolicy):
    """Each worker where the user says.

    A device name places that worker's policy and its rollouts there (``"cuda:1"``: policy
    and storing on ``cuda:1``, CUDA allowed; ``"cpu"``: everything on the CPU, CUDA hidden);
    a :class:`Placement` is used as given. Every device is checked against this machine's
    before any worker starts.

    Args:
        where: One entry per worker, in worker order (``["cuda:0", "cuda:0", "cpu"]``), or
            a mapping from worker index to its entry (``{0: "cuda:0", 1: Placement(...)}``);
            a mapping must name every worker. Required: the policy cannot be selected by name
            alone (``device_policy="explicit"`` is a :class:`~pycollect.ConfigError`).

    Raises:
        ConfigError: ``where`` is missing, or an entry is not a device or a Placement.

    Example:
        >>> from pycollect import ExplicitPolicy
        >>> policy = ExplicitPolicy(["cuda:0", "cpu"])  # Collector(..., num_workers=2, device_policy=policy)
    """

    name = "explicit"

    def __init__(self, where: Sequence[Where] | Mapping[int, Where] | None = None) -> None:
        if where is None:
            raise ConfigError(f"device_policy='explicit' needs to be told where each worker goes: {_HOW}")
        self.by_worker: dict[int, Placement]
        self.length: int | None  # the list's length (``None`` for a mapping)
        if isinstance(where, Mapping):
            self.by_worker = {}
            for worker, value in where.items():
                if isinstance(worker, bool) or not isinstance(worker, int) or worker < 0:
                    raise ConfigError(f"ExplicitPolicy: the mapping's keys are worker indices, got {worker!r}")
                self.by_worker[worker] = _placement(value, f"worker {worker}'s entry")
            self.length = None
        elif isinstance(where, str | bytes) or not isinstance(where, Sequence):
            raise ConfigError(
                f"ExplicitPolicy: expected a list with one device per worker or a mapping worker -> device, "
                f"got {where!r}"
            )
        else:
            self.by_worker = {i: _placement(value, f"entry {i}") for i, value in enumerate(where)}
            self.length = len(where)
        if not self.by_worker:
            raise ConfigError(f"ExplicitPolicy: no worker is placed (got {where!r})")

    def place(self, worker: int, num_workers: int, devices: Sequence[str]) -> Placement:
        """The entry given for ``worker``.

        Raises:
            ConfigError: The list's length is not ``num_workers``, or the mapping misses
                workers or names workers that do not exist.
        """
        if self.length is not None and self.length != num_workers:
            raise ConfigError(
                f"ExplicitPolicy has {self.length} device(s) but num_workers={num_workers}: give one per worker"
            )
        if self.length is None:
            missing = [w for w in range(num_workers) if w not in self.by_worker]
            extra = sorted(w for w in self.by_worker if w >= num_workers)
            if missing:
                raise ConfigError(
                    f"ExplicitPolicy names no device for worker(s) {missing} of num_workers={num_workers}"
                )
            if extra:
                raise ConfigError(f"ExplicitPolicy places worker(s) {extra}, but num_workers={num_workers}")
        return self.by_worker[worker]

    def __repr__(self) -> str:
        return f"ExplicitPolicy({self.by_worker!r})"


@hookimpl
def register_device_policy() -> type[DevicePolicy]:
    """Register :class:`ExplicitPolicy`."""
    return ExplicitPolicy
