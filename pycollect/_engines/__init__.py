"""The built-in engines behind a :class:`~pycollect.Collector` (internal).

Their interface is public in :mod:`pycollect.engines`; they are registered, as any plugin's
engine is, by :mod:`pycollect.default_plugins.builtin_engines`, and the collector finds them
through the registry like any other (:func:`pycollect.plugins.resolve`).

Modules:
    inprocess: steps the environments in the trainer (``num_workers=0``).
    workers: rollouts in supervised worker processes, the policy in each (``num_workers>=1``);
        the processes themselves are in :mod:`pycollect._workers`.
    central: the envs in worker processes, the policy once per step in the trainer.
    device: one device-resident batched env in the trainer, rollouts on its device.
    resources: checking that what an engine would allocate fits this machine.
"""
