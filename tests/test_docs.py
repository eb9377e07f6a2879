"""The plugin guide's examples run as written, and it documents every hook."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest
import torch

from pycollect import hookspecs, plugins

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "plugins.md"
BLOCK = re.compile(r"<!-- (module: (\w+)|test) -->\n```python\n(.*?)```", re.S)


@pytest.mark.timeout(300)
def test_the_plugin_guide_examples_pass_the_conformance_checkers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(plugins, "_registry", plugins._Registry())
    monkeypatch.syspath_prepend(str(tmp_path))  # workers get this sys.path, so they import the modules too
    modules, tests = [], []
    for _, module, source in BLOCK.findall(GUIDE.read_text()):
        if module:
            (tmp_path / f"{module}.py").write_text(source)
            modules.append(module)
        else:
            tests.append(source)
    assert len(modules) == 5 and len(tests) == 1, "an example per hook but engines, one test"
    importlib.invalidate_caches()
    namespace: dict[str, object] = {}
    for name in modules:
        module = importlib.import_module(name)
        plugins.register(module)
        namespace.update(vars(module))
    exec(compile(tests[0], str(GUIDE), "exec"), namespace)
    # The inference runner has no conformance checker: it runs a policy as the guide says.
    from pycollect import Collector
    from pycollect.testing.envs import CountingEnv

    policy = torch.nn.Sequential(torch.nn.Linear(2, 2), _Argmax())  # CountingEnv: Box(2) observations
    with Collector(CountingEnv, policy, frames_per_batch=8, inference_runner="bf16") as collector:
        assert collector.next_batch()["action"].shape == (1, 8)
    # The step backend has no conformance checker either: a vector env over it steps as the in-process one.
    _step_threaded_and_in_process()


def _step_threaded_and_in_process() -> None:
    import threading

    import numpy as np

    from pycollect.testing.envs import CountingEnv
    from pycollect.vector import make_vec

    stepped_in: list[str] = []

    class Recorded(CountingEnv):
        def step(self, action):  # type: ignore[no-untyped-def]
            stepped_in.append(threading.current_thread().name)
            return super().step(action)

    results = []
    for step_backend in ("threaded", None):
        venv = make_vec(Recorded, 3, num_workers=0, step_backend=step_backend)
        try:
            assert type(venv._backend).name == (step_backend or "inprocess")
            venv.reset(seed=1)
            results.append([venv.step(np.array([1, 0, 1]))[:4] for _ in range(5)])
        finally:
            venv.close()
    for threaded, plain in zip(*results, strict=True):
        for a, b in zip(threaded, plain, strict=True):
            np.testing.assert_array_equal(a, b)
    main = threading.main_thread().name
    assert main not in stepped_in[:15] and set(stepped_in[15:]) == {main}  # the threaded steps, then the plain ones


class _Argmax(torch.nn.Module):
    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.argmax(-1)


def test_every_hook_is_documented_with_its_signature() -> None:
    text = GUIDE.read_text()
    hooks = [name for name, value in vars(hookspecs).items() if hasattr(value, "pycollect_spec")]
    assert sorted(hooks) == [
        "register_device_policy",
        "register_engine",
        "register_env_backend",
        "register_inference_runner",
        "register_scheme",
        "register_step_backend",
    ]
    for hook in hooks:
        assert inspect.signature(getattr(hookspecs, hook)).parameters == {}
        assert f"`{hook}()`" in text, hook
