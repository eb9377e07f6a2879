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


def _stub() -> ast.Module:
    return ast.parse(Path(pycollect.__file__).with_name("_core.pyi").read_text())


def _is_type_alias(node: ast.stmt) -> bool:
    return isinstance(node, ast.AnnAssign) and ast.unparse(node.annotation) == "TypeAlias"


def _names(body: list[ast.stmt]) -> set[str]:
    names = set()
    for node in body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and not _is_type_alias(node):
            names.add(node.target.id)
    return {name for name in names if not name.startswith("_") or name == "__version__"}


def test_core_stub_matches_the_binary() -> None:
    stub = _stub()
    native = {name for name in dir(_core) if not name.startswith("_") or name == "__version__"}
    assert _names(stub.body) == native
    for node in stub.body:
        if isinstance(node, ast.ClassDef):
            members = {name for name in dir(getattr(_core, node.name)) if not name.startswith("_")}
            assert _names(node.body) == members, node.name


def test_a_random_policy_worker_does_not_import_torch() -> None:
    """Worker start-up stays at numpy + gymnasium when there is no policy to run."""
    import subprocess
    import sys

    code = (
        "import sys, pycollect.worker, pycollect._engines.workers.spec, pycollect._rollout.runner, pycollect._rollout.actions, "
        "pycollect._rollout.seeding, pycollect.envs.source; print('torch' in sys.modules, 'tensordict' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["False", "False"]
