"""Map an instruction (code object, byte offset) to the source expression it belongs to."""

from __future__ import annotations

import linecache
from types import CodeType

from tracing.trace import Site


class SourceIndex:
    """Caches positions per code object and sites per instruction for one capture."""

    def __init__(self) -> None:
        self._positions: dict[CodeType, list[tuple]] = {}
        self._sites: dict[tuple[CodeType, int], Site | None] = {}

    def site(self, code: CodeType, lasti: int) -> Site | None:
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


def source_text(file: str, line: int, end_line: int, col: int, end_col: int) -> str | None:
    """The text between two positions; columns are UTF-8 byte offsets, as CPython gives them."""
    lines = linecache.getlines(file)
    if not 0 < line <= end_line <= len(lines):
        return None
    chunk = [text.encode() for text in lines[line - 1 : end_line]]
    if len(chunk) == 1:
        return chunk[0][col:end_col].decode(errors="replace")
    chunk[0] = chunk[0][col:]
    chunk[-1] = chunk[-1][:end_col]
    return b"".join(chunk).decode(errors="replace")
