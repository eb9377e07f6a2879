"""The policy as it travels to where it runs: one trusted blob, unpacked once.

The built-in ``workers`` engine puts it in the worker spec; an engine that runs collectors
elsewhere (``pycollect-ray``'s actors) passes it as an argument. Either way it is the trainer's
own pickle, handed over privately, so it is loaded without restricting it to weights.
"""

from __future__ import annotations

from typing import Any

import cloudpickle

__all__ = ["pack_policy", "unpack_policy"]


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
