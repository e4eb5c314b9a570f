"""The benchmark runner's smoke version: every row runs and prints. Timings are never asserted."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# One interpreter is enough: `make test` runs this file on 3.11 only (docs/testing.md).
pytestmark = pytest.mark.one_interpreter

# `benchmarks` is a folder of the repository, not an installed package.
if str(Path(__file__).resolve().parents[1]) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import runner  # noqa: E402


def test_smoke_prints_every_row(capsys: pytest.CaptureFixture[str]) -> None:
    code = runner.main(["--smoke"])
    out = capsys.readouterr().out
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0].startswith("jaxside benchmarks (smoke)")
    rows = {line.split("  ")[0] for line in lines[3:-1]}
    assert rows == {
        "1 capture vs bare", "1b hook, plain Python", "2 annotate --export", "3 export runtime",
        "4 render / 1k eqns", "5 against bare", "6 render vs depth", "7 readability", "8 catalogue",
    }, out
    assert not any("failed:" in line for line in lines), out


def test_only_one_row(capsys: pytest.CaptureFixture[str]) -> None:
    assert runner.main(["--smoke", "--only", "hook"]) == 0
    rows = {line.split("  ")[0] for line in capsys.readouterr().out.splitlines()[3:-1]}
    assert rows == {"1b hook, plain Python"}
