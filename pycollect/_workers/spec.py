"""What a worker process needs to know, and how it gets there.

Every worker is told one :class:`WorkerSpec`: the envs it builds, the segment layout it must
find, and the local work it does between the trainer's requests (every worker runs one loop,
:func:`pycollect._workers.serve.serve`), with what that work needs: :class:`RolloutLoop` (a
collector's rollout worker, :class:`pycollect._workers.rollouts.RolloutWork`) or
:class:`StepLoop` (a vector env's step-serving worker, the central engine's too,
:class:`pycollect._workers.steps.StepWork`).
The trainer pickles it with cloudpickle, so lambdas and local classes work, into an anonymous
memory file whose descriptor every worker inherits. It is trusted
data from the parent, read once at start; what moves during the run (rollouts, weights) goes
through shared memory, never as pickles. Everything in it was resolved in the trainer (the env backend,
the weight-sync scheme's receiver, each worker's placement): a worker never looks plugins up.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import cloudpickle
import numpy as np

from pycollect._keys import Key
from pycollect._steps.info_fields import InfoArrays, InfoField
from pycollect._steps.spaces import SpaceLayout
from pycollect.config import CollectorConfig, VectorConfig
from pycollect.devices.placement import Placement
from pycollect.engines.policy_blob import unpack_policy
from pycollect.envs.source import EnvSource
from pycollect.envs.specs import FieldSpec
from pycollect.exceptions import TransportError

if TYPE_CHECKING:
    from pycollect.weights.layout import WeightsLayout
    from pycollect.weights.scheme import WeightReceiver

__all__ = [
    "RolloutLoop",
    "StepLoop",
    "WorkerSpec",
    "field_name",
    "info_arrays",
    "read_spec",
    "step_fields",
    "write_spec",
]


def field_name(key: Key) -> str:
    """The segment field name of a batch key: its parts joined by ``/``."""
    return "/".join(key)


@dataclass(frozen=True)
class RolloutLoop:
    """What a collector's rollout worker builds its policy and rollout loop from.

    Attributes:
        config: The collector's resolved config, whole: the worker reads its settings there
            (``envs_per_worker``, ``steps_per_batch``, ``seed``, ``max_frames_per_traj``...).
        policy: The pickled pair ``(policy, weights module)`` (``None``: random actions);
            pickled together, so a function policy and the module it closes over stay one object.
        fields: The batch keys written into each slot.
        info: The entries of the env's step info kept (``info_keys``), as fields.
        placements: Where each worker runs (one per worker).
        weights_layout: How the policy's state dict is laid out (``None``: no weights move).
        weights: The weight-sync scheme's worker half (``None``: no weights move).
        initial_states: Per worker, the state to start from (a checkpoint's: the pickled state
            and the rollouts to step again after it, see :mod:`.snapshots`); ``None``: every
            worker starts afresh.
    """

    config: CollectorConfig
    policy: bytes | None
    fields: tuple[Key, ...]
    info: tuple[FieldSpec, ...]
    placements: tuple[Placement, ...]
    weights_layout: WeightsLayout | None
    weights: WeightReceiver | None
    initial_states: tuple[tuple[bytes, int] | None, ...] | None = None

    def load_policy(self) -> tuple[Any, Any]:
        """Unpickle ``(policy, weights module)``; ``(None, None)`` for random actions."""
        if self.policy is None:
            return None, None
        return unpack_policy(self.policy)


REWARD_FIELD, TERMINATED_FIELD, TRUNCATED_FIELD = "reward", "terminated", "truncated"
"""The segment fields of a step's rewards (float64), terminated and truncated flags (bool)."""
_FINAL = "final"  # the prefix of the final observations' fields (SAME_STEP mode)


