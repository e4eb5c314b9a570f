"""`annotate review` of a plain-JAX port: the correct Llama port passes; each bug planted in it (one
line edited) is caught at that line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from html_rows import rows

from jaxside.annotate.cli import main

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
# bug -> (text of the correct line, what the bug makes of it)
BROKEN = {
    "transpose": ('out @ p["wo"].T', 'out @ p["wo"]'),  # wo is square: shapes fit, numbers do not
    "eps": ("x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)",
            "x32 / (jnp.sqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True)) + eps)"),
    "rope": ("[even * cos - odd * sin, odd * cos + even * sin]",
             "[odd * cos + even * sin, even * cos - odd * sin]"),
}
# bug -> the torch line the first divergence names, and the expression shown for it
TORCH_SIDE = {
    "transpose": ("return self.wo(y)", "self.wo(y)"),
    "eps": ("torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + self.eps)",
            "torch.mean(x * x, dim=-1, keepdim=True) + self.eps"),
    "rope": ("rotated = torch.stack(",
             "torch.stack([x_re * cos - x_im * sin, x_im * cos + x_re * sin], dim=-1"),
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
    page = tmp_path / "review.html"
    code, out, err = _review(port, capsys, "--html", str(page))
    assert code == 1, out + err
    assert "outputs DIVERGE" in out
    found = re.search(r"^  port  (\S+):(\d+) ", out, re.M)
    assert found, out
    assert (found.group(1), int(found.group(2))) == ("llama_port.py", hits[0] + 1), out
    # The torch side of the divergence: its file, line and expression, then its type and values.
    line_text, expression = TORCH_SIDE[variant]
    torch_lines = (SAMPLES / "llama_model.py").read_text().splitlines()
    (torch_line,) = [n for n, line in enumerate(torch_lines, start=1) if line_text in line]
    shown = re.search(r"^  torch (.*)$", out, re.M)
    assert shown and shown.group(1).startswith(f"llama_model.py:{torch_line} `{expression}`  float32["), out
    # The page marks the same pair once, the torch line beside the port line, both texts shown.
    table = rows(page.read_text(encoding="utf-8"))
    (first,) = [row for row in table if "first" in row.classes]
    torch_numbers, torch_texts = first.cells[0].split(), [t.strip() for t in first.cells[1].splitlines()]
    assert torch_texts[torch_numbers.index(str(torch_line))] == torch_lines[torch_line - 1].strip(), first
    assert first.cells[3] == str(hits[0] + 1) and first.cells[4].strip() == lines[hits[0]].strip(), first
    paired = [row for row in table if "ok" in row.classes]
    assert paired and all(row.cells[1].strip() and row.cells[4].strip() for row in paired)


def test_bad_params_map_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "map.py"
    bad.write_text("PARAMS_MAP = {\"params['embed']\": 'no.such.weight'}\n")
    code, out, err = _review("llama_port.py", capsys, "--params-map", str(bad), "-q")  # -q: errors only
    assert code == 2
    assert err.strip().splitlines() == [err.strip()]
    assert err.startswith(f"error: {bad}: PARAMS_MAP maps params['embed'] to 'no.such.weight'")
