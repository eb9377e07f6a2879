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

On a machine without CUDA it says it was skipped and why, and exits 0. Exit 1 on a failed check.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

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
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        why = "torch was built without CUDA" if torch.version.cuda is None else "no CUDA device is visible"
        print(f"gpu_check: skipped: {why} (torch {torch.__version__}); nothing to check on this machine")
        return 0
    print(f"gpu_check: {torch.cuda.device_count()} CUDA device(s), cuda:0 is {torch.cuda.get_device_name(0)}")
    policy = Policy()
    frames_per_batch = 2 * args.envs * 64
    with Collector(
        "CartPole-v1",
        policy,
        frames_per_batch=frames_per_batch,
        envs_per_worker=args.envs,
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
        while time.perf_counter() - start < args.seconds:
            frames += collector.next_batch().numel()
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
    rate = frames / elapsed
    print(f"gpu_check: {rate:,.0f} frames/s ({frames} frames in {elapsed:.1f} s, 2 workers x {args.envs} envs)")
    print("gpu_check: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
