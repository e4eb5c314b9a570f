"""`annotate review` of a plain-JAX port: the correct Llama port passes; each bug planted in it (one
line edited) is caught at that line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from annotate.cli import main

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
# bug -> (text of the correct line, what the bug makes of it)
BROKEN = {
    "transpose": ('out @ p["wo"].T', 'out @ p["wo"]'),  # wo is square: shapes fit, numbers do not
    "eps": ("x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)",
            "x32 / (jnp.sqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True)) + eps)"),
    "rope": ("[even * cos - odd * sin, odd * cos + even * sin]",
             "[odd * cos + even * sin, even * cos - odd * sin]"),
}


def _review(port: str | Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    code = main(["review", str(SAMPLES / "llama_model.py"), str(SAMPLES / port), *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


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
def test_broken_port_names_its_faulty_line_first(variant: str, capsys: pytest.CaptureFixture[str],
                                                 tmp_path: Path) -> None:
    good, bad = BROKEN[variant]
    lines = (SAMPLES / "llama_port.py").read_text().splitlines(keepends=True)
    hits = [n for n, line in enumerate(lines) if good in line]
    assert len(hits) == 1, hits
    lines[hits[0]] = lines[hits[0]].replace(good, bad)
    port = tmp_path / "llama_port.py"
    port.write_text("".join(lines))
    code, out, err = _review(port, capsys)
    assert code == 1, out + err
    assert "outputs DIVERGE" in out
    found = re.search(r"^  port  (\S+):(\d+) ", out, re.M)
    assert found, out
    assert (found.group(1), int(found.group(2))) == ("llama_port.py", hits[0] + 1), out


def test_bad_params_map_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "map.py"
    bad.write_text("PARAMS_MAP = {\"params['embed']\": 'no.such.weight'}\n")
    code, out, err = _review("llama_port.py", capsys, "--params-map", str(bad), "-q")  # -q: errors only
    assert code == 2
    assert err.strip().splitlines() == [err.strip()]
    assert err.startswith(f"error: {bad}: PARAMS_MAP maps params['embed'] to 'no.such.weight'")
