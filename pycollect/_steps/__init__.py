"""Step-level internals of pycollect's vector envs (:mod:`pycollect.vector`), used on both sides.

A vector env moves one step at a time: the trainer checks a batch of actions and splits it
into one block per group of envs; each group (all envs in the trainer, or the envs of one
worker process) steps its envs with gymnasium's autoreset semantics and writes the results
into arrays it is given; the trainer rebuilds gymnasium's observations and infos from those
arrays and the groups' info material. Nothing here knows how the arrays and the material
travel: numpy arrays in-process, shared memory and a mailbox across processes.

A collector's rollout (:mod:`pycollect._rollout`, the layer just above) steps its envs with the
same native stepper and output checks.

numpy and gymnasium only (never torch): worker processes import it.

Modules:
    checks: :class:`~.checks.OutputChecks`, what an env returned against its spaces.
    stepper: :class:`~.stepper.StepperSpec`, what the native stepper is built from.
    spaces: :class:`~.spaces.SpaceLayout` (a space as fixed-shape leaves; batched and single
        values rebuilt from leaf arrays), :class:`~.spaces.ActionChecker`, :func:`~.spaces.split_rows`.
    group: :class:`~.group.EnvGroup`, K envs stepped in one autoreset mode into given arrays;
        :func:`~.group.autoreset_mode`.
    infos: :class:`~.infos.InfoMerger`, gymnasium's vector infos from the groups' material.
    backend: :class:`~.backend.StepBackend`, what a vector env steps through (the built-in
        backends are :mod:`pycollect._step_backends`).
"""
