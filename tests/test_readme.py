"""The README's example runs as written."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README has no python example"
    exec(compile(blocks[0], str(README), "exec"), {})
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 10


ROOT = README.parent


def test_readme_is_a_front_door() -> None:
    # What pycollect is, how to run and test it, the three ways in, one figure table: the rest is
    # on the documentation site (docs/), which the README links into.
    assert len(README.read_bytes()) <= 12 * 1024, "README.md over 12 KB: move the details to docs/"


def test_readme_links_resolve() -> None:
    text = README.read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    local = [link.split("#")[0] for link in links if not re.match(r"[a-z]+:", link) and not link.startswith("#")]
    assert len(local) >= 10, local
    missing = [link for link in local if not (ROOT / link).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"


def test_readme_commands_are_the_projects() -> None:
    text = README.read_text()
    test_command = 'pip install -e ".[test]" && python -m pytest -n 2'
    assert test_command in text
    ci = (ROOT / ".ci" / "run").read_text()  # runs the same, as "$PYTHON" -m pip / pytest
    assert 'pip install -q -e ".[test]" && "$PYTHON" -m pytest -n 2' in ci
    docs_command = 'pip install -e ".[docs]" && mkdocs serve'
    assert docs_command in text
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(requirement.startswith("mkdocs-material") for requirement in extras["docs"])
    assert (ROOT / "mkdocs.yml").is_file()
