"""What a worker process needs to know, and how it gets there.

The trainer pickles one :class:`WorkerSpec` (with cloudpickle, so lambdas and local classes
work) into an anonymous memory file whose descriptor every worker inherits. It is trusted
data from the parent, read once at start; what moves during the run (rollouts, weights) goes
through shared memory, never as pickles. Everything in it was resolved in the trainer (the env backend,
the weight-sync scheme's receiver, each worker's placement): a worker never looks plugins up.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import cloudpickle

from pycollect._rollout.keys import Key
from pycollect.devices.placement import Placement
from pycollect.envs.source import EnvSource
from pycollect.envs.specs import FieldSpec
from pycollect.exceptions import TransportError

if TYPE_CHECKING:
    from pycollect.weights.layout import WeightsLayout
    from pycollect.weights.scheme import WeightReceiver

__all__ = ["WorkerSpec", "field_name", "pack_policy", "read_spec", "unpack_policy", "write_spec"]


def pack_policy(policy: Any, weights_module: Any) -> bytes:
    """Pickle ``(policy, weights module)`` for the workers, as one object.

    One object: in the worker a function and the module it closes over stay one, so weights
    loaded into the module reach the function. Through ``torch.save`` (with cloudpickle, so
    lambdas and local classes work): it pickles each storage once, so a tensor that shares a
    parameter's storage in the trainer (``w.detach()``, ``w.t()`` kept by a policy since the
    trainer's check call) shares it in the worker too and sees every weight update. Plain
    pickling would give it a copy that no update reaches.
    """
    import io

    import torch

    buffer = io.BytesIO()
    torch.save((policy, weights_module), buffer, pickle_module=cloudpickle)
    return buffer.getvalue()


def unpack_policy(blob: bytes) -> tuple[Any, Any]:
    """The ``(policy, weights module)`` of :func:`pack_policy`, in a worker."""
    import io

    import torch

    # The trainer's own pickle, handed over privately (a sealed file, an actor argument): trusted,
    # so not restricted to weights.
    policy, weights = torch.load(io.BytesIO(blob), weights_only=False)
    return policy, weights


def field_name(key: Key) -> str:
    """The segment field name of a batch key: its parts joined by ``/``."""
    return "/".join(key)


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker builds its environments, policy and rollout loop from.

    Attributes:
        env_source: Which backend builds the environments, from what.
        policy: The pickled pair ``(policy, weights module)`` (``None``: random actions);
            pickled together, so a function policy and the module it closes over stay one object.
        exploration_type: The ``InteractionType`` name every policy call runs under.
        num_workers: Workers in the collector (the stride of trajectory ids).
        envs_per_worker: Environments each worker steps (K).
        steps: Steps per rollout (T).
        seed: The collector's seed.
        max_frames_per_traj: Truncate trajectories after this many steps.
        init_random_frames: Frames (over all workers) collected with random actions first.
        reset_at_each_iter: Reset every environment at the start of every rollout.
        fields: The batch keys written into each slot.
        info: The entries of the env's step info kept (``info_keys``), as fields.
        placements: Where each worker runs (one per worker).
        weights_layout: How the policy's state dict is laid out (``None``: no weights move).
        weights: The weight-sync scheme's worker half (``None``: no weights move).
        weights_between_steps: Apply new weights before any step, not only between rollouts.
        layout_hash: The segment layout the worker must find.
    """

    env_source: EnvSource
    policy: bytes | None
    exploration_type: str
    num_workers: int
    envs_per_worker: int
    steps: int
    seed: int | None
    max_frames_per_traj: int | None
    init_random_frames: int
    reset_at_each_iter: bool
    fields: tuple[Key, ...]
    info: tuple[FieldSpec, ...]
    placements: tuple[Placement, ...]
    weights_layout: WeightsLayout | None
    weights: WeightReceiver | None
    weights_between_steps: bool
    layout_hash: int

    def load_policy(self) -> tuple[Any, Any]:
        """Unpickle ``(policy, weights module)``; ``(None, None)`` for random actions."""
        if self.policy is None:
            return None, None
        return unpack_policy(self.policy)


_SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE


def write_spec(spec: WorkerSpec) -> int:
    """Pickle ``spec`` into a new anonymous memory file, seal it, and return its descriptor.

    Workers unpickle what the file holds, and every worker inherits it: sealed against writes,
    growing and shrinking (and against removing the seals), no worker, and nothing a worker
    runs, can change what another worker's next generation executes.
    """
    fd = os.memfd_create("pycollect-spec", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    view = memoryview(cloudpickle.dumps(spec))
    while view:
        written = os.write(fd, view)
        view = view[written:]
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
    return fd


def read_spec(fd: int) -> WorkerSpec:
    """Read the spec from an inherited descriptor (from its start, so restarts can re-read)."""
    data = os.pread(fd, os.fstat(fd).st_size, 0)
    spec = cloudpickle.loads(data)
    if not isinstance(spec, WorkerSpec):
        raise TransportError(f"fd {fd} does not hold a WorkerSpec but a {type(spec).__name__}")
    return spec
