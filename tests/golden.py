"""Golden files: `tests/golden/<kind>/<name>`, read by a person before they are committed.

A changed output is written to `tests/actual/<kind>/<name>` for review, with the diff in the
failure; `JAXSIDE_UPDATE_GOLDEN=1` accepts it (rewrites the golden file), and then fails the
test all the same (a rewritten golden is never a pass: rerun without it). Under CI (`CI` set)
goldens are never rewritten: asking to is itself a failure.
"""

from __future__ import annotations

import difflib
import os

import pytest
from conftest import ROOT

GOLDEN = ROOT / "tests" / "golden"
ACTUAL = ROOT / "tests" / "actual"


def assert_golden(kind: str, name: str, text: str) -> None:
    golden = GOLDEN / kind / name
    actual = ACTUAL / kind / name
    update = os.environ.get("JAXSIDE_UPDATE_GOLDEN")
    if update and os.environ.get("CI"):
        pytest.fail(f"JAXSIDE_UPDATE_GOLDEN={update} under CI: a person regenerates goldens, never CI")
    expected = golden.read_text(encoding="utf-8") if golden.exists() else None
    if expected == text:
        actual.unlink(missing_ok=True)
        return
    if update == "1":
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text, encoding="utf-8")
        pytest.fail(f"{kind}/{name} rewritten: read `git diff {golden}`, rerun without JAXSIDE_UPDATE_GOLDEN")
    actual.parent.mkdir(parents=True, exist_ok=True)
    actual.write_text(text, encoding="utf-8")
    diff = "".join(difflib.unified_diff(
        (expected or "").splitlines(True), text.splitlines(True), str(golden), str(actual)
    ))
    hint = f"review {actual} (JAXSIDE_UPDATE_GOLDEN=1 accepts it)"
    pytest.fail(f"{kind}/{name} changed; {hint}:\n{diff[:4000]}")
