"""The keys of a batch, as TorchRL's collectors name them.

The bottom layer of the package (it imports nothing of pycollect): the env specs, the stepping
loop, the batch assembly and the engines all name keys through it.
"""

from __future__ import annotations

__all__ = [
    "ACTION",
    "DONE",
    "IS_INIT",
    "MASK",
    "NEXT_DONE",
    "NEXT_IS_INIT",
    "NEXT_OBS_PREFIX",
    "NEXT_TERMINATED",
    "NEXT_TRUNCATED",
    "OBS",
    "POLICY_LAG",
    "POLICY_VERSION",
    "REWARD",
    "TERMINATED",
    "TRAJ_IDS",
    "TRUNCATED",
    "Key",
]

Key = tuple[str, ...]
"""A (possibly nested) key in a batch, e.g. ``("observation",)`` or ``("next", "reward")``."""

ACTION: Key = ("action",)
OBS: Key = ("observation",)
NEXT_OBS_PREFIX: Key = ("next",)
REWARD: Key = ("next", "reward")
DONE: Key = ("done",)
TERMINATED: Key = ("terminated",)
TRUNCATED: Key = ("truncated",)
NEXT_DONE: Key = ("next", "done")
NEXT_TERMINATED: Key = ("next", "terminated")
NEXT_TRUNCATED: Key = ("next", "truncated")
TRAJ_IDS: Key = ("collector", "traj_ids")
MASK: Key = ("collector", "mask")
POLICY_VERSION: Key = ("policy_version",)  # TorchRL's key when it tracks policy versions
POLICY_LAG: Key = ("collector", "policy_lag")  # policy_lag_key=True: versions behind the latest
IS_INIT: Key = ("is_init",)  # TorchRL's InitTracker: True on the first step of an episode
NEXT_IS_INIT: Key = ("next", "is_init")
