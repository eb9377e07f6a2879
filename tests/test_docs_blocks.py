"""Every Python block of the documentation site and of the README runs, or says why it does not.

Each ```python block in README.md and docs/ has a marker in an HTML comment on the line before it
(docs/development.md, "This site", has the table):

* ``<!-- run -->``: run here as written, one test per block;
* ``<!-- run: PLUGIN -->``: run by that plugin package's tests, where its dependencies are
  installed (plugins/pycollect-PLUGIN/tests/test_PLUGIN_docs_blocks.py);
* ``<!-- test -->``, ``<!-- test: NAME -->``, ``<!-- module: NAME -->``: run by a dedicated test
  that checks more than that the block runs (``DEDICATED`` below);
* ``<!-- not run: REASON -->``: a fragment, a signature, or a block that needs what the tests do
  not have; the reason says which.

A block without a marker, or with one nothing runs, fails ``test_every_python_block_is_run_or_says_why``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
_FENCE = re.compile(r"^```python\n(?P<source>.*?)^```$", re.S | re.M)
_MARKER = re.compile(r"<!-- (?P<marker>[^>]*?) -->")

# Markers run by a test of their own, per page: the test file must exist and name the page.
DEDICATED = {
    ("README.md", "test: ten lines"): "tests/test_readme.py",
    ("docs/vector.md", "test"): "tests/test_vector_semantics.py",
    ("docs/vector.md", "test: sb3"): "tests/test_vector_sb3.py",
    ("docs/plugins.md", "test"): "tests/test_docs.py",
    ("docs/plugins.md", "module"): "tests/test_docs.py",
}
PLUGINS = ("torchrl", "pettingzoo")  # ``run: PLUGIN`` markers, run by those plugins' tests


class Block(NamedTuple):
    page: str  # relative to the repository's root
    line: int  # of the opening fence
    marker: str  # the marker's text, "" when the block has none
    source: str

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    """README.md and every page of the site (docs/, less the site's own tooling)."""
    return [ROOT / "README.md", *sorted(p for p in DOCS.rglob("*.md") if "_tooling" not in p.parts)]


def blocks(page: Path) -> list[Block]:
    """The Python blocks of ``page``, each with the marker on the line before it."""
    text = page.read_text()
    found = []
    for match in _FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = _MARKER.fullmatch(before.strip())
        found.append(
            Block(
                page=page.relative_to(ROOT).as_posix(),
                line=text.count("\n", 0, match.start()) + 1,
                marker=marker["marker"].strip() if marker else "",
                source=match["source"],
            )
        )
    return found


ALL_BLOCKS = [block for page in pages() for block in blocks(page)]
RUN_HERE = [block for block in ALL_BLOCKS if block.marker == "run"]


def test_every_python_block_is_run_or_says_why() -> None:
    problems = []
    for block in ALL_BLOCKS:
        kind, _, detail = block.marker.partition(":")
        kind, detail = kind.strip(), detail.strip()
        if block.marker == "run":
            continue
        if kind == "run" and detail in PLUGINS:
            runner = ROOT / "plugins" / f"pycollect-{detail}" / "tests" / f"test_{detail}_docs_blocks.py"
            if not runner.is_file() or f"run: {detail}" not in runner.read_text():
                problems.append(f"{block.where}: {runner.relative_to(ROOT)} does not run 'run: {detail}' blocks")
            continue
        if kind == "not run":
            if not detail:
                problems.append(f"{block.where}: 'not run' without a reason")
            continue
        dedicated = DEDICATED.get((block.page, block.marker)) or DEDICATED.get((block.page, kind))
        if dedicated is None:
            problems.append(f"{block.where}: marker {block.marker!r} (expected run, run: PLUGIN, not run: REASON)")
        elif Path(block.page).name not in (ROOT / dedicated).read_text():
            problems.append(f"{block.where}: {dedicated} does not read {block.page}")
    assert not problems, "Python blocks that nothing runs:\n" + "\n".join(problems)


def test_the_site_has_blocks_that_run() -> None:
    # The inventory above would pass over a change that made the fence pattern match nothing.
    assert len(ALL_BLOCKS) >= 30 and len(RUN_HERE) >= 8, (len(ALL_BLOCKS), len(RUN_HERE))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("block", RUN_HERE, ids=[block.where for block in RUN_HERE])
def test_the_block_runs_as_written(block: Block, capsys: pytest.CaptureFixture[str]) -> None:
    exec(compile(block.source, str(ROOT / block.page), "exec"), {"__name__": "__docs__"})
