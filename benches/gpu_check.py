"""The device path on a real GPU: two workers running a torch policy on ``cuda:0``.

Run ``python benches/gpu_check.py``. Where CUDA is present it starts two workers with
``device_policy=ExplicitPolicy(["cuda:0", "cuda:0"])`` (with one GPU this is also what
``"round_robin"`` gives), so each worker moves its copy of the policy to ``cuda:0`` and its
rollouts are delivered on ``cuda:0`` (pinned staging, ``non_blocking=True`` copies). It then
checks, and prints:

* the batch's device (every tensor must be on ``cuda:0``);
* that the policy ran on the GPU in the workers (it reports ``is_cuda`` per frame);
* that ``update_policy_weights_()`` reaches the workers: after it, a batch's frames carry the
  new ``policy_version`` within a bounded number of batches, and act with the new weights;
* frames per second over a timed run.

Then it compares central inference with a policy copy per worker (issue 19), on Atari-shaped
work: ALE Pong as ``benches/atari_env.py`` builds it where ``ale-py`` is installed, else
``benches/frames_env.py`` (random 84x84x4 frames, ~500 µs of CPU per step), with the Nature CNN
(``benches/nature_cnn.py``), ``--workers`` workers and, in turn, each total of ``--totals`` envs:

* ``central``: ``Collector(engine="central", policy_device="cuda:0")``, one CNN call per step
  per group (two groups, each half of every worker's envs), observations staged in pinned memory;
* ``workers``: ``Collector(engine="workers", device_policy="round_robin")``, a CNN copy on the
  GPU in every worker (a CUDA context each), over its own envs.

For each total it prints both rates and their ratio (target: central >= 3x workers at 16 envs or
more), the policy's batch size in each engine, and where the time goes: the envs alone
(``central`` with random actions: the ceiling) and one CNN call at each batch size, with its
copies. ``--compare-only --device cpu`` runs the comparison on the CPU (a smoke test of this
script; the figures mean nothing there).

On a machine without CUDA it says it was skipped and why, and exits 0. Exit 1 on a failed check.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # workers inherit it: they import the env by name
from nature_cnn import NatureCNN

from pycollect import Collector, ExplicitPolicy


class Policy(torch.nn.Module):
    """Argmax over a linear layer on CartPole's observation; reports where it ran."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)
        with torch.no_grad():
            self.linear.weight.zero_()
            self.linear.bias.copy_(torch.tensor([1.0, 0.0]))  # action 0 until the weights change

    def forward(self, observation: torch.Tensor) -> dict[str, torch.Tensor]:
        action = self.linear(observation).argmax(-1)
        on_cuda = torch.full_like(action, int(self.linear.weight.is_cuda))
        return {"action": action, "on_cuda": on_cuda}


def _fail(message: str) -> int:
    print(f"gpu_check: FAILED: {message}")
    return 1


