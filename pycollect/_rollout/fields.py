"""The fields of a rollout: which arrays a rollout of ``T`` steps over ``K`` envs has.

A rollout is a set of arrays of shape ``[K, T, *field_shape]``, one per field, keyed as in
TorchRL's collectors. The same field list sizes the in-process buffers and (with worker
processes) the shared-memory slots. numpy only: workers import it.
"""

from __future__ import annotations

import numpy as np

from pycollect._keys import (
    DONE,
    IS_INIT,
    NEXT_DONE,
    NEXT_IS_INIT,
    NEXT_OBS_PREFIX,
    NEXT_TERMINATED,
    NEXT_TRUNCATED,
    POLICY_VERSION,
    REWARD,
    TERMINATED,
    TRAJ_IDS,
    TRUNCATED,
)
from pycollect.envs.specs import EnvSpecs, Field, FieldSpec
from pycollect.exceptions import ConfigError

__all__ = ["NEVER_WRITTEN", "batch_fields"]

_FLAG = (1,)  # TorchRL keeps rewards and done flags with a trailing singleton dimension


def batch_fields(
    specs: EnvSpecs,
    outputs: tuple[Field, ...] = (),
    carried: tuple[Field, ...] = (),
    info: tuple[FieldSpec, ...] = (),
) -> tuple[Field, ...]:
    """Every field of a rollout, in a fixed order.

    Args:
        specs: The environment's observation and action fields.
        outputs: Extra policy outputs to keep (e.g. a log-probability, a next recurrent state).
        carried: Inputs the loop carries between steps (``is_init``, a recurrent state): each is
            stored at its key, as the policy saw it, and ``is_init`` also as ``("next",
            "is_init")`` (always False: environments reset themselves).
        info: Entries of the env's step ``info`` to keep, at their keys: ``info_keys`` at
            ``("next", name)``, and the env's own :attr:`~pycollect.envs.EnvSpecs.next_fields`.

    Raises:
        ConfigError: An info entry's key is already a field of the batch.
    """
    fields = [Field(spec.key, spec.shape, spec.dtype) for spec in specs.observation]
    fields += [Field((*NEXT_OBS_PREFIX, *spec.key), spec.shape, spec.dtype) for spec in specs.observation]
    fields += [Field(spec.key, spec.shape, spec.dtype) for spec in specs.action_fields]
    fields.append(Field(REWARD, _FLAG, np.dtype(np.float32)))
    for key in (DONE, TERMINATED, TRUNCATED, NEXT_DONE, NEXT_TERMINATED, NEXT_TRUNCATED):
        fields.append(Field(key, _FLAG, np.dtype(np.bool_)))
    fields.append(Field(TRAJ_IDS, (), np.dtype(np.int64)))
    fields.append(Field(POLICY_VERSION, (), np.dtype(np.int64)))
    observed = {field.key for field in fields}
    for input_ in carried:
        # An env may observe a carried input itself (a TorchRL InitTracker's is_init): one field, same values.
        if input_.key not in observed:
            fields.append(Field(input_.key, input_.shape, input_.dtype))
    if any(input_.key == IS_INIT for input_ in carried) and NEXT_IS_INIT not in observed:
        fields.append(Field(NEXT_IS_INIT, _FLAG, np.dtype(np.bool_)))
    taken = {field.key for field in fields}
    for output in outputs:
        if output.key in taken:
            continue  # e.g. a policy that echoes "done": the environment's value wins
        fields.append(Field(output.key, output.shape, output.dtype))
        taken.add(output.key)
    for entry in info:
        if entry.key in taken:
            raise ConfigError(
                f"info_keys: {entry.key[-1]!r} would be stored at {'/'.join(entry.key)}, a key the batch has"
            )
        fields.append(Field(entry.key, entry.shape, entry.dtype))
    return tuple(fields)


NEVER_WRITTEN = (DONE, TERMINATED, TRUNCATED, NEXT_IS_INIT)
"""Flags a rollout never writes: always False, because environments reset themselves."""
