"""Importing pycollect from a source tree without its native module (a clone's root after ``pip install .``).

Each test builds what a user has: ``clone/pycollect`` (a copy of the package without its native
module, next to a ``pyproject.toml``) and, where the test needs one, ``site/pycollect`` (a copy
with the native module: the installed package), then runs ``python -c "import pycollect"`` in
``clone``. ``python -S`` with ``PYTHONPATH`` holding only pluggy (all that ``import pycollect``
needs) and ``site`` keeps this machine's own pycollect out of sight. End to end, with a real
``pip install .``, ``.ci/run``'s quick-start step does the same.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pluggy
import pytest

import pycollect
from pycollect import _core

PACKAGE = Path(pycollect.__file__).parent
NATIVE = Path(_core.__file__)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """``clone/``, a source tree: the package without its native module, next to a pyproject.toml."""
    clone = tmp_path / "clone"
    shutil.copytree(PACKAGE, clone / "pycollect", ignore=shutil.ignore_patterns("__pycache__", "_core.*.so"))
    (clone / "pyproject.toml").write_text('[project]\nname = "pycollect-rl"\n')
    deps = tmp_path / "deps"
    deps.mkdir()
    (deps / "pluggy").symlink_to(Path(pluggy.__file__).parent)
    return clone


def _install(root: Path) -> Path:
    """``site/pycollect``: the package as ``pip install .`` installs it from ``root``; returns ``site``."""
    site = root.parent / "site"
    shutil.copytree(root / "pycollect", site / "pycollect")
    shutil.copy(NATIVE, site / "pycollect" / NATIVE.name)
    return site


def _python(root: Path, code: str, *path: Path) -> subprocess.CompletedProcess[str]:
    """``python -c code`` in ``root``, with pluggy and ``path`` on ``sys.path`` after the working directory."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    env["PYTHONPATH"] = os.pathsep.join(str(entry) for entry in (root.parent / "deps", *path))
    return subprocess.run(
        [sys.executable, "-S", "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=60
    )


def _import_error(out: subprocess.CompletedProcess[str]) -> str:
    """The message of the one ImportError that ``import pycollect`` ended with (no chained traceback)."""
    assert out.returncode == 1, out
    assert out.stderr.count("Traceback") == 1, out.stderr
    assert "ImportError: " in out.stderr, out.stderr
    return out.stderr.split("ImportError: ", 1)[1]


def test_without_an_installed_package_the_error_names_the_tree_and_the_fix(root: Path) -> None:
    message = _import_error(_python(root, "import pycollect"))
    assert message.startswith(f"pycollect was imported from {root / 'pycollect'}, a source tree without its native")
    assert "No installed pycollect was found elsewhere on sys.path." in message
    assert f"(in {root}): pip install -e ." in message
    assert "pip install ." in message
    assert "ModuleNotFoundError" not in message
    code = "try:\n    import pycollect\nexcept ImportError as e:\n    print(type(e).__name__, e.name, e.path)"
    out = _python(root, code)
    assert out.stdout.split() == ["ImportError", "pycollect._core", str(root / "pycollect")], out


def test_from_a_tree_the_installed_package_with_the_same_files_is_used(root: Path) -> None:
    site = _install(root)
    code = (
        "import json, logging, sys, pycollect, pycollect._lazy\n"
        "modules = {name: module.__file__ for name, module in sys.modules.items() if name.startswith('pycollect')}\n"
        "handlers = [type(h).__name__ for h in logging.getLogger('pycollect').handlers]\n"
        "spec = pycollect.__spec__\n"
        "print(json.dumps([pycollect.__file__, pycollect.__path__, spec.origin, spec.submodule_search_locations,"
        " pycollect.__version__, modules, handlers, hasattr(pycollect, '_source_tree')]))"
    )
    out = _python(root, code, site)
    assert out.returncode == 0, out.stderr
    file, path, origin, locations, version, modules, handlers, leftover = json.loads(out.stdout)
    installed = site / "pycollect"
    assert file == origin == str(installed / "__init__.py")
    assert path == locations == [str(installed)]
    assert version == pycollect.__version__
    assert modules["pycollect._core"] == str(installed / NATIVE.name)
    assert "pycollect._source_tree" not in modules
    assert all(Path(where).parent == installed for where in modules.values()), modules
    assert handlers == ["NullHandler"]
    assert not leftover


def test_an_installed_package_from_other_sources_is_not_used(root: Path) -> None:
    site = _install(root)
    with (root / "pycollect" / "cli.py").open("a") as file:
        file.write("# edited after pip install .\n")
    (root / "pycollect" / "scratch.py").write_text("")
    message = _import_error(_python(root, "import pycollect", site))
    assert message.startswith(f"pycollect was imported from {root / 'pycollect'}, a source tree without its native")
    assert (
        f"The pycollect installed at {site / 'pycollect'} was not used in its place: its Python files differ from "
        "this tree's (cli.py, scratch.py): it was installed from other sources, or the tree changed since." in message
    )
    assert f"(in {root}): pip install -e ." in message
    assert "run from another directory" in message


@pytest.mark.parametrize("broken", ["tree", "installed"])
def test_a_native_module_that_fails_to_load_keeps_its_own_error(root: Path, broken: str) -> None:
    site = _install(root)
    where = root if broken == "tree" else site
    (where / "pycollect" / NATIVE.name).write_bytes(b"not a shared object\n")
    out = _python(root, "import pycollect", site)
    assert out.returncode == 1
    assert f"ImportError: {where / 'pycollect' / NATIVE.name}: " in out.stderr, out.stderr  # the loader's own words
    assert "was imported from" not in out.stderr


def test_a_native_module_built_for_another_python_is_named(root: Path) -> None:
    (root / "pycollect" / "_core.cpython-39-x86_64-linux-gnu.so").write_bytes(b"")
    message = _import_error(_python(root, "import pycollect"))
    assert "It holds _core.cpython-39-x86_64-linux-gnu.so, which this Python" in message


def test_outside_a_source_tree_the_error_says_to_reinstall(root: Path) -> None:
    (root / "pyproject.toml").unlink()
    message = _import_error(_python(root, "import pycollect"))
    assert message.startswith(f"pycollect was imported from {root / 'pycollect'}, a package without its native module")
    assert "pip install --force-reinstall --no-deps pycollect-rl" in message
    assert "pip install -e" not in message
