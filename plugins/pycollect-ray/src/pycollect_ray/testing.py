"""A two-node Ray cluster on one machine, for tests and benches: each node in a network namespace.

:class:`TwoNodeCluster` builds what two hosts on a private network would be: the *head* is the
network namespace this process already runs in (the driver, i.e. the trainer, runs on the head
as in the how-to of ``docs/distributed.md``), the *worker node* a named namespace of its own
(``pycollect-node-<pid>-<n>``); a ``veth`` pair links them (``10.213.0.1/30`` here,
``10.213.0.2/30`` there, no default route, ``lo`` up in both), and each runs ``ray start`` as a
user would on two hosts: ``ray start --head`` here, ``ray start --address=10.213.0.1:6390`` there,
with ``--num-cpus`` and a custom resource (``node_head`` / ``node_worker``) that lets a test place
an actor on one node.

Only a namespace that is not the host's may be the head (:func:`unavailable_reason` checks that
this process's namespace has nothing but ``lo``): nothing listens on, or sends to, the machine's
real interfaces. Run as root inside ``unshare --net``::

    unshare --net bash -c 'ip link set lo up && python -m pytest plugins/pycollect-ray/tests'

Tearing down never uses ``ray stop``, which stops every Ray process on the machine (other
users' clusters included, whatever their namespace): the head's processes are one process group
(``ray start --block`` in a session of its own) and the worker node's are every process in its
namespace; both are killed, the namespace deleted (its end of the veth pair goes with it, and
with it ours) and the temporary folder removed. :meth:`TwoNodeCluster.leftovers` says what, if
anything, survived.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

__all__ = ["HEAD_IP", "PORT", "WORKER_IP", "NamespaceUnavailable", "TwoNodeCluster", "unavailable_reason"]

HEAD_IP = "10.213.0.1"
WORKER_IP = "10.213.0.2"
PORT = 6390
"""The head's GCS port (any: the head's namespace is private)."""

_PREFIX = 30
# Node loss is noticed by the GCS health check of each raylet; Ray's defaults (a check every 3 s,
# 5 failures) take 15 s or more. These still tolerate a loaded 2-core machine.
_HEALTH_CHECK = {
    "RAY_health_check_initial_delay_ms": "1000",
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_timeout_ms": "2000",
    "RAY_health_check_failure_threshold": "4",
}
_counter = 0


class NamespaceUnavailable(RuntimeError):
    """Network namespaces cannot be made here (not root, no ``ip``, or not inside a namespace of our own)."""


def _ip(*args: str, netns: str | None = None) -> str:
    command = ["ip", *(["netns", "exec", netns, "ip"] if netns else []), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {done.stderr.strip()}")
    return done.stdout


def unavailable_reason() -> str | None:
    """Why a :class:`TwoNodeCluster` cannot be made in this process, or ``None`` if it can."""
    if not sys.platform.startswith("linux"):
        return "network namespaces are Linux only"
    if os.geteuid() != 0:
        return "making network namespaces needs root"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    with contextlib.suppress(OSError):
        if os.stat("/proc/self/ns/net").st_ino == os.stat("/proc/1/ns/net").st_ino:
            return "this process runs in the host's network namespace; run it inside `unshare --net`"
    names = {name for _, name in socket.if_nameindex()}
    if not names <= {"lo"}:
        return f"this network namespace has interfaces besides lo ({sorted(names)}); run inside `unshare --net`"
    return None


def _session_members(sid: int) -> list[int]:
    """Live processes of session ``sid`` (Ray's processes keep the session of ``ray start``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        if int(fields[3]) == sid and fields[0] not in ("Z", "X"):
            found.append(int(entry.name))
    return found


class TwoNodeCluster:
    """A Ray head here and a Ray worker node in a network namespace of its own, linked by a veth pair.

    Use it as a context manager (or :meth:`start` and :meth:`close`, which always tears down
    whatever was made, even after a failed start).

    Args:
        head_cpus: ``--num-cpus`` of the head.
        worker_cpus: ``--num-cpus`` of the worker node.
        timeout_s: The longest to wait for a node to join (and for processes to go at close).
        env: More environment variables for both nodes' Ray processes.

    Attributes:
        address: The head's GCS address (``10.213.0.1:6390``), for ``ray.init`` or ``RayEngine(address=...)``.
        netns: The worker node's namespace.
        token: The cluster's authentication token (Ray's token auth, on as it is by default):
            both nodes have it, and so does this process's environment once started
            (``RAY_AUTH_TOKEN``), as a user would give it to each host and to the trainer.
    """

    def __init__(
        self,
        *,
        head_cpus: int = 1,
        worker_cpus: int = 1,
        timeout_s: float = 120.0,
        env: Mapping[str, str] | None = None,
    ) -> None:
        global _counter
        reason = unavailable_reason()
        if reason is not None:
            raise NamespaceUnavailable(reason)
        _counter += 1
        self.netns = f"pycollect-node-{os.getpid()}-{_counter}"
        self.veth = ("pch0", "pcn0")  # names live inside each namespace, so they never collide across runs
        self.address = f"{HEAD_IP}:{PORT}"
        self.head_cpus = head_cpus
        self.worker_cpus = worker_cpus
        self.timeout_s = timeout_s
        self.token = secrets.token_hex(32)
        self.tmp = Path(tempfile.mkdtemp(prefix=f"pycollect-ray-{os.getpid()}-"))
        self.extra_env = dict(env or {})
        self.head: subprocess.Popen[bytes] | None = None
        self.worker: subprocess.Popen[bytes] | None = None
        self._worker_starts = 0
        self._made_netns = False
        self._old_env: dict[str, str | None] = {}

    # -- bring-up --------------------------------------------------------------------------

    def __enter__(self) -> TwoNodeCluster:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Make the namespace and the link, start both nodes, wait until the cluster has 2 alive nodes.

        Raises:
            NamespaceUnavailable: The namespace cannot be made here (nothing was started).
            RuntimeError: A node did not come up (its ``ray start`` log is quoted).
        """
        try:
            _ip("link", "set", "lo", "up")
            _ip("netns", "add", self.netns)
        except RuntimeError as exc:  # e.g. root in a user namespace only: /run/netns cannot be mounted
            raise NamespaceUnavailable(f"cannot make a network namespace here: {exc}") from exc
        self._made_netns = True
        _ip("link", "set", "lo", "up", netns=self.netns)
        here, there = self.veth
        _ip("link", "add", here, "type", "veth", "peer", "name", there, "netns", self.netns)
        _ip("addr", "add", f"{HEAD_IP}/{_PREFIX}", "dev", here)
        _ip("link", "set", here, "up")
        _ip("addr", "add", f"{WORKER_IP}/{_PREFIX}", "dev", there, netns=self.netns)
        _ip("link", "set", there, "up", netns=self.netns)
        # The trainer (this process) talks to the cluster with the cluster's token, as on a host.
        for key, value in {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token}.items():
            self._old_env.setdefault(key, os.environ.get(key))
            os.environ[key] = value
        if "ray" in sys.modules:
            import ray

            if ray.is_initialized():
                raise RuntimeError("this process is already a Ray driver; a process drives one cluster at a time")
            # Ray read RAY_AUTH_MODE into its config when it was imported; read it again (as
            # ray.init does when it turns token auth on for a local cluster).
            from ray._raylet import Config  # type: ignore[attr-defined]

            Config.initialize("")
        self.head = self._ray_start(
            None,
            ["--head", f"--port={PORT}", "--include-dashboard=false"],
            HEAD_IP,
            self.head_cpus,
            {"node_head": 1},
        )
        self.start_worker()

    def worker_alive(self) -> bool:
        """Whether the worker node's ``ray start`` still runs (not after :meth:`kill_worker`)."""
        return self.worker is not None and self.worker.poll() is None

    def start_worker(self) -> None:
        """Start (or, after :meth:`kill_worker`, start again) the worker node and wait until it is alive."""
        self._worker_starts += 1
        self.worker = self._ray_start(
            self.netns, [f"--address={self.address}"], WORKER_IP, self.worker_cpus, {"node_worker": 1}
        )
        self.wait_nodes(2)

    def _ray_start(
        self, netns: str | None, args: list[str], ip: str, cpus: int, resources: dict[str, int]
    ) -> subprocess.Popen[bytes]:
        command = [
            # `ray start` with this interpreter: Ray's workers on the node run the Python that
            # started it, so they import what this process imports (this venv's pycollect).
            sys.executable,
            "-m",
            "ray.scripts.scripts",
            "start",
            *args,
            f"--node-ip-address={ip}",
            f"--num-cpus={cpus}",
            "--num-gpus=0",
            f"--resources={json.dumps(resources)}",
            f"--temp-dir={self.tmp}",
            "--disable-usage-stats",
            "--block",  # in the foreground: its process group is the node's (see close())
        ]
        if netns is not None:
            command = ["ip", "netns", "exec", netns, *command]
        name = "head" if netns is None else f"worker-{self._worker_starts}"
        log = (self.tmp / f"{name}.log").open("wb")
        env = {**os.environ, **_HEALTH_CHECK, **self.extra_env, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token}
        with log:
            return subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )

    def wait_nodes(self, alive: int) -> list[dict[str, object]]:
        """Wait until the cluster reports ``alive`` alive nodes (a fresh driver asks the GCS); their records.

        Raises:
            RuntimeError: Not within ``timeout_s``, or a node's ``ray start`` exited (its log is quoted).
        """
        script = (
            "import json, sys, time, ray\n"
            "ray.init(address=sys.argv[1], log_to_driver=False, logging_level='ERROR')\n"
            "deadline = time.monotonic() + float(sys.argv[3])\n"
            "while True:\n"
            "    nodes = [n for n in ray.nodes() if n['Alive']]\n"
            "    if len(nodes) == int(sys.argv[2]) or time.monotonic() > deadline: break\n"
            "    time.sleep(0.2)\n"  # polls the GCS, bounded by the deadline
            "keep = ('NodeID', 'NodeManagerAddress', 'Resources')\n"
            "print(json.dumps([{k: n[k] for k in keep} for n in nodes]))\n"
        )
        deadline = time.monotonic() + self.timeout_s
        while True:
            for process, what in ((self.head, "head"), (self.worker, f"worker-{self._worker_starts}")):
                if process is not None and process.poll() is not None:
                    raise RuntimeError(f"ray start ({what}) exited with {process.returncode}:\n{self.log(what)}")
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"the cluster did not reach {alive} alive nodes within {self.timeout_s:g} s")
            done = subprocess.run(
                [sys.executable, "-c", script, self.address, str(alive), str(left)],
                capture_output=True,
                text=True,
                timeout=left + 60,
            )
            if done.returncode == 0:
                nodes: list[dict[str, object]] = json.loads(done.stdout.strip().splitlines()[-1])
                if len(nodes) == alive:
                    return nodes
                raise RuntimeError(f"the cluster has {len(nodes)} alive nodes after {self.timeout_s:g} s, not {alive}")
            time.sleep(0.5)  # the head's GCS is not up yet: connect again, bounded by the deadline

    def log(self, name: str = "head") -> str:
        """The last lines ``ray start`` wrote for a node (``head``, ``worker-1``, ...)."""
        path = self.tmp / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-30:]) if path.exists() else ""

    # -- the worker node's processes --------------------------------------------------------

    def worker_pids(self) -> list[int]:
        """Every process in the worker node's namespace (its raylet, agents, Ray workers and theirs)."""
        if not self._made_netns:
            return []
        done = subprocess.run(["ip", "netns", "pids", self.netns], capture_output=True, text=True, timeout=30)
        return [int(pid) for pid in done.stdout.split()] if done.returncode == 0 else []

    def head_pids(self) -> list[int]:
        """Every process of the head node (the session of its ``ray start``: GCS, raylet, Ray workers and theirs)."""
        return _session_members(self.head.pid) if self.head is not None else []

    def kill_worker(self) -> None:
        """The worker node is lost: SIGKILL every process in its namespace (its raylet and all under it)."""
        self._kill_until_gone(self.worker_pids)
        if self.worker is not None:
            self.worker.wait(timeout=self.timeout_s)

    def _kill_until_gone(self, find: Callable[[], list[int]]) -> None:
        deadline = time.monotonic() + self.timeout_s
        while pids := [pid for pid in find() if pid != os.getpid()]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"processes {pids} survived SIGKILL for {self.timeout_s:g} s")
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)  # dying processes may still show; look again, bounded by the deadline

    # -- teardown --------------------------------------------------------------------------

    def close(self) -> None:
        """Tear everything down: this process's driver connection, both nodes' processes, the namespace, the folder."""
        if "ray" in sys.modules:
            import ray

            # A driver left connected to a GCS that goes away aborts its process (after 60 s).
            if ray.is_initialized():
                ray.shutdown()
        errors: list[str] = []
        for step in (self._close_worker, self._close_head, self._close_net):
            try:
                step()
            except Exception as exc:  # tear down the rest anyway; report every failure at the end
                errors.append(f"{step.__name__}: {exc}")
        for key, value in self._old_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._old_env.clear()
        shutil.rmtree(self.tmp, ignore_errors=True)
        if errors:
            raise RuntimeError("tearing the two-node cluster down failed: " + "; ".join(errors))

    def _close_worker(self) -> None:
        self._kill_until_gone(self.worker_pids)
        if self.worker is not None:
            self.worker.wait(timeout=self.timeout_s)

    def _close_head(self) -> None:
        if self.head is not None:
            self._kill_until_gone(self.head_pids)
            self.head.wait(timeout=self.timeout_s)

    def _close_net(self) -> None:
        if self._made_netns:
            # Deleting the namespace deletes its veth end, and a veth pair goes as one.
            _ip("netns", "delete", self.netns)
            self._made_netns = False
        with contextlib.suppress(RuntimeError):  # already gone with its peer
            _ip("link", "delete", self.veth[0])

    def leftovers(self) -> list[str]:
        """What survived :meth:`close`: processes, the namespace, the link, the temporary folder (empty: nothing)."""
        found = []
        if members := self.head_pids():
            found.append(f"head processes {members}")
        names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30).stdout
        if any(line.split()[0] == self.netns for line in names.splitlines() if line.strip()):
            found.append(f"network namespace {self.netns} (processes {self.worker_pids()})")
        links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, timeout=30).stdout
        if f" {self.veth[0]}@" in links or f" {self.veth[0]}:" in links:
            found.append(f"link {self.veth[0]}")
        if self.tmp.exists():
            found.append(f"folder {self.tmp}")
        return found

    def node_ids(self) -> dict[str, str]:
        """``{"head": node id, "worker": node id}`` of the alive nodes, asked from a fresh driver."""
        found = {}
        for node in self.wait_nodes(2):
            resources = node["Resources"]
            assert isinstance(resources, dict)
            found["head" if "node_head" in resources else "worker"] = str(node["NodeID"])
        return found
