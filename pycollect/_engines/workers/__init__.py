"""The worker-process engine (internal): supervised workers and the shared-memory transport.

Modules:
    processes: :class:`~.processes.WorkerProcesses`, what every owner of workers shares (the
        segment, the spec's memfd, the fork server, the supervisor and its log, closing).
    pool: a collector's trainer side, :class:`~.pool.WorkerPool` (its worker processes, the
        scheme sender, batches out of the rings).
    step_backend: a vector env's trainer side, :class:`~.step_backend.WorkerStepBackend` (its
        worker processes, step requests, restarts); steps: those workers' loop.
    supervision: supervisor events turned into restart counts, cut rollouts and errors.
    spec: :class:`~.spec.WorkerSpec`, what a worker is told at start (its loop: rollouts or steps).
    contract: the descriptors and environment variables a worker is started with.
    main: the worker process's loop (``python -m pycollect.worker``).

This package's ``__init__`` imports nothing, so a worker importing :mod:`.main` stays torch-free.
"""
