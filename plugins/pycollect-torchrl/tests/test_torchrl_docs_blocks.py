"""The blocks of pycollect's README and docs marked ``<!-- run: torchrl -->`` run as written.

They need this plugin and its dependencies, which pycollect's own test run does not install;
pycollect's tests/test_docs_blocks.py checks that every such marker has this runner.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]  # the repository: plugins/pycollect-torchrl/tests/
MARKED = re.compile(r"^<!-- run: torchrl -->\n```python\n(.*?)^```$", re.S | re.M)
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").rglob("*.md") if "_tooling" not in p.parts)]
BLOCKS = [
    (f"{page.relative_to(ROOT)}:{page.read_text().count(chr(10), 0, match.start()) + 2}", match[1])
    for page in PAGES
    for match in MARKED.finditer(page.read_text())
]


def test_there_are_blocks_to_run() -> None:
    assert BLOCKS, "no block of README.md or docs/ is marked 'run: torchrl'"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("source", [source for _, source in BLOCKS], ids=[where for where, _ in BLOCKS])
def test_the_block_runs_as_written(source: str) -> None:
    exec(compile(source, "docs", "exec"), {"__name__": "__docs__"})
