"""The repository's dm_control example (``examples/dmcontrol_cheetah.py``) runs end to end.

It needs this plugin, so it is tested here, where the plugin is installed, and not with the
other examples in the main suite. It runs as a reader would run it, as its own process with a
tiny budget; its last ``RESULT {...}`` line carries its figures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "dmcontrol_cheetah.py"


@pytest.mark.timeout(150)
def test_dmcontrol_cheetah_example_runs_with_a_tiny_budget() -> None:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE), "--total-frames", "2000", "--frames-per-batch", "1000"],
        cwd=EXAMPLE.parent.parent,
        env={**os.environ, "MUJOCO_GL": "disable"},
        capture_output=True,
        text=True,
        timeout=140,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"the example exited with {proc.returncode}:\n{output[-6000:]}"
    results = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert results, f"the example printed no RESULT line:\n{output[-6000:]}"
    result = json.loads(results[-1].removeprefix("RESULT "))
    assert result["frames"] == 2000
    assert result["frames_per_s"] > 0
