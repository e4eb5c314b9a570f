"""The one place user text (names, keys, paths, docstrings) becomes generated source.

Every piece of text that came from the user's files or objects reaches a generated module or
comment through one of these functions: as a string literal (`literal`), a docstring
(`docstring`) or a comment line (`comment`). Each escapes what would end the literal or the
comment early, so no text can become code; `check_compiles` is the writer's last gate.
"""

from __future__ import annotations

import ast

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


def check_compiles(source: str, what: str) -> None:
    """Refuse `source` (the text of `what`) unless it compiles as a module."""
    try:
        compile(source, what, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as error:
        line = getattr(error, "lineno", None)
        where = f" at line {line}" if line else ""
        raise UnsafeSourceError(f"generated {what} does not compile{where}: {error}") from None
