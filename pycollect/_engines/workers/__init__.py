"""The worker-process engine (internal): supervised workers and the shared-memory transport.

Modules:
    pool: the trainer's side, :class:`~.pool.WorkerPool` (segment, supervisor, scheme sender,
        batches out of the rings).
    supervision: supervisor events turned into restart counts, cut rollouts and errors.
    spec: :class:`~.spec.WorkerSpec`, what a worker is told at start.
    contract: the descriptors and environment variables a worker is started with.
    main: the worker process's loop (``python -m pycollect.worker``).

This package's ``__init__`` imports nothing, so a worker importing :mod:`.main` stays torch-free.
"""
