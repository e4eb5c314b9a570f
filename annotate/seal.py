"""The seal on every file annotate writes: a digest of the file's own bytes, so "annotate wrote
this" is proven by the file, never guessed from words in it (``jax``, ``jaxside``, ``# jax:``).

The seal is one line at the end (a ``#`` comment in Python, ``<!-- -->`` in HTML) or one last
key of a JSON document; its digest is the SHA-256 of the file with the digest's own 32 hex
digits written as zeros. Ordinary text never matches its own digest; a sealed file someone
edited no longer does either, so the edits are not replaced without ``--force``.
"""

from __future__ import annotations

import hashlib
import re

_WORDS = b"jaxside: written by annotate, digest "
_DIGITS = 32
_BLANK = b"0" * _DIGITS
_FOUND = re.compile(re.escape(_WORDS) + rb"([0-9a-f]{%d})" % _DIGITS)


def _digest(data: bytes) -> bytes:
    return hashlib.sha256(data).hexdigest()[:_DIGITS].encode("ascii")


def _newline(data: bytes) -> bytes:
    """The file's own line ending (CRLF and CR-only files stay so)."""
    for ending in (b"\r\n", b"\n", b"\r"):
        if ending in data:
            return ending
    return b"\n"


def seal(data: bytes, form: str = "python") -> bytes:
    """`data` (a file's bytes, in any ASCII-compatible encoding) with its seal added. `form` is
    ``python`` (also any ``#`` comment text), ``module`` (a module jaxside wrote, laid out as
    `ruff format` lays it out), ``html`` or ``json`` (a JSON object)."""
    if form == "json":
        body = data.rstrip()
        if not body.endswith(b"}"):
            raise ValueError("a JSON seal goes in an object")
        inner = body[:-1].rstrip()
        comma = b"" if inner.endswith(b"{") else b","
        blank = inner + comma + b'\n "written_by": "' + _WORDS + _BLANK + b'"\n}\n'
    else:
        newline = _newline(data)
        if data and not data.endswith((b"\n", b"\r")):
            data += newline
        last = data.rstrip().splitlines()[-1:] if form == "module" else []
        if last and last[0][:1] in (b" ", b"\t"):
            # After an indented block, two blank lines, as `ruff format` puts before a top-level comment.
            blank_lines = (len(data) - len(data.rstrip(b"\r\n"))) // len(newline) - 1
            data += newline * max(0, 2 - blank_lines)
        line = b"<!-- " + _WORDS + _BLANK + b" -->" if form == "html" else b"# " + _WORDS + _BLANK
        blank = data + line + newline
    at = blank.rindex(_BLANK)
    return blank[:at] + _digest(blank) + blank[at + _DIGITS:]


def is_sealed(data: bytes) -> bool:
    """Whether `data` carries a seal that matches it (any of its seal-like texts, tried each)."""
    for match in _FOUND.finditer(data):
        start, end = match.span(1)
        if _digest(data[:start] + _BLANK + data[end:]) == match.group(1):
            return True
    return False


def unsealed(data: bytes) -> bytes:
    """`data` as it was before `seal` (unchanged when it carries no seal that matches it)."""
    for match in _FOUND.finditer(data):
        start, end = match.span(1)
        if _digest(data[:start] + _BLANK + data[end:]) != match.group(1):
            continue
        line_start = max(data.rfind(b"\n", 0, start), data.rfind(b"\r", 0, start)) + 1
        if data[line_start:start].lstrip().startswith(b'"written_by"'):
            body = data[:line_start].rstrip()
            return body[:-1] + b"\n}\n" if body.endswith(b",") else body + b"\n}\n"
        return data[:line_start]
    return data
