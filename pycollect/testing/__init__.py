"""Tools for testing pycollect plugins (and pycollect itself).

* Conformance checkers that drive a plugin through its contract with real worker processes:
  :func:`check_env_backend`, :func:`check_scheme`, :func:`check_device_policy`,
  :func:`check_engine`.
* :func:`check_env_state`: an env's (or env backend's) saved state, restored, makes the
  following steps identical; :func:`first_difference`, its comparison of what envs return.
* :mod:`pycollect.testing.envs`: small environments with known behaviour (counting,
  crashing, hanging, ...), importable by spawned workers.
* :func:`wait_until`: wait for a condition under a deadline instead of sleeping.
* :mod:`pycollect.testing.policies`: ``argmax_mlp``, a small policy for tests and benches;
  :mod:`pycollect.testing.batches`: ``batch_digest``, batches compared hash for hash.
* :mod:`pycollect.testing.settings`: checking that a config travels whole (for engine authors).
* :func:`snapshot` / :func:`leftovers`: the processes and shared-memory segments a test left,
  and the segments its process still maps.
* A pytest plugin (loaded automatically through the ``pytest11`` entry point) with the
  fixture ``pycollect_no_leftovers``, which fails a test that leaves a process, a
  shared-memory segment or a mapping of one behind; ``pycollect_check_leftovers = true``
  applies it to every test.

Names are imported on first use: the pytest plugin imports this package in every pytest run
where pycollect is installed, and only the checkers need torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pycollect._lazy import lazy_exports

if TYPE_CHECKING:
    from pycollect.testing.conformance import check_device_policy, check_engine, check_env_backend, check_scheme
    from pycollect.testing.env_state import check_env_state, first_difference
    from pycollect.testing.leaks import leftovers, snapshot
    from pycollect.testing.waiting import wait_until

_LAZY = {
    "check_device_policy": "pycollect.testing.conformance",
    "check_engine": "pycollect.testing.conformance",
    "check_env_backend": "pycollect.testing.conformance",
    "check_env_state": "pycollect.testing.env_state",
    "check_scheme": "pycollect.testing.conformance",
    "first_difference": "pycollect.testing.env_state",
    "leftovers": "pycollect.testing.leaks",
    "snapshot": "pycollect.testing.leaks",
    "wait_until": "pycollect.testing.waiting",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())

__all__ = [
    "check_device_policy",
    "check_engine",
    "check_env_backend",
    "check_env_state",
    "check_scheme",
    "first_difference",
    "leftovers",
    "snapshot",
    "wait_until",
]
