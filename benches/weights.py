"""Policy-weight sync: ``update_policy_weights_()`` next to one memcpy and TorchRL, in one run.

For each size P (``--sizes``, float32 parameters) the bench builds one policy and measures, in
interleaved rounds (memcpy, pycollect copy, pycollect view, TorchRL, memcpy, ...), pycollect
once per mode of its ``shared_memory`` scheme (``--modes``, default both:
``SharedMemoryScheme(mode="copy")``, the default, where each worker copies the published
weights into its own policy, and ``mode="view"``, where workers' parameters are read-only views
of the published buffer):

``memcpy``
    One ``dst.copy_(src)`` of the P float32 parameters (4P bytes) into already-touched memory,
    the floor every figure is divided by (median of 3 copies per round).
``pycollect update``
    ``Collector(..., num_workers=2, sync=True).update_policy_weights_()`` wall time, after the
    trainer wrote the new weights into its module in place (not timed).
``pycollect until workers act``
    From calling ``update_policy_weights_()`` until every worker's frames in the delivered
    batches carry the new ``policy_version`` (the bench keeps calling ``next_batch()``); per
    worker, with the number of batches it took.
``pycollect worker apply``
    Inside each worker, the wall time of the scheme's ``receive()`` that took the new version
    (pin, then copy into the policy, or point its parameters at the buffer and check nothing
    else keeps their old storage): the bench's scheme wraps the receiver with a timer that
    writes into a small shared file. The slower worker's time per round.
``TorchRL update``
    ``MultiSyncCollector(...).update_policy_weights_()`` with the same module class, the same
    env and 2 workers, its default weight sync (``SharedMemWeightSyncScheme``).
``TorchRL until workers act``
    From calling it until every worker's frames show the new weights (TorchRL frames carry no
    version: the policy's own torn-check output says which weights it ran with).

The policy (:class:`WeightBank`) has P float32 parameters but a cheap forward: a "bank" of
tensors (at most 4M elements each, like the layers of a large network) it only samples, and a
4->2 linear head that picks the CartPole action. Its forward also outputs ``bank_min`` and
``bank_max``: the min and max over a strided sample (64 elements, the first and last included)
of every parameter tensor, head included. Before publishing version v the trainer fills every
parameter with v, so a frame is *torn* if ``bank_min != bank_max`` (it ran with a mix of two
weight sets) or, for pycollect, if the value differs from its ``policy_version``. The table
counts torn frames over every batch delivered in the timed part (it must be 0).

TorchRL's default scheme for an ``nn.Module`` policy shares the trainer's own parameter storage
with its workers (``TensorDict.from_module(policy)`` moved into shared memory, the workers'
modules pointing at it), so workers see every in-place write the trainer makes, with or without
an update call. The bench checks this once per size ("aliasing probe": fill, no update call,
one batch) and reports what the workers saw. Its ``update_policy_weights_()`` then copies the
weights onto themselves, tells every worker's background thread to "receive" (which copies the
shared tensors onto the worker's module, the same storage) and waits for each acknowledgement.

After the rounds, per contender: ``frames/s`` over ``--fps-batches`` batches with an update
after every batch (the trainer fills its module, then ``update_policy_weights_()``: the
cadence of a training loop that updates after each batch, the worst case for the weight path),
and over as many batches without updates.

Env: CartPole-v1, 2 workers, ``--envs`` (default 2) envs per worker, ``--steps`` (default 8)
steps per rollout, so a rollout is short and the time until workers act is the weight path.
Both collectors of one size live side by side (their workers are idle between batches: a
pycollect sync worker waits with one rollout ready, a TorchRL worker waits for "continue"),
and are shut down before the next size. Memory for 100M parameters: pycollect keeps the
trainer's module, a packed copy and 3 store buffers, and each worker a module and a read buffer
(9 x 400 MB); TorchRL one shared copy; plus the memcpy pair: about 4.5 GB at peak.

Run:
    python benches/weights.py                         # 1M, 25M, 100M; 5 rounds (1-3 min)
    python benches/weights.py --sizes 1e6,4e7 --no-torchrl   # copy vs view mode
    python benches/weights.py --quick                 # 1M only, 3 rounds (20-40 s; for CI)
    python benches/weights.py --sizes 25e6 --rounds 9
    python benches/weights.py --replot benches/results/weights.json --plot docs/img/weights.png

Writes ``benches/results/weights.json`` and ``benches/results/weights.png`` (``--out``,
``--plot``).
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import math
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np
import psutil
import torch
from tensordict.nn import TensorDictModule
from torch import nn

import pycollect
from pycollect import SharedMemoryScheme
from pycollect.config import SLOTS_PER_WORKER
from pycollect.weights import WeightReceiver, WeightSender
from pycollect.weights.scheme import ReceiverContext, SenderContext

sys.path.insert(0, str(Path(__file__).parent))
from throughput import _git, _machine, _stats, _steal  # the house helpers; sets 1 torch thread

RESULTS = Path(__file__).parent / "results"
WORKERS = 2
CHUNK = 4 << 20  # elements per bank tensor at most
SAMPLES = 64  # strided samples per tensor for the torn check
BATCH_LIMIT = 20  # batches to wait for every worker to act with a version before giving up
PROBE_BATCHES = 10  # batches taken while a thread keeps writing the trainer's module


# -- the policy ------------------------------------------------------------------------------


class WeightBank(nn.Module):
    """P float32 parameters, a forward that reads ~64 of each, and a torn-check output.

    Returns ``(action, bank_min, bank_max)`` for a ``[B, 4]`` CartPole observation; the action
    is an index, or one-hot (``one_hot=True``) as TorchRL's ``GymEnv`` wants.
    """

    def __init__(self, params: int, one_hot: bool = False) -> None:
        super().__init__()
        self.head = nn.Linear(4, 2)
        rest = max(0, params - sum(p.numel() for p in self.head.parameters()))
        count = max(1, math.ceil(rest / CHUNK))
        sizes = [rest // count + (1 if i < rest % count else 0) for i in range(count)]
        self.bank = nn.ParameterList(nn.Parameter(torch.zeros(n), requires_grad=False) for n in sizes if n)
        self.one_hot = one_hot
        with torch.no_grad():
            self.head.weight.zero_()
            self.head.bias.zero_()

    def fill_(self, value: float) -> None:
        """Write ``value`` into every parameter, in place (what an optimizer step does, roughly)."""
        with torch.no_grad():
            for param in self.parameters():
                param.fill_(value)

    def forward(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        lows, highs = [], []
        for param in self.parameters():
            flat = param.detach().reshape(-1)
            step = max(1, flat.numel() // SAMPLES)
            sample = torch.cat([flat[::step], flat[-1:]])
            lows.append(sample.min())
            highs.append(sample.max())
        low, high = torch.stack(lows).min(), torch.stack(highs).max()
        logits = self.head(observation)
        # the bank's value is the same on both logits, so the action follows the pole's angle
        action = (observation[..., 2] + logits[..., 1] - logits[..., 0] > 0).long()
        if self.one_hot:
            action = nn.functional.one_hot(action, 2)
        rows = observation.shape[:-1]
        return action, low.expand(rows).clone(), high.expand(rows).clone()


def _policy(params: int, one_hot: bool) -> TensorDictModule:
    return TensorDictModule(
        WeightBank(params, one_hot), in_keys=["observation"], out_keys=["action", "bank_min", "bank_max"]
    )


def _bank(policy: TensorDictModule) -> WeightBank:
    module = policy.module
    assert isinstance(module, WeightBank)
    return module


def _torchrl_cartpole() -> Any:
    from torchrl.envs import GymEnv

    return GymEnv("CartPole-v1")


# -- measurement -----------------------------------------------------------------------------


def _rows_of(worker: int, k: int) -> slice:
    return slice(worker * k, (worker + 1) * k)


class Torn:
    """Counts torn frames: ``bank_min != bank_max``, or a value that is not the frame's version."""

    def __init__(self) -> None:
        self.frames = 0
        self.torn = 0
        self.examples: list[str] = []

    def check(self, low: torch.Tensor, high: torch.Tensor, version: torch.Tensor | None) -> None:
        bad = low != high
        if version is not None:
            bad |= low != version.to(low.dtype)
        self.frames += low.numel()
        count = int(bad.sum())
        if count:
            self.torn += count
            if len(self.examples) < 5:
                i = bad.reshape(-1).nonzero()[0, 0]
                what = "" if version is None else f", policy_version {int(version.reshape(-1)[i])}"
                self.examples.append(f"min {float(low.reshape(-1)[i])}, max {float(high.reshape(-1)[i])}{what}")


