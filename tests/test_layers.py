"""Imports run one way: the layers contract of pyproject.toml holds, and covers every module."""

from __future__ import annotations

import os
import pkgutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import pycollect

ROOT = Path(__file__).resolve().parents[1]


def _layers() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = (c for c in config["contracts"] if c["type"] == "layers")
    return [name.strip() for layer in contract["layers"] for name in layer.replace(":", "|").split("|")]


def test_every_module_of_the_package_is_in_a_layer() -> None:
    named = set(_layers())
    modules = {f"pycollect.{info.name}" for info in pkgutil.iter_modules(pycollect.__path__)}
    modules.discard("pycollect._core")  # the native module: it imports nothing of ours
    assert modules <= named, f"add these to a layer in pyproject.toml [tool.importlinter]: {sorted(modules - named)}"


@pytest.mark.timeout(120)
def test_the_layers_contract_is_kept() -> None:
    lint_imports = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run(
        [str(lint_imports), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=100, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 kept, 0 broken" in result.stdout


def test_the_config_is_a_leaf_that_loads_no_plugin() -> None:
    code = (
        "import sys; from pycollect.config import CollectorConfig; "
        "config = CollectorConfig(frames_per_batch=8, engine='no-such-engine', weight_sync='no-such-scheme'); "
        "print(sorted(m for m in sys.modules if m.startswith('pycollect.')), config.engine)"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True, env=env)
    imported, engine = out.stdout.rsplit(" ", 1)
    assert engine.strip() == "no-such-engine"  # a name stays a name until the collector resolves it
    for module in ("pycollect.plugins", "pycollect.default_plugins", "pycollect.engines", "pycollect.envs"):
        assert repr(module) not in imported, imported
