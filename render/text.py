"""The one place user text (names, keys, paths, docstrings) becomes generated source.

Every piece of text that came from the user's files or objects reaches a generated module or
comment through one of these functions: as a string literal (`literal`), a docstring
(`docstring`) or a comment line (`comment`). Each escapes what would end the literal or the
comment early, so no text can become code; `check_compiles` is the writer's last gate. The text
the writers lay out is measured here too (`display_width`), quoted as ruff quotes it
(`double_quotes`), and its numbers written as ruff writes them (`numbers`).
"""

from __future__ import annotations

import ast
import importlib
import io
import math
import tokenize
import unicodedata
from typing import Any

from jaxside.render.source import python_lines

_QUOTES = '"""'


def literal(value: str) -> str:
    """`value` as a string literal, double-quoted unless that needs more escapes than single quotes."""
    text = repr(value)
    if text.startswith("'") and '"' not in value:
        text = '"' + text[1:-1] + '"'
    return text


def value_expr(value: Any) -> ast.expr | None:
    """A Python value as an expression that evaluates to an equal value of the same type (NaN and
    the infinities as `float("nan")`, a slice as `slice(1, 2, None)`, a torch dtype as its `jnp`
    one), or None when no literal rebuilds it (a generator, a device, any other object)."""
    kind = type(value)
    if value is None or value is Ellipsis or kind in (bool, int, str, bytes):
        return ast.Constant(value)
    if kind is float:
        return ast.Constant(value) if math.isfinite(value) else _call("float", ast.Constant(repr(value)))
    if kind is complex:
        if all(math.isfinite(part) and part != 0 for part in (value.real, value.imag)):
            return ast.Constant(value)  # `(3+4j)`; zeros (signed) and NaN parts only by `complex(...)`
        return _call("complex", value_expr(value.real), value_expr(value.imag))
    if kind in (tuple, list, set, frozenset):
        items = sorted(value, key=repr) if kind in (set, frozenset) else list(value)
        found = [value_expr(item) for item in items]
        parts = [p for p in found if p is not None]
        if len(parts) < len(found):
            return None
        if kind is tuple:
            return ast.Tuple(parts, ast.Load())
        if kind is list:
            return ast.List(parts, ast.Load())
        shown = ast.Set(parts) if parts else None
        return _call(kind.__name__, *([shown] if shown else [])) if kind is frozenset or not parts else shown
    if kind is dict:
        keys, values = [value_expr(k) for k in value], [value_expr(v) for v in value.values()]
        if any(k is None for k in keys):
            return None
        given = [v for v in values if v is not None]
        return None if len(given) < len(values) else ast.Dict(list(keys), given)
    if kind in (slice, range):
        ends = (value.start, value.stop, value.step)
        bounds = [value_expr(end) for end in ends]
        parts = [b for b in bounds if b is not None]
        return None if len(parts) < len(bounds) else _call(kind.__name__, *parts)
    if kind.__module__ == "torch" and kind.__name__ == "dtype":
        name = str(value).removeprefix("torch.")
        name = "bool_" if name == "bool" else name
        jnp = importlib.import_module("jax.numpy")
        return ast.Attribute(ast.Name("jnp", ast.Load()), name, ast.Load()) if hasattr(jnp, name) else None
    return None


def _call(name: str, *args: ast.expr | None) -> ast.expr:
    return ast.Call(ast.Name(name, ast.Load()), [a for a in args if a is not None], [])


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
    return _edited(text, edits)


def numbers(text: str) -> str:
    """`text` with its number literals as ruff writes them: `3.4028235e38`, not Python's
    `repr`, `3.4028235e+38` (ruff drops an exponent's `+` and lowercases `E` and `J`)."""
    if not any(c in text for c in "+EJ"):
        return text
    edits = []
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.NUMBER and not token.string.lower().startswith(("0x", "0o", "0b")):
            written = token.string.replace("E", "e").replace("J", "j").replace("e+", "e")
            if written != token.string:
                edits.append((token.start, token.end, written))
    return _edited(text, edits)


def _edited(text: str, edits: list[tuple[tuple[int, int], tuple[int, int], str]]) -> str:
    """`text` with each token's span (tokenize's rows and columns, in order) replaced."""
    lines = python_lines(text, keepends=True)  # the rows tokenize counts
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
