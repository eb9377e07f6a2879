"""The README's example runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README has no python example"
    exec(compile(blocks[0], str(README), "exec"), {})
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 10
