"""Make ``docs/img/pycollect-top.svg``: ``pycollect top``'s frame of a real collection with a straggler.

A 4-worker async collection of a test env whose steps sleep, worker 3 five times longer than
the others, with a small torch policy whose weights are published every 10 batches. After
``--seconds`` of collecting, the collection's counters are read as ``pycollect top`` reads them
(:func:`pycollect.metrics.attach` on this process) and the frame is saved as SVG by ``rich``.

Run from the repository root::

    python docs/_tooling/top_screenshot.py                # writes docs/img/pycollect-top.svg
    python docs/_tooling/top_screenshot.py --serve        # collect until Ctrl-C, to watch with
                                                          # 'pycollect top' from another terminal
"""

from __future__ import annotations

import argparse
import os
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich._export_format import CONSOLE_SVG_FORMAT
from rich.console import Console

import pycollect
from pycollect.metrics import attach
from pycollect.metrics._top import render_metrics
from pycollect.testing.envs import CountingEnv

OUT = Path(__file__).resolve().parents[1] / "img" / "pycollect-top.svg"
DELAYS_S = (0.0005, 0.0005, 0.0005, 0.0025)  # per env step; worker 3 is 5x slower


class SleepyEnv(CountingEnv):
    """A CountingEnv whose steps take ``delay_s`` (a simulator of that speed)."""

    def __init__(self, delay_s: float) -> None:
        super().__init__(length=200)
        self.delay_s = delay_s

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Sleep, then step."""
        time.sleep(self.delay_s)
        return super().step(action)


def main() -> None:
    """Collect, then save the frame (or collect until Ctrl-C with ``--serve``)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=8.0, help="seconds to collect before the frame is taken")
    parser.add_argument("--serve", action="store_true", help="collect until Ctrl-C; write nothing")
    parser.add_argument("--out", type=Path, default=OUT, help=f"the SVG to write (default {OUT})")
    args = parser.parse_args()
    net = torch.nn.Sequential(torch.nn.Linear(2, 64), torch.nn.Tanh(), torch.nn.Linear(64, 3))

    def policy(td: Any) -> torch.Tensor:
        actions: torch.Tensor = net(td["observation"]).argmax(-1)
        return actions

    with pycollect.Collector(
        SleepyEnv,
        policy=policy,
        weights_from=net,
        num_workers=4,
        envs_per_worker=4,
        frames_per_batch=4 * 32,
        sync=False,
        env_kwargs=[{"delay_s": delay} for delay in DELAYS_S],
        total_frames=-1,
    ) as collector:
        print(f"collecting in pid {os.getpid()}: watch with 'pycollect top {os.getpid()}'", flush=True)
        reader = attach(os.getpid())
        started = time.monotonic()
        try:
            for batch_index, _ in enumerate(collector):
                if batch_index % 10 == 9:
                    collector.update_policy_weights_()
                if not args.serve and time.monotonic() - started > args.seconds:
                    break
        except KeyboardInterrupt:
            return
        console = Console(record=True, width=176, file=open(os.devnull, "w"))  # noqa: SIM115
        console.print(render_metrics(reader.read()))
        console.file.close()
    # The docs fetch nothing when viewed: the SVG uses the reader's monospace font, not web fonts.
    offline = re.sub(r"@font-face \{.*?\}\n", "", CONSOLE_SVG_FORMAT, flags=re.DOTALL)
    console.save_svg(str(args.out), title="pycollect top", code_format=offline)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
