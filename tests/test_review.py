"""`annotate review`: the correct Llama port passes; each broken port is caught at its faulty line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from annotate.cli import main

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
BROKEN = {
    "transpose": 'return out @ p["wo"], {"k": keys, "v": values}',
    "eps": "normed = x32 / (jnp.sqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True)) + eps)",
    "rope": "rotated = jnp.stack([odd * cos + even * sin, even * cos - odd * sin], axis=-1)",
}


def _review(port: str, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    code = main(["review", str(SAMPLES / "llama_model.py"), str(SAMPLES / port), *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _line_of(path: Path, text: str) -> int:
    lines = [n for n, line in enumerate(path.read_text().splitlines(), start=1) if text in line]
    assert len(lines) == 1, lines
    return lines[0]


def test_correct_port_passes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    page = tmp_path / "review.html"
    code, out, err = _review("llama_port.py", capsys, "--html", str(page))
    assert code == 0, out + err
    assert "outputs match" in out
    assert "first divergence" not in out
    assert "DIFFERS" not in out
    assert "weights: 23 mapped" in out
    assert "No divergence" in page.read_text() and " first'" not in page.read_text()


@pytest.mark.parametrize("variant", sorted(BROKEN))
def test_broken_port_names_its_faulty_line_first(variant: str, capsys: pytest.CaptureFixture[str]) -> None:
    port = SAMPLES / f"llama_port_broken_{variant}.py"
    code, out, err = _review(port.name, capsys)
    assert code == 1, out + err
    assert "outputs DIVERGE" in out
    found = re.search(r"^  port  (\S+):(\d+) ", out, re.M)
    assert found, out
    assert found.group(1) == port.name
    assert int(found.group(2)) == _line_of(port, BROKEN[variant])


def test_bad_params_map_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "map.py"
    bad.write_text("PARAMS_MAP = {\"params['embed']\": 'no.such.weight'}\n")
    code, out, err = _review("llama_port.py", capsys, "--params-map", str(bad))
    assert code == 2
    assert err.strip().splitlines() == [err.strip()]
    assert err.startswith(f"error: {bad}: PARAMS_MAP maps params['embed'] to 'no.such.weight'")
