"""A local Ray cluster for the whole session, on loopback only.

Ray binds to the machine's interface address even when told 127.0.0.1, so these tests run
inside a network namespace of their own where only ``lo`` exists::

    unshare --net bash -c 'ip link set lo up && python -m pytest plugins/pycollect-ray/tests'

Outside one they are skipped (nothing here talks to another address).
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))  # ray_helpers, for this process


def _loopback_only() -> bool:
    # The namespace's own interfaces (/sys/class/net shows the host's unless sysfs is remounted).
    return {name for _, name in socket.if_nameindex()} <= {"lo"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _loopback_only():
        return
    skip = pytest.mark.skip(reason="Ray tests run in a loopback-only network namespace: unshare --net (see conftest)")
    for item in items:
        item.add_marker(skip)


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[None]:
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="session")
def runtime_env() -> dict[str, object]:
    """Actors import ray_helpers through the engine's runtime-env option."""
    path = os.pathsep.join([str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])])
    return {"env_vars": {"PYTHONPATH": path}}
