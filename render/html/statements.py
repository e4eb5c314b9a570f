"""A JAX statement in the view's JAX column: laid out for the column's width, indented as in its def.

The exported module's layout (`wrap_text`) depends on a width, and the page's width is the reader's:
a statement that lays out differently at the widths in WIDTHS carries each layout, and view.css
shows the one for its column's width (a container query on `.st`); one that fits everywhere is
written once. A layout still wider than its column wraps in the browser under a hanging indent.
"""

from __future__ import annotations

from jaxside.render.html import highlight
from jaxside.render.layout import wrap_text

WIDTHS = (60, 80, 100, 130)
"""The widths (in characters) a statement is laid out at; view.css has container queries for each
but the first (`.lo80` hides a layout below 80 characters, `.hi80` from 80 on)."""
BODY = "    "
"""A def's statements sit under it, so a copied def is Python with its real indentation."""


def layouts(text: str, link: highlight.Link | None = None, tail: str = "", indent: str = BODY) -> str:
    """HTML for `text` at each width of WIDTHS that lays it out differently, the narrowest first."""
    found: list[tuple[int, str]] = []
    for width in WIDTHS:
        lines = [piece for line in wrap_text(text, len(indent), width) for piece in line.splitlines() or [""]]
        shown = "\n".join(indent + line if line else line for line in lines)
        if not found or found[-1][1] != shown:
            found.append((width, shown))
    if len(found) == 1:
        return highlight.code(found[0][1], link, tail)
    parts = []
    for index, (width, shown) in enumerate(found):
        hidden = ([f"lo{width}"] if index else []) + (
            [f"hi{found[index + 1][0]}"] if index + 1 < len(found) else [])
        parts.append(f"<div class='{' '.join(hidden)}'>{highlight.code(shown, link, tail)}</div>")
    return "".join(parts)
