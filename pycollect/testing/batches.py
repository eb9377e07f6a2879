"""Comparing collected batches hash for hash: what resume and crash-replay tests assert."""

from __future__ import annotations

import hashlib

from tensordict import TensorDictBase

__all__ = ["batch_digest"]


def batch_digest(batch: TensorDictBase) -> dict[str, str]:
    """The SHA-256 of every leaf of a batch, by its key.

    Two runs that deliver the same batches give equal digests, so a test can keep a run's
    digests (small, picklable, printable from a child process) instead of its batches. Only
    the bytes of each leaf are hashed: compare digests of batches with the same keys, shapes
    and dtypes, as batches of one collector's configuration are.

    Args:
        batch: A collected batch (any ``TensorDict``; leaves on any device).

    Returns:
        ``{key: hex digest}``, a nested key joined with ``"/"`` (``"next/reward"``).

    Example:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> batch = TensorDict({"next": {"reward": torch.ones(2)}}, batch_size=[2])
        >>> list(batch_digest(batch))
        ['next/reward']
    """
    return {
        "/".join(key if isinstance(key, tuple) else (key,)): hashlib.sha256(
            value.contiguous().cpu().numpy().tobytes()
        ).hexdigest()
        for key, value in batch.items(include_nested=True, leaves_only=True)
    }
