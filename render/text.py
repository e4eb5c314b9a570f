"""The one place user text (names, keys, paths, docstrings) becomes generated source.

Every piece of text that came from the user's files or objects reaches a generated module or
comment through one of these functions: as a string literal (`literal`), a docstring
(`docstring`) or a comment line (`comment`). Each escapes what would end the literal or the
comment early, so no text can become code; `check_compiles` is the writer's last gate. The text
the writers lay out is measured here too (`display_width`), and quoted as ruff quotes it
(`double_quotes`).
"""

from __future__ import annotations

import ast
import io
import tokenize
import unicodedata

from jaxside.render.source import python_lines

_QUOTES = '"""'


def literal(value: str) -> str:
    """`value` as a string literal, double-quoted unless that needs more escapes than single quotes."""
    text = repr(value)
    if text.startswith("'") and '"' not in value:
        text = '"' + text[1:-1] + '"'
    return text


def _escape(char: str) -> str:
    """One character as a string-literal escape (`\\x0c`, `\\u2028`)."""
    return repr(char)[1:-1] if char != "\\" else "\\\\"


def docstring(text: str, indent: int = 0) -> str:
    """`text` as a triple-quoted docstring at `indent`: exactly `text` when read back (before indent).

    Backslashes, a run of three quotes, a closing quote and characters that are not printable (or
    that Python counts as a line break) are escaped; newlines stay real, continuation lines indented.
    """
    chars, run = [], 0  # `run`: the double quotes just written unescaped
    for i, ch in enumerate(text):
        if ch == '"':
            last = i == len(text) - 1
            chars.append('\\"' if run == 2 or last else ch)
            run = 0 if run == 2 or last else run + 1
            continue
        run = 0
        chars.append(ch if ch == "\n" or (ch.isprintable() and ch != "\\") else _escape(ch))
    body = "".join(chars)
    if ast.literal_eval(_QUOTES + body + _QUOTES) != text:  # the contract, checked every time
        raise AssertionError(f"docstring escaping lost text: {text!r}")
    if "\n" not in body:
        return _QUOTES + body + _QUOTES
    pad = " " * indent
    lines = body.split("\n")
    rest = [pad + line if line else "" for line in lines[1:]]
    return "\n".join([_QUOTES + lines[0], *rest, pad + _QUOTES])


def comment(text: str) -> str:
    """`text` made safe to follow a `#`: one line, every unprintable character escaped."""
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in text)


class UnsafeSourceError(Exception):
    """The writer produced source that does not compile: a jaxside bug, never written out."""


class CommentsChangeCode(Exception):
    """Comments placed in a file would change its code (a jaxside bug, never written out): the
    file and the first line that differs, for a one-line error."""

    def __init__(self, file: str, line: int, detail: str) -> None:
        super().__init__(f"{file}:{line}: {detail}")
        self.file, self.line, self.detail = file, line, detail


def check_compiles(source: str, what: str) -> None:
    """Refuse `source` (the text of `what`) unless it compiles as a module."""
    try:
        compile(source, what, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as error:
        line = getattr(error, "lineno", None)
        where = f" at line {line}" if line else ""
        raise UnsafeSourceError(f"generated {what} does not compile{where}: {error}") from None


def double_quotes(text: str) -> str:
    """`params["wqkv"]` rather than `params['wqkv']`: single-quoted strings get double quotes
    when that needs no more escapes (ruff's and black's rule)."""
    tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    lines = python_lines(text, keepends=True)  # the rows tokenize counts
    edits = []
    for token in tokens:
        if (
            token.type == tokenize.STRING
            and token.string.startswith("'")
            and not token.string.startswith("'''")
        ):
            body = token.string[1:-1]
            if '"' not in body and "\\'" not in body and token.start[0] == token.end[0]:
                edits.append((token.start, token.end, f'"{body}"'))
    for (row, col), (_, end), replacement in reversed(edits):
        line = lines[row - 1]
        lines[row - 1] = line[:col] + replacement + line[end:]
    return "".join(lines)


def display_width(text: str) -> int:
    """Columns `text` takes in a terminal or editor: wide (CJK) characters two, combining none."""
    return sum(
        0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1
        for c in text
    )
