"""Central inference: the engine of ``Collector(num_workers=N, engine="central")``.

Worker processes only step environments; the trainer runs the policy once per step over the
envs of every worker, on ``policy_device``, and writes the actions back. The workers are a
vector env's (one :class:`~pycollect._step_backends.workers.WorkerStepBackend`, each
worker an :class:`~pycollect._steps.group.EnvGroup` of ``K`` envs in ``SAME_STEP`` autoreset
mode, which also applies ``max_frames_per_traj``); the stepping loop is
:class:`~pycollect._rollout.runner.EnvRunner`'s, with :class:`~.runner.CentralRunner` saying where the
envs are. What crosses the process boundary per step: the actions into shared memory, one
request per worker, then observations, final observations, rewards, flags and fixed-size info
entries out of shared memory, and through the mailbox only the kept info entries that fit no
info field.

**Groups of envs, each spanning every worker** (Sample Factory's double-buffered sampling).
Each worker's ``K`` envs are split into groups (two where the policy can run while the workers
step, else one: :func:`~.engine.default_groups`): group ``g`` is envs
``range_g`` of *every* worker, stepped by a runner of its own. One thread, the caller's, drives
them all: it posts group A's step to every worker, runs the policy on group B's observations
while the workers step A, waits for A's answers (the wait releases the GIL), stores them,
posts B's step, runs the policy on A's, and so on, group after group, step after step. Each
worker has one request in flight at a time, and every policy call covers envs of every worker.

Batches equal the ``workers`` engine's for the same seed and a deterministic policy: worker
``w``'s envs get ``env_seeds(seed, K, w, generation)`` at their first reset; trajectory ids
are handed out per worker as that worker's runner would (:class:`~pycollect._rollout.trajectories.TrajectoryIds`, from
``traj_id_start(w, N, generation)`` with stride ``N``, in step-then-env order); random actions
(``init_random_frames``, ``policy=None``) are drawn from one stream per worker
(``action_rng(seed, w, generation)``), ``[T, K]`` per round exactly as each worker would
(:class:`~pycollect._rollout.streams.WorkerDraws`), each group taking its envs' columns. A
stochastic policy samples from one torch stream per group
(:class:`~pycollect._rollout.streams.TorchStreams`): the same for the same seed, not the
``workers`` engine's samples. Every batch is one round: all workers stepped ``T`` times,
``[N*K, T]`` ordered by worker. In async mode (``sync=False``) the round is handed out one
worker's ``[K, T]`` rollout per batch, in worker order, and the next round starts only when all
of them have been taken: frames carry the policy version that chose them, which may be older
than the collector's by then.

The package, one job a module: :mod:`.engine` (:class:`~.engine.CentralEngine`: start, rounds, weights,
close), :mod:`.runner` (a group's stepping loop and its actions). Its random streams and
trajectory ids sit beside the seeding they follow: :mod:`pycollect._rollout.streams`,
:mod:`pycollect._rollout.trajectories`.
"""

from __future__ import annotations

from pycollect._engines.central.engine import CentralEngine, env_groups

__all__ = ["CentralEngine", "env_groups"]
