"""A third-party plugin package, pip-installed into a fresh virtual environment, extends
pycollect without touching it: its backend and its weight-sync scheme run a real
multi-process collection, and ``pycollect plugins`` lists them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parent / "plugin_packages" / "pycollect-example"

pytestmark = pytest.mark.timeout(600)

COLLECT = """
import torch
import pycollect
from pycollect.testing import check_env_backend, check_scheme

class Policy(torch.nn.Module):  # action = its parameter: frames show which weights made them
    def __init__(self):
        super().__init__()
        self.right = torch.nn.Parameter(torch.tensor(0.0))

    def forward(self, position):
        return self.right.detach().long().expand(position.shape[0]).clone()

policy = Policy()
with pycollect.Collector(
    "example:walk-5", policy, frames_per_batch=64, envs_per_worker=2, num_workers=2, weight_sync="file", seed=0
) as collector:
    first = collector.next_batch()
    with torch.no_grad():
        policy.right.fill_(1.0)
    collector.update_policy_weights_()
    batches = [collector.next_batch() for _ in range(4)]
    workers = [w.pid for w in collector.stats().workers]
last = batches[-1]
print(json.dumps({
    "workers": workers,
    "first_actions": first["action"].unique().tolist(),
    "last_actions": last["action"].unique().tolist(),
    "last_versions": last["policy_version"].unique().tolist(),
    "observation": list(last["observation"].shape),
}))
check_env_backend("example", "walk-5", unknown_target="run-5")
check_scheme("file")
"""


def _venv(tmp_path: Path) -> Path:
    """A virtual environment that sees this one's packages (pycollect, torch, pip, setuptools) and installs its own."""
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True, timeout=120
    )
    return venv / "bin" / "python"


def _run(python: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, **(env or {})},
    )


def test_an_installed_plugin_package_is_found_listed_and_used_by_workers(tmp_path: Path) -> None:
    python = _venv(tmp_path)
    source = shutil.copytree(PACKAGE, tmp_path / "source")  # the build writes build/ and *.egg-info beside it
    install = _run(python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", str(source))
    assert install.returncode == 0, install.stderr

    listed = _run(python, "-m", "pycollect", "plugins", "--json")
    assert listed.returncode == 0, listed.stderr
    listing = json.loads(listed.stdout)
    backend = next(item for item in listing["env_backends"] if item["name"] == "example")
    scheme = next(item for item in listing["schemes"] if item["name"] == "file")
    for item in (backend, scheme):
        assert (item["plugin"], item["distribution"], item["version"], item["builtin"]) == (
            "example",
            "pycollect-example",
            "0.3.0",
            False,
        )
    assert backend["class"] == "pycollect_example.backend.WalkBackend"
    table = _run(python, "-m", "pycollect", "plugins").stdout
    assert "weight-sync scheme  file" in table and "pycollect-example 0.3.0" in table

    collected = _run(python, "-c", "import json\n" + COLLECT, env={"PYTHONPATH": ""})
    assert collected.returncode == 0, collected.stderr
    report = json.loads(collected.stdout.splitlines()[0])
    assert len(report["workers"]) == 2 and report["observation"] == [4, 16, 1]
    assert report["first_actions"] == [0]  # the weights the policy started with
    assert report["last_actions"] == [1] and report["last_versions"] == [1]  # the weights sent through files

    disabled = _run(
        python, "-m", "pycollect", "plugins", "--json", env={"PYCOLLECT_DISABLE_PLUGINS": "pycollect-example"}
    )
    listing = json.loads(disabled.stdout)
    assert "example" not in {item["name"] for item in listing["env_backends"]}
    assert {"plugin": "example", "reason": "disabled by PYCOLLECT_DISABLE_PLUGINS"} in listing["not_loaded"]
