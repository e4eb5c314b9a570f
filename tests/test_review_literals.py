"""`annotate review` where a program's result is a constant, which the jaxpr writes as an (unhashable)
`Literal` outvar on both sides (transformers' Gemma 2 returns its cache's sliding window so): the
constant is an output like any other, compared with the port's, and a wrong one is a mismatch; a
constant torch writes into a buffer in place must be a value the port returns or computes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jaxside.annotate.cli import main

PORTS = Path(__file__).resolve().parent / "ports"
ROW = re.compile(r"^(\S+\.py:\d+)\s+(\S+)\s+(\S+)(?:\s+(ok|DIFFERS))?$")
WINDOW = r"^  \['window'\]\s+int32\[\]\s+<- \['window'\]  max abs "
RAN = r"^  ran \(updated in place\)\s+float32\[\]\s+"


def _review(port: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["review", str(PORTS / "windowed.py"), str(port)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_a_constant_result_is_compared_like_any_output(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _review(PORTS / "windowed_port.py", capsys)
    assert code == 0, out
    rows = [match.groups() for line in out.splitlines() if (match := ROW.match(line))]
    assert rows and all(row[1] != "-" and row[3] == "ok" for row in rows), out
    assert re.search(WINDOW + r"0\.00e\+00  ok$", out, re.M), out
    assert re.search(RAN + r"a value the port computed  ok$", out, re.M), out
    assert "outputs match" in out


def test_a_wrong_constant_result_is_a_mismatch(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    port = tmp_path / "windowed_port.py"
    port.write_text((PORTS / "windowed_port.py").read_text().replace("jnp.int32(4)", "jnp.int32(5)"))
    code, out = _review(port, capsys)
    assert code == 1, out
    assert re.search(WINDOW + r"1\.00e\+00  MISMATCH$", out, re.M), out
    assert re.search(r"^  \['y'\].*  ok$", out, re.M) and "outputs DIVERGE" in out


def test_a_constant_set_in_place_the_port_never_makes_is_a_mismatch(capsys: pytest.CaptureFixture[str],
                                                                     tmp_path: Path) -> None:
    port = tmp_path / "windowed_port.py"
    port.write_text((PORTS / "windowed_port.py").read_text().replace("jnp.float32(1.0)", "jnp.float32(2.0)"))
    code, out = _review(port, capsys)
    assert code == 1, out
    assert re.search(RAN + r"no port value equals it  MISMATCH$", out, re.M), out
    assert re.search(WINDOW + r"0\.00e\+00  ok$", out, re.M) and "outputs DIVERGE" in out