@dataclass(frozen=True)
class StepLoop:
    """What a step-serving worker (a vector env's, or the central engine's) answers the trainer's requests from.

    Attributes:
        config: The vector env's settings, whole: the worker reads its share there
            (``envs_per_worker``, ``autoreset_mode``, ``info_keys``, ``max_episode_steps``).
        observation: One env's observation space, as leaves.
        action: One env's action space, as leaves.
        info_fields: The info entries that travel as fields (see
            :mod:`pycollect._steps.info_fields`), found by probing an env in the trainer.
    """

    config: VectorConfig
    observation: SpaceLayout
    action: SpaceLayout
    info_fields: tuple[InfoField, ...] = ()


Loop = TypeVar("Loop", bound="RolloutLoop | StepLoop")


@dataclass(frozen=True)
class WorkerSpec(Generic[Loop]):
    """Everything a worker process starts from, whichever loop it runs (``WorkerSpec[RolloutLoop]``: a collector's).

    Attributes:
        env_source: Which backend builds the environments, from what.
        loop: The loop the worker runs, and what it needs: a collector's rollouts
            (:class:`RolloutLoop`) or a vector env's steps (:class:`StepLoop`).
        layout_hash: The segment layout the worker must find (filled in once the segment exists).
    """

    env_source: EnvSource
    loop: Loop
    layout_hash: int = 0

    @property
    def config(self) -> CollectorConfig | VectorConfig:
        """The resolved config the worker's loop reads its settings from."""
        return self.loop.config


def step_fields(loop: StepLoop) -> dict[str, list[tuple[str, str, tuple[int, ...]]]]:
    """The segment fields of a vector env's steps, by role: ``(name, dtype name, shape)`` each.

    Roles: ``"observation"`` and ``"final"`` (one field per observation leaf; ``"final"`` only
    in ``SAME_STEP`` mode), ``"action"`` (one per action leaf), ``"flags"`` (the reward and
    the two flags), and per info field its values and mask (``"info"``, ``"info_mask"``) and,
    in ``SAME_STEP`` mode, those of the final infos (``"final_info"``, ``"final_info_mask"``).
    A worker's rows of each are ``[K, 1, *shape]``: a segment of one step.
    """
    observation = [(field_name(f.key), f.dtype.name, f.shape) for f in loop.observation.fields]
    finals = loop.config.final_observations

    def info(prefix: str) -> dict[str, list[tuple[str, str, tuple[int, ...]]]]:
        return {
            prefix: [(f"{prefix}/{n}", f.dtype.name, f.shape) for n, f in enumerate(loop.info_fields)],
            f"{prefix}_mask": [(f"{prefix}/{n}/mask", "bool", ()) for n in range(len(loop.info_fields))],
        }

    return {
        "observation": observation,
        "final": [(f"{_FINAL}/{name}", dtype, shape) for name, dtype, shape in observation] if finals else [],
        "action": [(field_name(f.key), f.dtype.name, f.shape) for f in loop.action.fields],
        "flags": [(REWARD_FIELD, "float64", ()), (TERMINATED_FIELD, "bool", ()), (TRUNCATED_FIELD, "bool", ())],
        **info("info"),
        **(info("final_info") if finals else {"final_info": [], "final_info_mask": []}),
    }


def info_arrays(loop: StepLoop, arrays: Callable[[str], list[np.ndarray]]) -> InfoArrays:
    """The info fields over the arrays of a step segment; ``arrays(role)`` gives a role's (see :func:`step_fields`)."""
    finals = loop.config.final_observations
    return InfoArrays(
        loop.info_fields,
        arrays("info"),
        arrays("info_mask"),
        arrays("final_info") if finals else None,
        arrays("final_info_mask") if finals else None,
        info_keys=loop.config.info_keys,
    )


_SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE


def write_spec(spec: WorkerSpec[Any]) -> int:
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


def read_spec(fd: int) -> WorkerSpec[Any]:
    """Read the spec from an inherited descriptor (from its start, so restarts can re-read)."""
    data = os.pread(fd, os.fstat(fd).st_size, 0)
    spec = cloudpickle.loads(data)
    if not isinstance(spec, WorkerSpec):
        raise TransportError(f"fd {fd} does not hold a WorkerSpec but a {type(spec).__name__}")
    return spec
