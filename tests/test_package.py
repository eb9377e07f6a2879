"""The package's public surface: exports, exception hierarchy, and the native stub."""

from __future__ import annotations

import ast
import inspect
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

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
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):  # a private one is a typing aid
            members = {name for name in dir(getattr(_core, node.name)) if not name.startswith("_")}
            assert _names(node.body) == members, node.name


# A parameter as a signature check sees it: (name, kind, has a default).
_Param = tuple[str, str, bool]


def _stub_params(function: ast.FunctionDef) -> list[_Param]:
    args = function.args
    positional = [*args.posonlyargs, *args.args]
    defaults = [False] * (len(positional) - len(args.defaults)) + [True] * len(args.defaults)
    params: list[_Param] = [
        (arg.arg, "positional-only" if i < len(args.posonlyargs) else "positional", default)
        for i, (arg, default) in enumerate(zip(positional, defaults, strict=True))
    ]
    if args.vararg is not None:
        params.append((args.vararg.arg, "*args", False))
    params += [
        (arg.arg, "keyword-only", d is not None) for arg, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
    ]
    if args.kwarg is not None:
        params.append((args.kwarg.arg, "**kwargs", False))
    is_static = any(ast.unparse(d) == "staticmethod" for d in function.decorator_list)
    return params if is_static or not params or params[0][0] != "self" else params[1:]


_KINDS = {
    inspect.Parameter.POSITIONAL_ONLY: "positional-only",
    inspect.Parameter.POSITIONAL_OR_KEYWORD: "positional",
    inspect.Parameter.VAR_POSITIONAL: "*args",
    inspect.Parameter.KEYWORD_ONLY: "keyword-only",
    inspect.Parameter.VAR_KEYWORD: "**kwargs",
}


def _native_params(obj: object) -> list[_Param]:
    text = obj.__text_signature__  # type: ignore[attr-defined]
    params = [
        (p.name, _KINDS[p.kind], p.default is not inspect.Parameter.empty)
        for p in inspect.signature(obj).parameters.values()  # type: ignore[arg-type]
    ]
    return params[1:] if text.startswith("($self") else params  # the receiver, not an argument


def _native_callables() -> dict[str, object]:
    """Every native function, method and constructor with a text signature, by stub path."""
    found: dict[str, object] = {}
    for name in dir(_core):
        obj = getattr(_core, name)
        if name.startswith("_"):
            continue
        if inspect.isclass(obj):
            if getattr(obj, "__text_signature__", None):
                found[f"{name}.__init__"] = obj
            for member in dir(obj):
                attr = getattr(obj, member)
                if not member.startswith("_") and getattr(attr, "__text_signature__", None):
                    found[f"{name}.{member}"] = attr
        elif getattr(obj, "__text_signature__", None):
            found[name] = obj
    return found


def _stub_functions() -> dict[str, ast.FunctionDef]:
    found: dict[str, ast.FunctionDef] = {}
    for node in _stub().body:
        if isinstance(node, ast.FunctionDef):
            found[node.name] = node
        elif isinstance(node, ast.ClassDef):
            for member in node.body:
                if isinstance(member, ast.FunctionDef) and not any(
                    ast.unparse(d) == "property" or ast.unparse(d).endswith(".setter") for d in member.decorator_list
                ):
                    found[f"{node.name}.{member.name}"] = member
    return found


def test_core_stub_signatures_match_the_binary() -> None:
    """Parameter names, kinds and which have defaults agree between the stub and the binary."""
    native, stub = _native_callables(), _stub_functions()
    assert "Supervisor.__init__" in native and "Segment.create" in native and "wait_any" in native
    for path, obj in native.items():
        assert path in stub, f"{path} has a text signature but the stub declares no function"
        assert _stub_params(stub[path]) == _native_params(obj), path
    # Every stub function with a native counterpart was compared (slots such as __buffer__
    # and classes without a constructor have none).
    missing = {path for path in stub if path not in native and not path.rsplit(".", 1)[-1].startswith("_")}
    assert not missing, missing


TORCH_FREE = [
    "pycollect.worker",
    "pycollect._workers.main",
    "pycollect._workers.rollouts",
    "pycollect._workers.spec",
    "pycollect._workers.contract",
    "pycollect._rollout.runner",
    "pycollect._rollout.actions",
    "pycollect._rollout.action_source",
    "pycollect._rollout.fields",
    "pycollect._rollout.seeding",
    "pycollect._steps.group",
    "pycollect._steps.spaces",
    "pycollect._steps.infos",
    "pycollect._steps.backend",
    "pycollect._step_backends.inprocess",
    "pycollect.vector",
    "pycollect.vector._env_calls",
    "pycollect.envs",
    "pycollect.envs.source",
    "pycollect.devices",
    "pycollect.weights",
    "pycollect.hookspecs",
    "pycollect.config",
    "pycollect.default_plugins.gymnasium_backend",
    "pycollect.default_plugins.callable_backend",
    "pycollect.default_plugins.shared_memory_scheme",
    "pycollect.default_plugins.no_sync_scheme",
    "pycollect.default_plugins.cpu_devices",
    "pycollect.default_plugins.round_robin_devices",
    "pycollect.default_plugins.explicit_devices",
    "pycollect.default_plugins.step_backends",
    "pycollect.vector.backend",
]


def test_what_a_random_policy_worker_imports_is_torch_free() -> None:
    """Worker start-up stays at numpy + gymnasium when there is no policy to run."""
    import subprocess
    import sys

    code = f"import sys; import {', '.join(TORCH_FREE)}; print('torch' in sys.modules, 'tensordict' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["False", "False"]


class ModulesEnv(gym.Env):
    """Observes, in the process that steps it, which heavy modules are imported."""

    WATCHED = ("torch", "tensordict", "pycollect.plugins")  # gymnasium itself reads entry points

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(0, 1, (len(self.WATCHED),), np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):  # type: ignore[no-untyped-def]
        return self._observe(), {}

    def step(self, action):  # type: ignore[no-untyped-def]
        return self._observe(), 0.0, False, False, {}

    def _observe(self) -> np.ndarray:
        return np.array([name in sys.modules for name in self.WATCHED], np.float32)


@pytest.mark.timeout(120)
def test_a_random_policy_worker_imports_neither_torch_nor_the_plugin_manager(monkeypatch: pytest.MonkeyPatch) -> None:
    # The promise is about an exec'd worker (the fallback): one forked by the fork server has
    # torch already, at no cost, because the server imported it once for every worker.
    monkeypatch.setenv("PYCOLLECT_FORK_SERVER", "0")
    with pycollect.Collector(ModulesEnv, frames_per_batch=8, num_workers=1) as collector:
        batch = collector.next_batch()
    imported = batch["next", "observation"].amax(dim=(0, 1))
    assert dict(zip(ModulesEnv.WATCHED, imported.tolist(), strict=True)) == dict.fromkeys(ModulesEnv.WATCHED, 0.0)
