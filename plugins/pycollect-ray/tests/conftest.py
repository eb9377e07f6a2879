"""Ray clusters for the tests: a local one (single node) and a two-node one, both off the host's network.

Ray binds to the machine's interface address even when told 127.0.0.1, so these tests run
inside a network namespace of their own where only ``lo`` exists::

    unshare --net bash -c 'ip link set lo up && python -m pytest plugins/pycollect-ray/tests -m "not two_nodes"'
    unshare --net bash -c 'ip link set lo up && python -m pytest plugins/pycollect-ray/tests -m two_nodes'

Outside one they are skipped (nothing here talks to another address). The tests marked
``two_nodes`` run on a :class:`pycollect_ray.testing.TwoNodeCluster` (this namespace is the head,
a named namespace the worker node, a veth pair between them); they need root and ``ip`` (else
they are skipped, saying why) and a pytest session of their own: a process is the driver of one
Ray cluster at a time (and keeps the first cluster's authentication token), and the other tests
hold a local one for the whole session.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pycollect.testing import wait_until

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))  # ray_helpers, for this process


def _loopback_only() -> bool:
    # The namespace's own interfaces (/sys/class/net shows the host's unless sysfs is remounted).
    return {name for _, name in socket.if_nameindex()} <= {"lo"}


@pytest.hookimpl(trylast=True)  # after -m and -k deselected what this session does not run
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not _loopback_only():
        skip = pytest.mark.skip(
            reason="Ray tests run in a loopback-only network namespace: unshare --net (see conftest)"
        )
        for item in items:
            item.add_marker(skip)
        return
    two_nodes = [item for item in items if item.get_closest_marker("two_nodes")]
    if not two_nodes:
        return
    from pycollect_ray.testing import unavailable_reason

    reason = unavailable_reason()
    if reason is None and any("ray_cluster" in getattr(item, "fixturenames", ()) for item in items):
        reason = "the two-node tests need a pytest session of their own: pytest -m two_nodes (see conftest)"
    if reason is not None:
        skip = pytest.mark.skip(reason=f"two-node Ray cluster: {reason}")
        for item in two_nodes:
            item.add_marker(skip)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """In CI a skipped test is a failure (as in pycollect's own tests): every test must run there."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if os.environ.get("CI") and reporter is not None and reporter.stats.get("skipped"):
        reporter.write_line(f"CI: {len(reporter.stats['skipped'])} test(s) were skipped; failing the run")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


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


@pytest.fixture(scope="session")
def two_node_cluster() -> Iterator[object]:
    """One two-node cluster for the session (head: 2 CPUs, worker node: 1), torn down and checked at the end."""
    from pycollect_ray.testing import NamespaceUnavailable, TwoNodeCluster

    cluster = TwoNodeCluster(head_cpus=2, worker_cpus=1)
    try:
        cluster.start()
    except NamespaceUnavailable as exc:  # found out only by trying (e.g. root in a user namespace only)
        cluster.close()
        pytest.skip(f"two-node Ray cluster: {exc}")
    except BaseException:
        cluster.close()
        raise
    try:
        yield cluster
    finally:
        cluster.close()
    left = cluster.leftovers()
    assert not left, f"the two-node cluster left behind: {left}"


def _collector_processes(pids: list[int]) -> list[int]:
    """Of ``pids``, the collector actors (``ray::CollectorActor...``) and pycollect workers (``pycollect-wkr``)."""
    found = []
    for pid in pids:
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if comm == "pycollect-wkr" or "CollectorActor" in cmdline:
            found.append(pid)
    return found


@pytest.fixture
def cluster(two_node_cluster: object) -> Iterator[object]:
    """The session's two-node cluster with both nodes up (a node a test killed comes back first).

    The test's driver connection (``RayEngine(address=...)`` leaves the cluster's connection open)
    is closed afterwards, and no collector actor or pycollect worker may be left on either node.
    """
    import ray

    from pycollect_ray.testing import TwoNodeCluster

    assert isinstance(two_node_cluster, TwoNodeCluster)
    assert not ray.is_initialized(), "a test before this one left its Ray connection open"
    if not two_node_cluster.worker_alive():
        two_node_cluster.start_worker()
    yield two_node_cluster
    if ray.is_initialized():
        ray.shutdown()

    def on_nodes() -> list[int]:
        return _collector_processes(two_node_cluster.head_pids() + two_node_cluster.worker_pids())

    wait_until(lambda: not on_nodes(), timeout_s=60, what="no collector actor or worker left on either node")
