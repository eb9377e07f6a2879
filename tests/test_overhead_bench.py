"""``benches/overhead.py`` still runs: it times private methods, so a rename must fail here, not in a bench run."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benches" / "overhead.py"


@pytest.mark.timeout(180)
def test_overhead_bench_prints_both_parts() -> None:
    run = subprocess.run(
        [sys.executable, str(BENCH), "--rounds", "1", "--frames", "2048", "--batches", "3"],
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    loop = re.search(r"native stepper ([\d.]+), resets ([\d.]+) \(env.reset ([\d.]+); (\d+) a batch\)", run.stdout)
    assert loop is not None, run.stdout
    stepper, resets, env_resets, count = loop.groups()
    assert float(stepper) > 0 and float(resets) >= float(env_resets) > 0 and int(count) > 0
    pattern = r"(\d) worker\(s\), +(\d+) frames a batch .*assembling ([\d.]+) us/frame, workers. CPU"
    rows = re.findall(pattern, run.stdout)
    assert [(w, f) for w, f, _ in rows] == [("1", "512"), ("2", "512"), ("1", "1024"), ("2", "1024")], run.stdout
    assert all(float(assemble) > 0 for _, _, assemble in rows)
    per_batch = re.search(r"per batch, us: episode record (\d+), TensorDict (\d+), arrays (\d+)", run.stdout)
    assert per_batch is not None, run.stdout
    stepper_pattern = r"native stepper ([\d.]+) us per env step \| Python loop storing nothing ([\d.]+)"
    stepper_row = re.search(stepper_pattern, run.stdout)
    assert stepper_row is not None and all(float(v) > 0 for v in stepper_row.groups()), run.stdout
    vector = re.search(
        r"the serial share: ([\d.]+) us\), waiting ([\d.]+); the whole trainer process ([\d.]+) us", run.stdout
    )
    assert vector is not None and all(float(v) >= 0 for v in vector.groups()), run.stdout
