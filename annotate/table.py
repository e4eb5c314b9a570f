"""The leaf tables `--check` and `annotate review` print: a row per leaf, path, shape, verdict.

The path column is as wide as the longest path, so the shapes and verdicts line up; where that
would take most rows past `WIDTH` columns, the column is narrowed and a longer path is wrapped
within it, at its own joints (before a `[` or a `.`), the row's cells on its last line:

    ['past_key_values']['layers'][11]
      ['values']                    float32[1,2,4,8]  max abs 7.45e-08  rel 3.68e-07  ok
"""

from __future__ import annotations

import re

WIDTH = 100
"""The columns a table's lines keep within (a line whose verdict alone is longer goes past)."""

NARROWEST = 24
"""The path column is never narrowed below this: where most rows' verdicts leave less room, no
path is wrapped and the lines go past `WIDTH` (a verdict that names the port's path as long)."""

_INDENT, _GAP, _MORE = "  ", "  ", "  "
"""Before every line; between cells; before a wrapped path's later lines (within the column)."""


def leaf_table(rows: list[tuple[str, str, str]], width: int = WIDTH) -> list[str]:
    """`(path, shape, rest)` rows as aligned lines within `width` columns, long paths wrapped."""
    if not rows:
        return []
    shapes = max(len(shape) for _, shape, _ in rows)
    rests = sorted(len(rest) for _, _, rest in rows)
    room = width - len(_INDENT) - 2 * len(_GAP) - shapes - rests[len(rests) // 2]  # most rows' verdicts
    longest = max(len(path) for path, _, _ in rows)
    # Verdicts too long for any path to fit beside them (review's `<- port path`): no path is cut.
    column = longest if room < NARROWEST else min(longest, room)
    lines = []
    for path, shape, rest in rows:
        *above, last = wrap(path, column)
        lines += [_INDENT + part for part in above]
        lines.append(f"{_INDENT}{last:<{column}}{_GAP}{shape:<{shapes}}{_GAP}{rest}".rstrip())
    return lines


def wrap(path: str, column: int) -> list[str]:
    """`path` as lines of at most `column` characters: cut before a `[` or a `.`, or after a space,
    where it can be, anywhere where a single part is longer; every line after the first indented by
    `_MORE`."""
    if len(path) <= column:
        return [path]
    parts = [part for part in re.split(r"(?=\[)|(?=\.)|(?<= )", path) if part]
    lines: list[str] = []
    line = ""
    for part in parts:
        while part:
            limit = column - (len(_MORE) if lines else 0)
            if len(line) + len(part) <= limit:
                line, part = line + part, ""
            elif line:
                lines.append(line)
                line = ""
            else:  # one part longer than the column: cut it
                lines.append(part[:limit])
                part = part[limit:]
    lines = [part.rstrip() for part in [*lines, line]]
    return [lines[0], *(_MORE + part for part in lines[1:])]
