"""The fields of a rollout: which arrays a rollout of ``T`` steps over ``K`` envs has.

A rollout is a set of arrays of shape ``[K, T, *field_shape]``, one per field, keyed as in
TorchRL's collectors. The same field list sizes the in-process buffers and (with worker
processes) the shared-memory slots. numpy only: workers import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pycollect._rollout.actions import PolicyOutput
from pycollect._rollout.keys import (
    ACTION,
    DONE,
    NEXT_DONE,
    NEXT_OBS_PREFIX,
    NEXT_TERMINATED,
    NEXT_TRUNCATED,
    POLICY_VERSION,
    REWARD,
    TERMINATED,
    TRAJ_IDS,
    TRUNCATED,
    Key,
)
from pycollect.envs.specs import EnvSpecs

__all__ = ["NEVER_WRITTEN", "BatchField", "batch_fields"]

_FLAG = (1,)  # TorchRL keeps rewards and done flags with a trailing singleton dimension


@dataclass(frozen=True)
class BatchField:
    """One array of a rollout: ``[K, T, *shape]`` values of ``dtype`` under ``key``."""

    key: Key
    shape: tuple[int, ...]
    dtype: np.dtype[Any]


def batch_fields(specs: EnvSpecs, outputs: tuple[PolicyOutput, ...] = ()) -> tuple[BatchField, ...]:
    """Every field of a rollout, in a fixed order.

    Args:
        specs: The environment's observation and action fields.
        outputs: Extra policy outputs to keep (e.g. a log-probability).
    """
    fields = [BatchField(spec.key, spec.shape, spec.dtype) for spec in specs.observation]
    fields += [BatchField((*NEXT_OBS_PREFIX, *spec.key), spec.shape, spec.dtype) for spec in specs.observation]
    fields.append(BatchField(ACTION, specs.action.shape, specs.action.dtype))
    fields.append(BatchField(REWARD, _FLAG, np.dtype(np.float32)))
    for key in (DONE, TERMINATED, TRUNCATED, NEXT_DONE, NEXT_TERMINATED, NEXT_TRUNCATED):
        fields.append(BatchField(key, _FLAG, np.dtype(np.bool_)))
    fields.append(BatchField(TRAJ_IDS, (), np.dtype(np.int64)))
    fields.append(BatchField(POLICY_VERSION, (), np.dtype(np.int64)))
    taken = {field.key for field in fields}
    for output in outputs:
        if output.key in taken:
            continue  # e.g. a policy that echoes "done": the environment's value wins
        fields.append(BatchField(output.key, output.shape, output.dtype))
    return tuple(fields)


NEVER_WRITTEN = (DONE, TERMINATED, TRUNCATED)
"""Root flags a rollout never writes: always False, because environments reset themselves."""