def _until_all_act(next_batch: Any, value: float, k: int, t0: float, torn: Torn, versioned: bool) -> dict[str, Any]:
    """Take batches until every worker's rows ran with ``value``; seconds and batches per worker."""
    seen_s: list[float | None] = [None] * WORKERS
    seen_batches: list[int | None] = [None] * WORKERS
    for n in range(1, BATCH_LIMIT + 1):
        batch = next_batch()
        now = time.perf_counter() - t0
        low, high = batch["bank_min"], batch["bank_max"]
        version = batch["policy_version"] if versioned else None
        torn.check(low, high, version)
        for w in range(WORKERS):
            if seen_s[w] is None:
                ran = (version if versioned else low)[_rows_of(w, k)]
                # a rollout never mixes weights (torn counts it otherwise), so "every frame" it is
                if bool((ran.to(torch.float64) == value).all()):
                    seen_s[w], seen_batches[w] = now, n
        if all(s is not None for s in seen_s):
            break
    all_s = None if None in seen_s else max(s for s in seen_s if s is not None)
    return {"per_worker_s": seen_s, "per_worker_batches": seen_batches, "all_s": all_s}


def _probes(contender: Any, next_batch: Any, versioned: bool, value: float) -> dict[str, Any]:
    """What workers see of the trainer's in-place writes when nobody calls ``update_policy_weights_()``.

    1. Fill the trainer's module with ``value`` and take one batch: which weights did it run with?
    2. A thread keeps filling the module with new values (as an optimizer stepping) while this
       thread takes ``PROBE_BATCHES`` batches: how many frames ran with a half-written set?
    """
    bank = _bank(contender.policy)
    bank.fill_(value)
    batch = next_batch()
    saw = sorted({float(v) for v in batch["bank_min"].unique()})
    stop = threading.Event()
    writes = [0]

    def writer() -> None:
        while not stop.is_set():
            writes[0] += 1
            bank.fill_(value - writes[0])

    torn = Torn()
    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        for _ in range(PROBE_BATCHES):
            batch = next_batch()
            torn.check(batch["bank_min"], batch["bank_max"], batch["policy_version"] if versioned else None)
    finally:
        stop.set()
        thread.join()
    return {
        "filled": value,
        "next_batch_values": saw,
        "saw_it_without_update": saw == [value],
        "concurrent_writes": writes[0],
        "concurrent_frames": torn.frames,
        "concurrent_torn": torn.torn,
        "concurrent_torn_examples": torn.examples,
    }


