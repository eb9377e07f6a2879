"""The package's public surface: exports, exception hierarchy, and the native stub."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pycollect
from pycollect import _core


def test_all_names_exist_and_version_comes_from_native_module() -> None:
    for name in pycollect.__all__:
        assert hasattr(pycollect, name), name
    assert pycollect.__version__ == _core.__version__
    assert pycollect.__version__.count(".") == 2


def test_every_exception_derives_from_pycollect_error() -> None:
    errors = [
        obj
        for obj in vars(pycollect).values()
        if inspect.isclass(obj) and issubclass(obj, Exception) and not issubclass(obj, Warning)
    ]
    assert errors
    for error in errors:
        assert issubclass(error, pycollect.PyCollectError), error
    assert issubclass(pycollect.ConfigError, ValueError)


def _stub_names() -> set[str]:
    stub = Path(pycollect.__file__).with_name("_core.pyi")
    names = set()
    for node in ast.parse(stub.read_text()).body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def test_core_stub_matches_the_binary() -> None:
    native = {name for name in dir(_core) if not name.startswith("__") or name == "__version__"}
    assert _stub_names() == native
