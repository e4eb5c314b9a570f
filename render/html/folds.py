"""Which runs of lines to fold, and what to say on a fold's bar: the defs and classes inside it."""

from __future__ import annotations

import ast
import html
import re
from collections.abc import Callable

FOLD_MIN = 4
"""A run of lines that did not run in the trace is folded when at least this long."""

_CELL = re.compile(r"(<td\b[^>]*>)((?:(?!</td>).)+)(</td>)", re.S)


def fold(rows: list[str], label: str, columns: int, closed: bool = True) -> str:
    """Table rows under a bar saying `label` that opens and closes them (view.js). Each cell's content
    sits in a `div.fc`, `hidden=until-found` while the fold is closed: out of sight, yet the
    browser's find reaches it, and opens the fold (`beforematch`)."""
    hidden = " hidden=until-found" if closed else ""
    body = _CELL.sub(rf"\1<div class=fc{hidden}>\2</div>\3", "".join(rows))
    state, expanded = (" closed", "false") if closed else ("", "true")
    return (f"<tbody class='fold{state}'><tr class=bar><td colspan={columns}><button type=button "
            f"aria-expanded={expanded}>{html.escape(label)}</button></td></tr>{body}</tbody>")


def outline(tree: ast.Module) -> list[tuple[int, int, str]]:
    """`(first line, last line, what)` for module- and class-level statements, and for branches."""
    items: list[tuple[int, int, str]] = []

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
            last = node.end_lineno or node.lineno
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                items.append((first, last, f"{prefix}{node.name}"))
                visit(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, ast.ClassDef):
                items.append((first, last, f"class {prefix}{node.name}"))
                visit(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                items.append((first, last, "imports"))
            elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                items.append((first, last, "docstring"))
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                items.append((first, last, ", ".join(ast.unparse(t) for t in targets)))
            elif isinstance(node, ast.If):
                items.append((first, last, f"if {ast.unparse(node.test)}"[:48]))
                visit(node.body, prefix)
                visit(node.orelse, prefix)
            else:
                items.append((first, last, type(node).__name__.lower()))
    visit(tree.body, "")
    return items


def describe(first: int, last: int, items: list[tuple[int, int, str]]) -> str:
    """The outermost statements wholly inside lines `first`..`last`, named, repeats merged."""
    names: list[str] = []
    covered = 0
    for start, end, what in sorted(items, key=lambda item: (item[0], -item[1])):
        if start < first or end > last or start <= covered:
            continue
        covered = end
        if what not in names:
            names.append(what)
    shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
    return shown or "blank lines"


def runs(count: int, foldable: Callable[[int], bool], blank: Callable[[int], bool]) -> list[tuple[int, int]]:
    """Maximal runs of foldable lines (blank lines join them) with at least FOLD_MIN non-blank lines."""
    found, start = [], None
    for line in range(1, count + 2):
        if line <= count and (foldable(line) or (blank(line) and start is not None)):
            if start is None:
                start = line
            continue
        if start is not None:
            end = line - 1
            while end > start and blank(end):
                end -= 1  # a trailing blank line stays outside, as the gap before what follows
            if sum(not blank(n) for n in range(start, end + 1)) >= FOLD_MIN:
                found.append((start, end))
            start = None
    return found
