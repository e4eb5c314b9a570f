"""The per-line table of `annotate review`'s text report, read as the tests that review a port need it."""

from __future__ import annotations

import re

ROW = re.compile(r"^(\S+\.py:\d+)\s+(\S+)\s+(\S+)(?:\s+(ok|DIFFERS))?$")
"""`torch line  port lines  max error  ok|DIFFERS` (port lines `-` where none was paired)."""


def assert_every_line_paired(out: str, at_least: int) -> None:
    """At least `at_least` torch lines in the report, each paired with port lines and ok."""
    rows = [match.groups() for line in out.splitlines() if (match := ROW.match(line))]
    assert len(rows) >= at_least, out
    assert [row for row in rows if row[1] == "-" or row[3] != "ok"] == [], out
