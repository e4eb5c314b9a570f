"""Python source as HTML lines with syntax classes (Pygments), optionally cut at columns for marking.

A whole file is lexed at once, so strings and docstrings spanning lines colour right, then split
into lines; each line's HTML stands alone (every span closed), so lines can sit in table rows.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Iterable
from typing import Any

from pygments.lexers import PythonLexer
from pygments.token import Comment, Keyword, Name, Number, Operator, String

_JOINED = re.compile(r"(<span class=o>[^<]*)</span><span class=o>")

# Few colours read better than Pygments' dozens: each token kind maps to one short class.
_KINDS: list[tuple[Any, str]] = [
    (Comment, "c"), (String, "s"), (Number, "m"), (Keyword, "k"), (Operator.Word, "k"),
    (Name.Decorator, "d"), (Name.Function, "f"), (Name.Class, "f"), (Name.Builtin.Pseudo, "p"),
    (Name.Builtin, "b"), (Operator, "o"),
]

_OPENERS = {"(", "[", "{", ","}
"""After these a line may wrap (`<wbr>`): long calls and subscripts have no spaces to wrap at."""

Link = Callable[[str], str | None]
"""For a name, the HTML to write instead of the plain token (a link), or None."""


def _kind(token: object) -> str | None:
    for parent, kind in _KINDS:
        if token in parent:  # pygments token types nest: String.Doc in String
            return kind
    return None


def _tokens(source: str) -> list[tuple[object, str]]:
    lexer = PythonLexer(stripnl=False, ensurenl=False, tabsize=0)
    return list(lexer.get_tokens(source))


def lines(source: str, cuts: dict[int, Iterable[int]] | None = None, link: Link | None = None) -> list[str]:
    """HTML per line of `source` (1-based line -> cut columns, in characters, start `<i data-c>` pieces)."""
    out: list[list[str]] = [[]]
    column = 0
    line_cuts: list[int] = []

    def start_line() -> None:
        nonlocal column, line_cuts
        column = 0
        line_cuts = sorted({c for c in (cuts or {}).get(len(out), ()) if c > 0})
        if cuts is not None and len(out) in cuts:
            out[-1].append("<i data-c=0>")

    def close_line() -> None:
        if cuts is not None and len(out) in cuts:
            out[-1].append("</i>")

    start_line()
    previous = ""
    for token, value in _tokens(source):
        kind = _kind(token)
        pieces = value.split("\n")
        for index, piece in enumerate(pieces):
            if index:
                close_line()
                out.append([])
                start_line()
            while piece:
                # Cut the piece where a marked span starts or ends, so segments never straddle one.
                end = len(piece)
                for cut in line_cuts:
                    if column < cut < column + end:
                        end = cut - column
                        break
                chunk, piece = piece[:end], piece[end:]
                plain_name = token is Name and previous != "."  # not `jax.jit`'s `jit`, not a def's name
                linked = link(chunk) if link is not None and plain_name and chunk == value else None
                if linked is not None:
                    out[-1].append(linked)
                elif kind:
                    out[-1].append(f"<span class={kind}>{html.escape(chunk)}</span>")
                else:
                    out[-1].append(html.escape(chunk))
                if chunk in _OPENERS and token not in String:
                    out[-1].append("<wbr>")
                column += len(chunk)
                if column in line_cuts:
                    out[-1].append(f"</i><i data-c={column}>")
        if value.strip():
            previous = value
    close_line()
    result = [_join_operators("".join(parts)) for parts in out]
    if source.endswith("\n"):
        result.pop()  # the empty line after the last newline
    return result


def _join_operators(line: str) -> str:
    """`->`, `**`, `//`: one span each (Pygments lexes `->` as two), kept whole by `.o` in view.css."""
    while True:
        joined = _JOINED.sub(r"\1", line)
        if joined == line:
            return line
        line = joined


def block(line_html: str) -> str:
    """One line as a block whose wrapped parts hang under its indent (`.ln` in view.css). The
    indent stays as spaces in the text, so copied code keeps it."""
    head = "<i data-c=0>" if line_html.startswith("<i data-c=0>") else ""
    rest = line_html[len(head):]
    indent = len(rest) - len(rest.lstrip(" "))
    style = f" style=--i:{indent}ch" if indent else ""
    return f"<span class=ln{style}>{line_html}</span>"


def code(text: str, link: Link | None = None, tail: str = "") -> str:
    """HTML for a snippet (one JAX statement over one or more lines), a block per line; `tail`
    (a count, links) goes at the end of the first line."""
    found = lines(text, link=link) or [""]
    found[0] += tail
    return "".join(block(line) for line in found)
