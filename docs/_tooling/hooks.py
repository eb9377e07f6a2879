"""MkDocs hooks of pycollect's documentation site (mkdocs.yml, ``hooks:``).

* The command-line reference is generated: ``<!-- pycollect-cli-reference -->`` in a page becomes
  the ``--help`` of ``pycollect`` and of each of its subcommands, from the parser the command
  itself uses (``pycollect.cli.build_parser``), so the page cannot drift from the command.
* Links from a page to a file of the repository outside ``docs/`` (``../plugins/pycollect-ray``,
  ``../pycollect/hookspecs.py``) work as they are when the Markdown is read on the forge; in the
  site they become links to that file on the forge (``repo_url``). A link to a path that does not
  exist is left alone, so that ``mkdocs build --strict`` fails on it.
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path
from typing import Any

CLI_MARKER = "<!-- pycollect-cli-reference -->"
HELP_WIDTH = 80  # columns argparse wraps the help at: what a code block shows without scrolling
_LINK = re.compile(r"\]\((?P<path>\.\./[^)\s#]*)(?P<anchor>#[^)\s]*)?\)")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Fill in the CLI reference; point links out of ``docs/`` at the repository."""
    if CLI_MARKER in markdown:
        markdown = markdown.replace(CLI_MARKER, cli_reference())
    return _repository_links(markdown, page, config)


def cli_reference() -> str:
    """The ``--help`` of ``pycollect`` and of each subcommand, as Markdown sections."""
    from pycollect.cli import build_parser

    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(HELP_WIDTH + 2)  # argparse wraps at COLUMNS - 2
    try:
        parser = build_parser()
        sections = [_help_section("pycollect", parser)]
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                sections.extend(_help_section(f"pycollect {name}", sub) for name, sub in action.choices.items())
    finally:
        if columns is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = columns
    return "\n".join(sections)


def _help_section(command: str, parser: argparse.ArgumentParser) -> str:
    return f"### `{command}`\n\n```text\n{parser.format_help().rstrip()}\n```\n"


def _repository_links(markdown: str, page: Any, config: Any) -> str:
    docs_dir = Path(config["docs_dir"]).resolve()
    root = docs_dir.parent
    page_dir = (docs_dir / page.file.src_path).parent
    repo_url = str(config["repo_url"]).rstrip("/")

    def replace(match: re.Match[str]) -> str:
        target = (page_dir / match["path"]).resolve()
        if not target.exists() or target.is_relative_to(docs_dir) or not target.is_relative_to(root):
            return match.group(0)
        kind = "tree" if target.is_dir() else "blob"
        return f"]({repo_url}/{kind}/main/{target.relative_to(root).as_posix()}{match['anchor'] or ''})"

    return _LINK.sub(replace, markdown)
