"""The rows of a generated HTML page as text, without a browser: what each cell says."""

from __future__ import annotations

import html
import textwrap
from dataclasses import dataclass, field
from html.parser import HTMLParser


@dataclass
class Row:
    id: str | None
    classes: set[str]
    cells: list[str] = field(default_factory=list)
    """Each `td`'s text, as a reader sees it: entities decoded, tags dropped, a line per source
    line (`span.ln`), statement (`div`) or `br`, badges (`span.cnt`, drawn from `data-t`) included."""
    cell_classes: list[set[str]] = field(default_factory=list)

    def cell(self, cls: str) -> str:
        """The text of the row's cell of class `cls` (`t` torch, `j` JAX, ...)."""
        (text,) = [text for text, classes in zip(self.cells, self.cell_classes) if cls in classes]
        return text.strip()


ROOM = 90
"""The JAX column's width in characters the reader reads statements at (a window about 1400 px wide):
a statement laid out at several widths (render/html/statements.py) is read in the layout shown there."""


def _shown(classes: list[str]) -> bool:
    low = [int(c[2:]) for c in classes if c.startswith("lo") and c[2:].isdigit()]
    high = [int(c[2:]) for c in classes if c.startswith("hi") and c[2:].isdigit()]
    return all(w <= ROOM for w in low) and all(ROOM < w for w in high)


class _Rows(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.rows: list[Row] = []
        self.depth = 0  # inside a td: its nesting depth (a cell holds no table)
        self.skip = 0  # inside a script or style
        self.other = 0  # inside a layout's line for another width (`span.ln.lo100`, `span.ln.hi80`)
        self.other_tag = ""  # the tag that started it (`div` or `span`), counted while nested

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if self.other:
            self.other += tag == self.other_tag
        elif tag in ("div", "span") and not _shown((found.get("class") or "").split()):
            self.other, self.other_tag = 1, tag
        elif tag in ("script", "style"):
            self.skip += 1
        elif tag == "tr":
            self.rows.append(Row(found.get("id"), set((found.get("class") or "").split())))
        elif tag == "td" and self.rows:
            self.rows[-1].cells.append("")
            self.rows[-1].cell_classes.append(set((found.get("class") or "").split()))
        elif tag in ("br", "div", "span") and self.rows and self.rows[-1].cells:
            # a `br`, a statement (`div`) and a source line (`span.ln`) each start a new line
            cells = self.rows[-1].cells
            starts_line = tag != "span" or "ln" in (found.get("class") or "").split()
            if starts_line and cells[-1] and not cells[-1].endswith("\n"):
                cells[-1] += "\n"
            if tag == "span" and "cnt" in (found.get("class") or "").split():
                cells[-1] += "  " + (found.get("data-t") or "")  # a badge, drawn from its attribute

    def handle_endtag(self, tag: str) -> None:
        if self.other and tag == self.other_tag:
            self.other -= 1
        elif tag in ("script", "style"):
            self.skip -= 1

    def handle_data(self, data: str) -> None:
        if not self.skip and not self.other and self.rows and self.rows[-1].cells:
            self.rows[-1].cells[-1] += html.unescape(data)


def rows(page: str) -> list[Row]:
    """The page's rows; each cell's lines dedented together (code keeps its indentation as spaces,
    a cell reads as its code relative to its first line's indent)."""
    parser = _Rows()
    parser.feed(page)
    parser.close()
    for row in parser.rows:
        row.cells = [textwrap.dedent(cell) for cell in row.cells]
    return parser.rows


def by_id(page: str) -> dict[str, Row]:
    return {row.id: row for row in rows(page) if row.id}