class MemcpyContender:
    """``dst.copy_(src)`` of P float32s, both touched beforehand."""

    def __init__(self, params: int) -> None:
        self.src = torch.full((params,), 1.0)
        self.dst = torch.zeros(params)
        self.dst.copy_(self.src)

    def round(self, value: float) -> dict[str, Any]:
        self.src.fill_(value)
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            self.dst.copy_(self.src)
            times.append(time.perf_counter() - t0)
        return {"copy_s": statistics.median(times), "copies_s": times}

    def close(self) -> None:
        del self.src, self.dst


class _TimedReceiver(WeightReceiver):
    """A worker's receiver that writes how long each ``receive()`` that took weights lasted.

    Row ``worker`` of the shared float64 file ``path`` holds (receives that took weights, the
    seconds of the last one).
    """

    def __init__(self, inner: WeightReceiver, path: str) -> None:
        self.inner = inner
        self.path = path
        self._row: np.ndarray | None = None

    def attach(self, context: ReceiverContext) -> None:
        self.inner.attach(context)
        self._row = np.memmap(self.path, np.float64, "r+", shape=(WORKERS, 2))[context.worker]

    def receive(self, module: nn.Module) -> int | None:
        t0 = time.perf_counter()
        version = self.inner.receive(module)
        if version is not None and self._row is not None:
            self._row[1] = time.perf_counter() - t0
            self._row[0] += 1
        return version

    def close(self) -> None:
        self.inner.close()


class _TimedScheme(SharedMemoryScheme):
    """The shared_memory scheme whose workers time their ``receive()`` (see :class:`_TimedReceiver`)."""

    def __init__(self, mode: str, path: str) -> None:
        super().__init__(mode)  # type: ignore[arg-type]
        self.path = path

    def sender(self, context: SenderContext) -> WeightSender:
        inner, path = super().sender(context), self.path

        class Sender(WeightSender):
            def receiver(self) -> WeightReceiver:
                return _TimedReceiver(inner.receiver(), path)

            def send(self, state: Any, version: int, *, timeout_s: float) -> None:
                inner.send(state, version, timeout_s=timeout_s)

            def close(self) -> None:
                inner.close()

        return Sender()


