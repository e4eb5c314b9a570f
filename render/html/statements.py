"""A JAX statement in the view's JAX column: laid out for the column's width, indented as in its def.

The exported module's layout (`wrap_text`) depends on a width, and the page's width is the reader's:
a statement that lays out differently at the widths in WIDTHS carries each layout's lines, and
view.css shows those of the layout for its column's width (a container query on `.st`). A line
that layouts next to each other share (`x = f(`, `)`) is written once, classed with the widths of
them all; a statement that fits everywhere is one layout. A layout still wider than its column
wraps in the browser under a hanging indent.
"""

from __future__ import annotations

import difflib
from typing import Any

from jaxside.render.html import highlight
from jaxside.render.layout import wrap_text

WIDTHS = (60, 80, 100, 130)
"""The widths (in characters) a statement is laid out at; view.css has container queries for each
but the first (`.lo80` hides a layout below 80 characters, `.hi80` from 80 on)."""
BODY = "    "
"""A def's statements sit under it, so a copied def is Python with its real indentation."""


def layouts(text: str, link: highlight.Link | None = None, tail: str = "", indent: str = BODY) -> str:
    """HTML for `text` at each width of WIDTHS that lays it out differently: the lines of every
    layout, each line that several layouts in a row share written once (`merged`), shown at the
    widths of the layouts it belongs to."""
    found: list[tuple[int, list[str]]] = []
    for width in WIDTHS:
        lines = [piece for line in wrap_text(text, len(indent), width) for piece in line.splitlines() or [""]]
        shown = "\n".join(indent + line if line else line for line in lines)
        html = [highlight.block(line) for line in highlight.lines(shown, link=link) or [""]]
        html[0] = html[0].removesuffix("</span>") + tail + "</span>"
        if not found or found[-1][1] != html:
            found.append((width, html))
    if len(found) == 1:
        return "".join(found[0][1])
    bounds = [width for width, _ in found]
    parts = []
    for line, first, last in merged([html for _, html in found]):
        hidden = [f"lo{bounds[first]}"] if first else []
        hidden += [f"hi{bounds[last + 1]}"] if last + 1 < len(bounds) else []
        classes = " ".join(["ln", *hidden])
        parts.append(line.replace("<span class=ln", f"<span class='{classes}'", 1) if hidden else line)
    return "".join(parts)


def merged(versions: list[list[str]]) -> list[tuple[str, int, int]]:
    """The lines of several versions in one sequence, each as `(line, first, last)`: it belongs to
    versions `first` to `last`, and the lines of each version are, in order, those that belong to it.
    A line version `k` shares with version `k - 1` (matched as `difflib` matches them) is written once."""
    entries: list[list[Any]] = [[line, 0, 0] for line in versions[0]]
    for k in range(1, len(versions)):
        previous = [entry for entry in entries if entry[2] == k - 1]
        matcher = difflib.SequenceMatcher(None, [e[0] for e in previous], versions[k], autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal":
                for entry in previous[i1:i2]:
                    entry[2] = k
                continue
            # New lines go before the next line version k - 1 keeps, after the ones it drops here.
            at = len(entries)
            if i2 < len(previous):
                at = next(i for i, entry in enumerate(entries) if entry is previous[i2])
            entries[at:at] = [[line, k, k] for line in versions[k][j1:j2]]
    return [(line, first, last) for line, first, last in entries]
