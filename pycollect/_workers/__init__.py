"""Supervised worker processes and the shared-memory transport (internal), whoever owns them.

Two owners compose a :class:`~.processes.WorkerProcesses`: the ``workers`` engine's trainer
side (:mod:`pycollect._engines.workers`, rollouts out of rings) and the ``workers`` step
backend (:mod:`pycollect._step_backends.workers`, step requests; the ``central`` engine drives
one per group). What runs in a worker process is here too, so both owners stand on one layer.

Modules:
    processes: :class:`~.processes.WorkerProcesses`, what every owner of workers shares (the
        segment, the spec's memfd, the fork server, the supervisor and its log, closing).
    supervision: supervisor events turned into restart counts, cut rollouts and errors.
    spec: :class:`~.spec.WorkerSpec`, what a worker is told at start (its local work: rollouts or steps).
    contract: the descriptors and environment variables a worker is started with.
    main: the worker process (``python -m pycollect.worker``): attach, run the worker loop, report.
    serve: the one worker loop: answer the trainer's requests, and between them do the local work.
    rollouts: a collector's local work (the policy in the worker, rollouts into ring slots).
    steps: a vector env's (or the central engine's) local work, one step request at a time.
    commands: the env commands every worker serves (call, attributes, apply, env states).
    env_requests: the trainer's end of those commands (a vector env's workers, a collector's).
    step_protocol: the requests and answers of a step channel.
    snapshots: env-state snapshots in a slot's snapshot area (resume, replay).
    forkserver: the fork server that forks workers with torch imported.

This package's ``__init__`` imports nothing, so a worker importing :mod:`.main` stays torch-free.
"""
