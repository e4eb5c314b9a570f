"""Warnings while tracing, exporting and checking: the user's own shown, the engines' kept quiet.

torchax lowers the user's torch ops to JAX calls, so JAX warns from inside itself about what it
was asked on the user's behalf (``Explicitly requested dtype int64 requested in arange is not
available``), once per trace and again under ``--check``. A warning attributed to a file of
torch, JAX, torchax, the standard library or jaxside (the exported module included) is not
about the user's code and is dropped; the one that is (JAX computing a narrower dtype than the
torch code asked for) is said once, in our words, at the user's line that asked for it.
"""

from __future__ import annotations

import contextlib
import re
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

_TRUNCATED = re.compile(
    r"Explicitly requested dtype (\w+) (?:requested in (\w+) )?.*truncated to dtype (\w+)"
)


@contextlib.contextmanager
def library_warnings(
    is_user_file: Callable[[str], bool], say: Callable[[str], None], said: set[tuple[str, str]]
) -> Iterator[None]:
    """Inside: warnings from library files are dropped, a dtype truncation said in our words once
    per line of the user's (`said` holds those said, across the run); warnings attributed to the
    user's files are shown as Python would."""
    from jaxside.tracing import is_library_file

    with warnings.catch_warnings():
        shown = warnings.showwarning

        def show(message: Any, category: type[Warning], filename: str, lineno: int,
                 file: Any = None, line: str | None = None) -> None:
            if is_user_file(filename) or not _from_library(filename, is_library_file):
                shown(message, category, filename, lineno, file, line)
                return
            truncated = _TRUNCATED.search(str(message))
            if truncated is None:
                return
            asked, op, got = truncated.groups()
            where = _user_line(is_user_file)
            if (asked, where) in said:
                return
            said.add((asked, where))
            place = f"{where}: " if where else ""
            what = f"torch.{op}" if op else "the torch code"
            say(f"{place}{what} asks for {asked}, which JAX computes as {got} "
                "(JAX has no 64-bit types unless jax_enable_x64 is on)")

        warnings.showwarning = show
        yield


def _from_library(filename: str, is_library_file: Callable[[str], bool]) -> bool:
    """Whether a warning's file is the engines' or ours: a library's, or code we made (`<jaxside_export>`)."""
    return is_library_file(filename) or filename.startswith("<jaxside")


def _user_line(is_user_file: Callable[[str], bool]) -> str:
    """`model.py:65`, the innermost line of the user's code on the stack, or "" when there is none."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if is_user_file(filename):
            return f"{Path(filename).name}:{frame.f_lineno}"
        frame = frame.f_back
    return ""