def main(argv: list[str] | None = None) -> int:
    """Run the checks; 0 when they pass or when there is no GPU."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the timed run")
    parser.add_argument("--envs", type=int, default=8, help="environments per worker")
    parser.add_argument("--workers", type=int, default=4, help="workers in the central/workers comparison")
    parser.add_argument("--totals", default="16,32,64", help="total envs of each comparison, comma-separated")
    parser.add_argument("--compare-seconds", type=float, default=8.0, help="timed run of each comparison rate")
    parser.add_argument("--compare-only", action="store_true", help="skip the device-path checks")
    parser.add_argument("--device", default="cuda:0", help="where central runs the policy (cpu: a smoke test)")
    args = parser.parse_args(argv)
    totals = [int(total) for total in args.totals.split(",")]
    if args.device == "cpu":
        compare_central(torch.device("cpu"), totals, args.workers, args.compare_seconds)
        return 0
    if not torch.cuda.is_available():
        why = "torch was built without CUDA" if torch.version.cuda is None else "no CUDA device is visible"
        print(f"gpu_check: skipped: {why} (torch {torch.__version__}); nothing to check on this machine")
        return 0
    print(f"gpu_check: {torch.cuda.device_count()} CUDA device(s), cuda:0 is {torch.cuda.get_device_name(0)}")
    if not args.compare_only and (failed := check_device_path(args.seconds, args.envs)):
        return failed
    compare_central(torch.device(args.device), totals, args.workers, args.compare_seconds)
    print("gpu_check: OK")
    return 0


def check_device_path(seconds: float, envs: int) -> int:
    """The device-path checks of two workers with their policy on ``cuda:0``; 0 when they pass."""
    policy = Policy()
    frames_per_batch = 2 * envs * 64
    with Collector(
        "CartPole-v1",
        policy,
        frames_per_batch=frames_per_batch,
        envs_per_worker=envs,
        num_workers=2,
        device_policy=ExplicitPolicy(["cuda:0", "cuda:0"]),
        seed=0,
    ) as collector:
        batch = collector.next_batch()
        devices = {str(tensor.device) for tensor in batch.values(True, True)}
        print(f"gpu_check: batch {tuple(batch.batch_size)} on {', '.join(sorted(devices))}")
        if devices != {"cuda:0"}:
            return _fail(f"batches should be on cuda:0, found {devices}")
        if not bool((batch["on_cuda"] == 1).all()):
            return _fail("the workers' policy did not run on CUDA")
        if not bool((batch["action"] == 0).all()):
            return _fail("with the initial weights every action is 0")

        with torch.no_grad():
            policy.linear.bias.copy_(torch.tensor([0.0, 1.0]))  # now every action is 1
        collector.update_policy_weights_()
        version = collector.policy_version
        for _ in range(10):  # workers load new weights between rollouts: a few batches at most
            batch = collector.next_batch()
            if bool((batch["policy_version"] == version).all()):
                break
        else:
            return _fail(f"policy_version {version} never reached every frame of a batch")
        if not bool((batch["action"] == 1).all()):
            return _fail("frames stamped with the new version did not act with the new weights")
        print(f"gpu_check: update_policy_weights_() reached both workers (policy_version {version})")

        frames, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            frames += collector.next_batch().numel()
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
    rate = frames / elapsed
    print(f"gpu_check: {rate:,.0f} frames/s ({frames} frames in {elapsed:.1f} s, 2 workers x {envs} envs)")
    return 0


def compare_central(device: torch.device, totals: list[int], workers: int, seconds: float) -> list[dict[str, Any]]:
    """``engine="central"`` on ``device`` against a policy copy per worker, for each total of envs; prints a table."""
    env = "callable:atari_env:make_env" if _have("ale_py", "cv2") else "callable:frames_env:make_env"
    placement = "round_robin" if device.type == "cuda" else "cpu"
    print(f"gpu_check: central vs workers ({placement}), {workers} workers, Nature CNN, env {env.split(':')[1]}")
    print(f"  {'envs':>5} {'central':>9} {'workers':>9} {'ratio':>6} {'envs only':>9}   policy batch and call (ms)")
    rows = []
    for total in totals:
        k = max(1, total // workers)
        settings: dict[str, Any] = {"envs_per_worker": k, "num_workers": workers, "frames_per_batch": workers * k * 32}
        central = _rate(Collector(env, NatureCNN(), engine="central", policy_device=device, **settings), seconds)
        per_worker = _rate(Collector(env, NatureCNN(), engine="workers", device_policy=placement, **settings), seconds)
        envs_only = _rate(Collector(env, None, engine="central", **settings), seconds)
        central_batch = workers * (k // min(2, k))  # two groups of each worker's envs, every worker in each
        calls = {batch: _call_ms(device, batch) for batch in sorted({central_batch, k})}
        row = {
            "envs": workers * k,
            "central": central,
            "workers": per_worker,
            "ratio": central / per_worker,
            "envs_only": envs_only,
            "central_batch": central_batch,
            "workers_batch": k,
            "call_ms": calls,
        }
        rows.append(row)
        call_text = f"central {central_batch}: {calls[central_batch]:.2f}, workers {k}: {calls[k]:.2f}"
        print(
            f"  {workers * k:>5} {central:>9,.0f} {per_worker:>9,.0f} {central / per_worker:>5.2f}x"
            f" {envs_only:>9,.0f}   {call_text}",
            flush=True,
        )
    return rows


def _rate(collector: Collector, seconds: float) -> float:
    """Frames per second of ``collector`` over ``seconds`` after one batch of warm-up; shuts it down."""
    with collector:
        collector.next_batch()
        frames, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            frames += collector.next_batch().numel()
        return frames / (time.perf_counter() - start)


def _call_ms(device: torch.device, batch: int, calls: int = 50) -> float:
    """One CNN call on ``batch`` Atari observations on ``device``, with the copies in and out (ms)."""
    policy = NatureCNN().to(device)
    observation = torch.randint(0, 256, (batch, 4, 84, 84), dtype=torch.uint8)
    with torch.no_grad():
        policy(observation.to(device)).cpu()  # warm-up (cuDNN picks its algorithms)
        start = time.perf_counter()
        for _ in range(calls):
            policy(observation.to(device)).cpu()
    return (time.perf_counter() - start) / calls * 1e3


def _have(*modules: str) -> bool:
    return all(importlib.util.find_spec(module) is not None for module in modules)


if __name__ == "__main__":
    sys.exit(main())
