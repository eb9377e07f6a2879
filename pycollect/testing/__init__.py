"""Tools for testing pycollect plugins (and pycollect itself).

* Conformance checkers that drive a plugin through its contract with real worker processes:
  :func:`check_env_backend`, :func:`check_scheme`, :func:`check_device_policy`.
* :mod:`pycollect.testing.envs`: small environments with known behaviour (counting,
  crashing, hanging, ...), importable by spawned workers.
* :func:`wait_until`: wait for a condition under a deadline instead of sleeping.
* A pytest plugin (loaded automatically through the ``pytest11`` entry point) with the
  fixture ``pycollect_no_leftovers``, which fails a test that leaves a process or a
  shared-memory segment behind; ``pycollect_check_leftovers = true`` applies it to every test.

Importing this package imports torch (the checkers run real policies).
"""

from __future__ import annotations

from pycollect.testing.conformance import check_device_policy, check_env_backend, check_scheme
from pycollect.testing.leaks import leftovers, snapshot
from pycollect.testing.waiting import wait_until

__all__ = ["check_device_policy", "check_env_backend", "check_scheme", "leftovers", "snapshot", "wait_until"]
