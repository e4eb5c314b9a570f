"""From an instruction (code object, byte offset) to its source: the span, its text, its AST node.

The one place in tracing that reads `co_positions()` and the user's source. Positions and
AST columns both count UTF-8 bytes; asttokens' `LineNumbers` turns them into character
offsets before text is cut, so non-ASCII source keeps its spans.
"""

from __future__ import annotations

import ast
import linecache
from types import CodeType
from typing import Any

from asttokens import LineNumbers

from jaxside.tracing.trace import Site


class SourceIndex:
    """Caches positions per code object, sites per instruction and trees per file for one capture."""

    def __init__(self) -> None:
        self._positions: dict[CodeType, list[tuple[Any, ...]]] = {}
        self._sites: dict[tuple[CodeType, int], Site | None] = {}
        self._trees: dict[str, ast.Module | None] = {}

    def site(self, code: CodeType, lasti: int) -> Site | None:
        """The span (and text) of the expression or statement the instruction at `lasti` belongs to."""
        key = (code, lasti)
        try:
            return self._sites[key]
        except KeyError:
            pass
        positions = self._positions.get(code)
        if positions is None:
            positions = self._positions[code] = list(code.co_positions())
        index = lasti // 2  # offsets count bytes; positions count 2-byte code units
        site = None
        if 0 <= index < len(positions) and None not in positions[index]:
            line, end_line, col, end_col = positions[index]
            site = Site(
                code.co_filename, line, end_line, col, end_col,
                source_text(code.co_filename, line, end_line, col, end_col),
            )
        self._sites[key] = site
        return site

    def expression(self, site: Site) -> ast.expr | None:
        """The outermost expression node whose span is exactly `site`'s (None if the site is a
        statement, or its file cannot be read or parsed)."""
        tree = self._tree(site.file)
        if tree is None:
            return None
        span = (site.line, site.col, site.end_line, site.end_col)
        for node in ast.walk(tree):
            if isinstance(node, ast.expr) and span == (
                node.lineno, node.col_offset, node.end_lineno, node.end_col_offset
            ):
                return node
        return None

    def _tree(self, file: str) -> ast.Module | None:
        if file not in self._trees:
            try:
                self._trees[file] = ast.parse("".join(linecache.getlines(file)))
            except (SyntaxError, ValueError):
                self._trees[file] = None
        return self._trees[file]


def source_text(file: str, line: int, end_line: int, col: int, end_col: int) -> str | None:
    """The text between two positions; columns are UTF-8 byte offsets, as CPython gives them."""
    lines = linecache.getlines(file)
    if not 0 < line <= end_line <= len(lines):
        return None
    text, numbers = _numbered(lines)
    start = numbers.line_to_offset(line, numbers.from_utf8_col(line, col))
    end = numbers.line_to_offset(end_line, numbers.from_utf8_col(end_line, end_col))
    return text[start:end]


_NUMBERED: dict[int, tuple[list[str], str, LineNumbers]] = {}
"""linecache's list of a file's lines (by identity) -> its text and offsets; one entry per list."""


def _numbered(lines: list[str]) -> tuple[str, LineNumbers]:
    cached = _NUMBERED.get(id(lines))
    if cached is None or cached[0] is not lines:
        text = "".join(lines)
        cached = _NUMBERED[id(lines)] = (lines, text, LineNumbers(text))
    return cached[1], cached[2]