class PycollectContender:
    """``Collector(CartPole-v1, WeightBank, num_workers=2, sync=True, weight_sync=SharedMemoryScheme(mode))``."""

    def __init__(self, params: int, k: int, steps: int, mode: str) -> None:
        self.name = f"pycollect {mode}"
        self.k = k
        self.policy = _policy(params, one_hot=False)
        self.applies = RESULTS / f".apply-{os.getpid()}-{mode}.f64"
        self.applies.parent.mkdir(parents=True, exist_ok=True)
        self.applies.write_bytes(bytes(WORKERS * 2 * 8))
        self.apply_times = np.memmap(self.applies, np.float64, "r", shape=(WORKERS, 2))
        t0 = time.perf_counter()
        self.collector = pycollect.Collector(
            "CartPole-v1",
            self.policy,
            frames_per_batch=WORKERS * k * steps,
            envs_per_worker=k,
            num_workers=WORKERS,
            sync=True,
            seed=0,
            weight_sync=_TimedScheme(mode, str(self.applies)),
        )
        self.collector.next_batch()
        self.startup_s = time.perf_counter() - t0
        self.torn = Torn()

    def round(self, value: float) -> dict[str, Any]:
        b0 = time.perf_counter()
        batch = self.collector.next_batch()  # a plain batch, for scale
        batch_s = time.perf_counter() - b0
        self.torn.check(batch["bank_min"], batch["bank_max"], batch["policy_version"])
        _bank(self.policy).fill_(value)
        version = self.collector.policy_version + 1
        assert version == value, (version, value)
        applied = self.apply_times[:, 0].copy()
        t0 = time.perf_counter()
        self.collector.update_policy_weights_()
        update_s = time.perf_counter() - t0
        acted = _until_all_act(self.collector.next_batch, value, self.k, t0, self.torn, versioned=True)
        # every worker acted with the new version, so each took it exactly once since `applied`
        took = self.apply_times[:, 0] - applied
        apply_s = [float(s) if n == 1 else None for n, s in zip(took, self.apply_times[:, 1], strict=True)]
        return {
            "update_s": update_s,
            "batch_s": batch_s,
            "apply_s": _slowest(apply_s),
            "per_worker_apply_s": apply_s,
            **acted,
        }

    def fps(self, batches: int, first_value: float) -> dict[str, Any]:
        return _fps(
            self, self.collector.next_batch, batches, first_value, lambda: self.collector.update_policy_weights_()
        )

    def probe(self, value: float) -> dict[str, Any]:
        return _probes(self, self.collector.next_batch, True, value)

    def close(self) -> None:
        t0 = time.perf_counter()
        self.collector.shutdown()
        self.close_s = time.perf_counter() - t0
        del self.collector, self.policy, self.apply_times
        self.applies.unlink(missing_ok=True)


def _slowest(values: list[float | None]) -> float | None:
    return None if None in values else max(v for v in values if v is not None)


def _fps(contender: Any, next_batch: Any, batches: int, first_value: float, update: Any) -> dict[str, Any]:
    """Frames/s over ``batches`` batches with an update after each, then as many without."""
    bank = _bank(contender.policy)
    frames = 0
    t0 = time.perf_counter()
    for i in range(batches):
        frames += next_batch().numel()
        bank.fill_(first_value + i)
        update()
    updating = frames / (time.perf_counter() - t0)
    frames = 0
    t0 = time.perf_counter()
    for _ in range(batches):
        frames += next_batch().numel()
    return {"fps_updating": updating, "fps_plain": frames / (time.perf_counter() - t0), "batches": batches}


