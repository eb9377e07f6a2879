"""The trainer's side of a batch (internal): memory, ``TensorDict`` assembly, trajectories, episodes.

Modules:
    tensordict: caller-owned arrays from recycled memory, wrapped as a ``TensorDict``.
    recycle: memory for owned batches, reused once the caller lets go of it.
    split: ``split_trajs``, one row per trajectory.
    episodes: episode counts and returns, computed from batches.
"""
