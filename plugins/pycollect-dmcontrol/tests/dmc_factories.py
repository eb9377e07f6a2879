"""Module-level env factories for the ``callable`` backend (workers import them by name)."""

from __future__ import annotations

from pycollect_dmcontrol import DMControlBackend, DMControlEnv


def cheetah_run() -> DMControlEnv:
    """cheetah-run through the backend, as ``"dm_control:cheetah-run"`` builds it."""
    return DMControlBackend().make("cheetah-run", {})


def cheetah_run_short() -> DMControlEnv:
    """cheetah-run with 5-step episodes (time limit 0.05 s at a 0.01 s control step).

    dm_control ends an episode once ``steps >= time_limit / control_timestep`` in floating
    point: 0.05 / 0.01 is exactly 5.0, whereas 0.07 / 0.01 is 7.000000000000001 (8 steps).
    """
    return DMControlBackend().make("cheetah-run", {"task_kwargs": {"time_limit": 0.05}})
