"""The per-line table of `annotate review`'s text report, read as the tests that review a port need
it, and the review run as those tests run it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from jaxside.annotate.cli import main

ROW = re.compile(r"^(\S+\.py:\d+)\s+(\S+)\s+(\S+)(?:\s+(ok|DIFFERS))?$")
"""`torch line  port lines  max error  ok|DIFFERS` (port lines `-` where none was paired)."""


def assert_every_line_paired(out: str, at_least: int) -> None:
    """At least `at_least` torch lines in the report, each paired with port lines and ok."""
    rows = [match.groups() for line in out.splitlines() if (match := ROW.match(line))]
    assert len(rows) >= at_least, out
    assert [row for row in rows if row[1] == "-" or row[3] != "ok"] == [], out


def review(torch: Path, port: Path, capsys: Any, *extra: str) -> tuple[int, str]:
    """`annotate review TORCH PORT -q ...` in process: its exit code, and what it wrote (out, then err)."""
    code = main(["review", str(torch), str(port), "-q", *extra])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def line_number(lines: list[str], text: str) -> int:
    """The number of the one line of `lines` that contains `text`."""
    found = [n for n, line in enumerate(lines, 1) if text in line]
    assert len(found) == 1, (text, found)
    return found[0]