class TorchRLContender:
    """TorchRL ``MultiSyncCollector``, 2 workers, each a ``SerialEnv`` of K ``GymEnv``."""

    name = "TorchRL"

    def __init__(self, params: int, k: int, steps: int) -> None:
        from torchrl.collectors import MultiSyncCollector
        from torchrl.envs import SerialEnv

        self.k = k
        self.policy = _policy(params, one_hot=True)
        t0 = time.perf_counter()
        make = functools.partial(SerialEnv, k, _torchrl_cartpole)
        # cat_results=0: [2K, T] batches, worker w's envs in rows w*K..(w+1)*K as in pycollect's
        self.collector = MultiSyncCollector(
            [make] * WORKERS, self.policy, frames_per_batch=WORKERS * k * steps, total_frames=-1, cat_results=0
        )
        self.iterator = iter(self.collector)
        next(self.iterator)
        self.startup_s = time.perf_counter() - t0
        self.torn = Torn()

    def round(self, value: float) -> dict[str, Any]:
        b0 = time.perf_counter()
        batch = next(self.iterator)  # a plain batch, for scale
        batch_s = time.perf_counter() - b0
        self.torn.check(batch["bank_min"], batch["bank_max"], None)
        _bank(self.policy).fill_(value)
        t0 = time.perf_counter()
        self.collector.update_policy_weights_()
        update_s = time.perf_counter() - t0
        acted = _until_all_act(lambda: next(self.iterator), value, self.k, t0, self.torn, versioned=False)
        return {"update_s": update_s, "batch_s": batch_s, "apply_s": None, **acted}

    def fps(self, batches: int, first_value: float) -> dict[str, Any]:
        return _fps(self, lambda: next(self.iterator), batches, first_value, self.collector.update_policy_weights_)

    def probe(self, value: float) -> dict[str, Any]:
        return _probes(self, lambda: next(self.iterator), False, value)

    def close(self) -> None:
        t0 = time.perf_counter()
        self.collector.shutdown()
        self.close_s = time.perf_counter() - t0
        del self.iterator, self.collector, self.policy


# -- the run ---------------------------------------------------------------------------------


def _rss_gib() -> float:
    total = 0
    for proc in [psutil.Process(), *psutil.Process().children(recursive=True)]:
        try:
            total += proc.memory_full_info().uss
        except psutil.Error:
            continue
    return total / 2**30


def _size_label(params: int) -> str:
    return f"{params / 1e6:g}M"


def run_size(
    params: int, rounds: int, k: int, steps: int, skip_torchrl: bool, modes: list[str], fps_batches: int
) -> dict[str, Any]:
    """Every contender of one size, ``rounds`` interleaved rounds; everything freed at the end."""
    label = _size_label(params)
    print(f"== {label} float32 parameters ({params * 4 / 1e6:,.0f} MB): starting the collectors", flush=True)
    memcpy = MemcpyContender(params)
    contenders: list[Any] = [PycollectContender(params, k, steps, mode) for mode in modes]
    if not skip_torchrl:
        contenders.append(TorchRLContender(params, k, steps))
    startup = {c.name: c.startup_s for c in contenders}
    print("   startup " + ", ".join(f"{n} {s:.1f} s" for n, s in startup.items()), flush=True)
    peak_gib = _rss_gib()
    runs: list[dict[str, Any]] = []
    first: dict[str, Any] = {}
    try:
        for r in range(-1, rounds):  # round -1: the first call of each (first touch), reported apart
            value = float(r + 2)  # pycollect's policy_version after this round's update
            entry: dict[str, Any] = {"round": r, "load1": os.getloadavg()[0], "memcpy": memcpy.round(value)}
            for contender in contenders:
                entry[contender.name] = contender.round(value)
            copy = entry["memcpy"]["copy_s"]
            for contender in contenders:
                got = entry[contender.name]
                got["x_memcpy_update"] = got["update_s"] / copy
                got["x_memcpy_act"] = None if got["all_s"] is None else got["all_s"] / copy
            peak_gib = max(peak_gib, _rss_gib())
            if r < 0:
                first = entry
            else:
                runs.append(entry)
            what = "first call" if r < 0 else f"round {r + 1}/{rounds}"
            print(
                f"   {what} (load {entry['load1']:.1f}): memcpy {copy * 1e3:.2f} ms; "
                + "; ".join(
                    f"{c.name} update {entry[c.name]['update_s'] * 1e3:.2f} ms "
                    f"({entry[c.name]['x_memcpy_update']:.1f}x), "
                    + (
                        ""
                        if entry[c.name]["apply_s"] is None
                        else f"worker apply {entry[c.name]['apply_s'] * 1e3:.2f} ms, "
                    )
                    + "until act "
                    + (
                        "never"
                        if entry[c.name]["all_s"] is None
                        else f"{entry[c.name]['all_s'] * 1e3:.1f} ms ({entry[c.name]['x_memcpy_act']:.1f}x, "
                        f"batches {entry[c.name]['per_worker_batches']})"
                    )
                    for c in contenders
                ),
                flush=True,
            )
        fps = {}
        for contender in contenders:
            fps[contender.name] = contender.fps(fps_batches, float(rounds + 2))
            got = fps[contender.name]
            print(
                f"   {contender.name}: {got['fps_updating']:,.0f} frames/s updating after every batch, "
                f"{got['fps_plain']:,.0f} without updates",
                flush=True,
            )
            peak_gib = max(peak_gib, _rss_gib())
        probe = {c.name: c.probe(-1000.0) for c in contenders}
    finally:
        torn = {c.name: {"frames": c.torn.frames, "torn": c.torn.torn, "examples": c.torn.examples} for c in contenders}
        close = {}
        for contender in contenders:
            contender.close()
            close[contender.name] = contender.close_s
        memcpy.close()
        del contenders, memcpy
        gc.collect()
    return {
        "params": params,
        "bytes": params * 4,
        "startup_s": startup,
        "close_s": close,
        "peak_uss_gib": peak_gib,
        "torn": torn,
        "aliasing_probe": probe,
        "first_call": first,
        "runs": runs,
        "fps": fps,
        "summary": _summary(runs, torn),
    }


