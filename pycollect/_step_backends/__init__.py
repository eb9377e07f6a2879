"""The built-in step backends (internal), side by side; registered by :mod:`pycollect.default_plugins.step_backends`.

A step backend is what a vector env steps its envs through (:class:`pycollect.vector.StepBackend`,
defined in :mod:`pycollect._steps.backend`). These two are written against that base as a
plugin's would be; the plugin manager finds them through the ``register_step_backend`` hook.

Modules:
    inprocess: :class:`~.inprocess.InProcessBackend` (``"inprocess"``), every env in the trainer
        (the default for ``num_workers=0``).
    workers: :class:`~.workers.WorkerStepBackend` (``"workers"``), the envs in supervised worker
        processes (:mod:`pycollect._workers`), results in shared memory (the default otherwise;
        the ``central`` engine drives one per group of envs).
"""
