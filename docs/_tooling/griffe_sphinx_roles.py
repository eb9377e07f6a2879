"""A griffe extension: the Sphinx markup of pycollect's docstrings, as Markdown for mkdocstrings.

pycollect's docstrings are Google style (ruff's pydocstyle convention) with Sphinx cross-reference
roles (``:class:`~pycollect.Collector```) and reST literal blocks (a paragraph ending in ``::``
followed by an indented block), which read well in ``help()`` and in an editor. mkdocstrings
renders Markdown, so when a package is loaded this extension rewrites every docstring of it:

* a role becomes an optional cross-reference (``<autoref optional>``): a link where the target is
  rendered somewhere in the site, plain code otherwise (a private helper, a name of the core);
  its target is resolved in the scope of the object the docstring belongs to, as Sphinx would;
* ``text::`` followed by an indented block becomes ``text:`` and a fenced Python block.

The docstrings in the source stay as they are.
"""

from __future__ import annotations

import ast
import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(class|func|meth|attr|mod|data|exc|obj|const):`(~?)([^`<>]+?)(?:\(\))?`")
_CALLABLE_ROLES = {"func", "meth"}


def _resolve(obj: griffe.Object, target: str) -> str:
    """The full path of ``target`` as seen from ``obj`` (``target`` itself when unresolvable)."""
    if target.startswith("."):  # Sphinx: a suffix; here, a name in the object's package
        module = obj.module
        package = module.path if module.is_init_module else module.path.rpartition(".")[0]
        return f"{package}.{target.lstrip('.')}"
    head, _, rest = target.partition(".")
    scope: griffe.Object | None = obj
    while scope is not None:
        try:
            resolved = scope.resolve(head)
        except (griffe.NameResolutionError, AttributeError):
            scope = scope.parent
            continue
        return f"{resolved}.{rest}" if rest else resolved
    return target


def _role(obj: griffe.Object, match: re.Match[str]) -> str:
    kind, short, target = match.group(1), match.group(2) == "~", match.group(3).strip()
    title = target.rsplit(".", 1)[-1] if short else target.lstrip(".")
    if kind in _CALLABLE_ROLES:
        title += "()"
    identifier = _resolve(obj, target)
    return f'<autoref identifier="{identifier}" optional><code>{title}</code></autoref>'


def _literal_blocks(text: str) -> str:
    """``text::`` + an indented block -> ``text:`` + a fenced Python block."""
    lines = text.split("\n")
    out: list[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        if not line.rstrip().endswith("::"):
            out.append(line)
            index += 1
            continue
        indent = len(line) - len(line.lstrip())
        stripped = line.rstrip()[:-1]  # "text::" -> "text:"; a bare "::" -> ":"
        block_start = index + 1
        while block_start < len(lines) and not lines[block_start].strip():
            block_start += 1
        end = block_start
        while end < len(lines) and (not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip()) > indent):
            end += 1
        block = lines[block_start:end]
        while block and not block[-1].strip():
            block.pop()
        if not block:
            out.append(line)
            index += 1
            continue
        deepest = min(len(b) - len(b.lstrip()) for b in block if b.strip())
        if stripped.strip() != ":":
            out.append(stripped)
        code = [b[deepest:] if b.strip() else "" for b in block]
        out.extend(["", " " * indent + f"```{_language(code)}"])
        out.extend(" " * indent + c if c else "" for c in code)
        out.extend([" " * indent + "```", ""])
        index = end
    return "\n".join(out)


def _language(code: list[str]) -> str:
    """``python`` for a block that is Python, ``text`` for anything else (a diagram, a listing)."""
    try:
        ast.parse("\n".join(code))
    except SyntaxError:
        return "text"
    return "python"


def _rewrite(obj: griffe.Object) -> None:
    if obj.docstring is not None:
        text = _literal_blocks(obj.docstring.value)
        obj.docstring.value = _ROLE.sub(lambda match: _role(obj, match), text)
    for member in obj.members.values():
        if not member.is_alias:
            _rewrite(member)  # type: ignore[arg-type]  # not an alias: an Object


class SphinxRoles(griffe.Extension):
    """Rewrites each loaded package's docstrings (see the module's docstring)."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        """Rewrite ``pkg``'s docstrings once it is loaded whole."""
        _rewrite(pkg)