def _summary(runs: list[dict[str, Any]], torn: dict[str, dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"memcpy_s": _stats([e["memcpy"]["copy_s"] for e in runs])}
    for name in torn:
        row: dict[str, Any] = {"torn_frames": torn[name]["torn"], "frames_checked": torn[name]["frames"]}
        for key in ("update_s", "all_s", "x_memcpy_update", "x_memcpy_act", "batch_s", "apply_s"):
            values = [e[name][key] for e in runs if e[name][key] is not None]
            row[key] = _stats(values) if values else None
        row["never_acted_rounds"] = sum(e[name]["all_s"] is None for e in runs)
        for w in range(WORKERS):
            values = [e[name]["per_worker_s"][w] for e in runs if e[name]["per_worker_s"][w] is not None]
            row[f"worker{w}_s"] = _stats(values) if values else None
            row[f"worker{w}_batches"] = sorted({e[name]["per_worker_batches"][w] for e in runs}, key=str)
        out[name] = row
    return out


def _print_table(results: list[dict[str, Any]], rounds: int) -> None:
    print(f"\nmedian (min-max) over {rounds} rounds; ratios are per round, to that round's memcpy")
    header = (
        f"{'size':>6s} {'contender':15s} {'update ms':>22s} {'x memcpy':>18s} {'worker apply ms':>22s} "
        f"{'until act ms':>24s} {'x memcpy':>20s} {'batches w0/w1':>13s} {'plain batch ms':>20s} "
        f"{'frames/s upd':>12s} {'frames/s':>9s} {'torn':>9s}"
    )
    print(header)
    print("-" * len(header))

    def cell(s: dict[str, float] | None, scale: float = 1.0, fmt: str = ".2f") -> str:
        if s is None:
            return "-"
        return f"{s['median'] * scale:{fmt}} ({s['min'] * scale:{fmt}}-{s['max'] * scale:{fmt}})"

    for res in results:
        summary, label = res["summary"], _size_label(res["params"])
        print(f"{label:>6s} {'memcpy':15s} {cell(summary['memcpy_s'], 1e3):>22s}")
        for name in _contenders(res):
            row = summary[name]
            batches = "/".join(",".join(map(str, row[f"worker{w}_batches"])) for w in range(WORKERS))
            update, act = cell(row["update_s"], 1e3), cell(row["all_s"], 1e3, ".1f")
            x_update, x_act = cell(row["x_memcpy_update"], fmt=".1f"), cell(row["x_memcpy_act"], fmt=".1f")
            torn = f"{row['torn_frames']}/{row['frames_checked']}"
            fps = res.get("fps", {}).get(name, {})
            print(
                f"{label:>6s} {name:15s} {update:>22s} {x_update:>18s} {cell(row['apply_s'], 1e3):>22s} "
                f"{act:>24s} {x_act:>20s} {batches:>13s} {cell(row['batch_s'], 1e3, '.1f'):>20s} "
                f"{fps.get('fps_updating', float('nan')):>12,.0f} {fps.get('fps_plain', float('nan')):>9,.0f} "
                f"{torn:>9s}"
            )
        for name, probe in res["aliasing_probe"].items():
            print(
                f"{label:>6s} {name} without update calls: filled {probe['filled']}, next batch ran with "
                f"{probe['next_batch_values']}; {probe['concurrent_writes']} fills during {PROBE_BATCHES} batches: "
                f"{probe['concurrent_torn']}/{probe['concurrent_frames']} frames torn"
            )
        first = res["first_call"]
        print(
            f"{label:>6s} first call (not in the medians): memcpy {first['memcpy']['copy_s'] * 1e3:.1f} ms, "
            + ", ".join(
                f"{n} update {first[n]['update_s'] * 1e3:.1f} ms, until act "
                + ("never" if first[n]["all_s"] is None else f"{first[n]['all_s'] * 1e3:.1f} ms")
                for n in _contenders(res)
            )
        )


def _contenders(res: dict[str, Any], pycollect_only: bool = False) -> list[str]:
    """The contenders of a size's result, in run order (a result saved before modes: "pycollect")."""
    names = [name for name in res["summary"] if name != "memcpy_s"]
    return [name for name in names if name.startswith("pycollect")] if pycollect_only else names


def _targets(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    checks = []
    for res in results:
        for name in _contenders(res, pycollect_only=True):
            checks.extend(_size_targets(res, name))
    return checks


def _size_targets(res: dict[str, Any], name: str) -> list[dict[str, Any]]:
    checks = []
    row, label = res["summary"][name], f"{_size_label(res['params'])} {name}"
    if res["params"] >= 100_000_000 and row["x_memcpy_update"]:
        value = row["x_memcpy_update"]["median"]
        checks.append({"target": f"{label}: update <= 1.5x memcpy", "median": value, "met": value <= 1.5})
    # A sync worker runs up to SLOTS_PER_WORKER rollouts ahead: when the update comes, one
    # finished rollout may wait in its ring and one be in progress. The rollout it starts
    # next is its "next rollout", so it reaches the trainer at the latest in batch
    # SLOTS_PER_WORKER + 1.
    batches = [b for w in range(WORKERS) for b in row[f"worker{w}_batches"]]
    latest = SLOTS_PER_WORKER + 1
    checks.append(
        {
            "target": f"{label}: every worker acts with the new version from its next rollout "
            f"(batch <= {latest} after the call)",
            "batches": batches,
            "met": all(b is not None and b <= latest for b in batches),
        }
    )
    torn = row["torn_frames"]
    checks.append({"target": f"{label}: zero torn frames", "torn": torn, "met": not torn})
    return checks


def main() -> None:
    """Run the benchmark and print, save and plot the results."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1e6,25e6,1e8", help="comma-separated float32 parameter counts")
    parser.add_argument("--rounds", type=int, default=None, help="default 5 (3 with --quick)")
    parser.add_argument("--quick", action="store_true", help="1M parameters only, 3 rounds (for CI)")
    parser.add_argument("--envs", type=int, default=2, help="K: envs per worker")
    parser.add_argument("--steps", type=int, default=8, help="steps per env per rollout")
    parser.add_argument("--no-torchrl", action="store_true", help="leave TorchRL out")
    parser.add_argument(
        "--modes", default="copy,view", help="comma-separated SharedMemoryScheme modes, one pycollect contender each"
    )
    parser.add_argument(
        "--fps-batches", type=int, default=20, help="batches per frames/s figure (with, then without updates)"
    )
    parser.add_argument("--out", "--json", default=str(RESULTS / "weights.json"), help="the JSON result file")
    parser.add_argument("--plot", default=None, help="the PNG plot (default: next to --out)")
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument("--replot", metavar="JSON", help="instead: redraw the plot of a saved JSON result")
    args = parser.parse_args()
    if args.replot:
        saved = json.loads(Path(args.replot).read_text())
        path = Path(args.plot) if args.plot else Path(args.replot).with_suffix(".png")
        _plot(path, saved["results"], saved["rounds"], saved.get("label", ""))
        print(f"wrote {path}")
        return
    sizes = [1_000_000] if args.quick else [int(float(s)) for s in args.sizes.split(",") if s.strip()]
    rounds = args.rounds or (3 if args.quick else 5)
    started = time.perf_counter()
    steal0 = _steal()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    results = [run_size(p, rounds, args.envs, args.steps, args.no_torchrl, modes, args.fps_batches) for p in sizes]
    elapsed = time.perf_counter() - started
    steal_s = (_steal() - steal0) / os.sysconf("SC_CLK_TCK")
    _print_table(results, rounds)
    checks = _targets(results)
    print("\ntargets:")
    for check in checks:
        shown = {k: v for k, v in check.items() if k not in ("target", "met")}
        print(f"  {'MET   ' if check['met'] else 'MISSED'} {check['target']}: {shown}")
    print(f"\nwall time {elapsed:.0f} s, steal {steal_s:.1f} s, load average now {os.getloadavg()[0]:.1f}")
    git = _git()
    record = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "when": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "label": f"commit {git['commit']}, {time.strftime('%Y-%m-%d')}",
        "rounds": rounds,
        "envs_per_worker": args.envs,
        "steps_per_rollout": args.steps,
        "workers": WORKERS,
        "modes": modes,
        "fps_batches": args.fps_batches,
        "quick": args.quick,
        "machine": _machine(),
        "git": git,
        "steal_s": steal_s,
        "wall_s": elapsed,
        "targets": checks,
        "results": results,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1))
    wrote = f"wrote {out}"
    if not args.no_plot:
        plot = Path(args.plot) if args.plot else out.with_suffix(".png")
        _plot(plot, results, rounds, record["label"])
        wrote += f" and {plot}"
    print(wrote)
    if any(r["summary"][name]["torn_frames"] for r in results for name in _contenders(r, pycollect_only=True)):
        sys.exit("pycollect delivered torn frames")


def _plot(path: Path, results: list[dict[str, Any]], rounds: int, label: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.patches import Patch

    colours = {  # (update, until workers act)
        "pycollect": ("#C44E52", "#E8A0A2"),
        "pycollect copy": ("#C44E52", "#E8A0A2"),
        "pycollect view": ("#55A868", "#A8D5B4"),
        "TorchRL": ("#8172B2", "#C3B9DD"),
    }
    bars: list[tuple[str, str | None, str, str | None, str]] = [  # label, summary row, time key, ratio key, colour
        ("memcpy", None, "memcpy_s", None, "#4C72B0")
    ]
    for name in dict.fromkeys(n for res in results for n in _contenders(res)):
        update, act = colours.get(name, ("#937860", "#D0BBA8"))
        bars.append((f"{name} update", name, "update_s", "x_memcpy_update", update))
        bars.append((f"{name} until workers act", name, "all_s", "x_memcpy_act", act))
    fig, ax = plt.subplots(figsize=(10, 4.8))
    width = 0.8 / len(bars)
    x = np.arange(len(results))
    for i, (_name, who, key, ratio_key, color) in enumerate(bars):
        pos = x + (i - (len(bars) - 1) / 2) * width
        for p, res in zip(pos, results, strict=True):
            row = res["summary"] if who is None else res["summary"].get(who)
            stat = None if row is None else row.get(key)
            if not stat:
                continue
            med, low, high = (stat[k] * 1e3 for k in ("median", "min", "max"))
            ax.bar(p, med, width, yerr=[[med - low], [high - med]], color=color, capsize=2)
            # the median of the per-round ratios, as in the tables
            ratio = None if ratio_key is None else row[ratio_key]["median"]
            text = f"{med:.3g} ms" if ratio is None else f"{ratio:.0f}x" if ratio >= 10 else f"{ratio:.2g}x"
            ax.text(p, high * 1.12, text, ha="center", va="bottom", fontsize=6.5, rotation=90)
    ax.set_yscale("log")
    ax.set_xticks(x, [f"{_size_label(r['params'])} params\n({r['bytes'] / 1e6:,.0f} MB)" for r in results])
    ax.set_ylabel("ms (log; median, min-max whiskers)")
    ax.set_ylim(top=ax.get_ylim()[1] * 8)
    ax.grid(axis="y", which="both", alpha=0.25)
    ax.legend(handles=[Patch(color=c, label=n) for n, *_, c in bars], fontsize=8, loc="upper left")
    ax.set_title(
        f"Policy-weight sync, 2 workers, {rounds} rounds ({label}); labels: median per-round ratio to one memcpy",
        fontsize=9,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
