"""What steps environments (internal), in a worker process or in the trainer for ``num_workers=0``.

This is the set of modules a worker process imports (and, for the central engine, which
steps the workers' envs from the trainer, :mod:`.streams` and :mod:`.trajectories`, which
workers never import). All of them but :mod:`.policy` and :mod:`.streams` use numpy alone, so a
worker with a random policy never imports torch (a test holds us to that).

The batch keys, as TorchRL names them, sit below every layer in :mod:`pycollect._keys`. What
steps ``K`` envs once (the output checks, the native stepper's spec) is the layer below,
:mod:`pycollect._steps`.

Modules:
    fields: which arrays a rollout has (:func:`~.fields.batch_fields`).
    runner: :class:`~.runner.EnvRunner`, the one stepping loop.
    actions: where actions come from; uniform random actions with numpy.
    action_source: random actions or the user's policy, for a rollout.
    policy: calling the user's policy (imports torch; loaded only for a real policy).
    seeding: one user seed to per-environment seeds and random streams.
    streams: the central engine's random streams (torch's per group, each worker's random actions).
    trajectories: the central engine's trajectory ids, per worker as each worker would hand them out.
"""
