"""Imports run one way: the contracts of pyproject.toml hold, cover every module, and leave no circle."""

from __future__ import annotations

import os
import pkgutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

import pycollect

ROOT = Path(__file__).resolve().parents[1]


def _importlinter() -> dict[str, Any]:
    config: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return config


def _layers() -> list[str]:
    (contract,) = (c for c in _importlinter()["contracts"] if c["type"] == "layers")
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
    assert f"{len(_importlinter()['contracts'])} kept, 0 broken" in result.stdout


def test_no_module_imports_one_that_imports_it_back() -> None:
    """No circle of imports between modules, package ``__init__`` modules included, annotations counted.

    The ``acyclic_siblings`` contract sees circles between the parts of each package; this
    sees every circle of single modules, and names it.
    """
    import grimp

    config = _importlinter()
    graph = grimp.build_graph(
        "pycollect", exclude_type_checking_imports=config["exclude_type_checking_imports"], cache_dir=None
    )
    ignored = {
        tuple(part.strip() for part in line.split("->"))
        for contract in config["contracts"]
        for line in contract.get("ignore_imports", ())
    }
    edges = {
        module: {m for m in graph.find_modules_directly_imported_by(module) if (module, m) not in ignored}
        for module in graph.modules
    }
    circles = [sorted(component) for component in _strongly_connected(edges) if len(component) > 1]
    assert not circles, f"modules that import each other, directly or through others: {circles}"


def _strongly_connected(edges: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's strongly connected components, iteratively."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                components.append(component)
    return components


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
