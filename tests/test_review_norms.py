"""`annotate review` of a port whose LayerNorm swaps its weight and bias, on a torch model whose
LayerNorms keep their initial ones and zeros (tests/ports/gpt_block.py, nanoGPT's style): the
first divergence is the norm's line, not the head's. With ones and zeros torch's norm leaves its
input as it is, so the port's value before its (wrong) affine step equals torch's norm output:
a value computed without the port's partner of a weight of one number is no evidence."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jaxside.annotate.cli import main

PORTS = Path(__file__).resolve().parent / "ports"
TORCH = PORTS / "gpt_block.py"
PORT = PORTS / "gpt_block_port.py"
FIRST = re.compile(r"^first divergence:\n  torch (\S+):(\d+) .*\n  port  (\S+):(\d+) ", re.M)


def _line(path: Path, text: str) -> int:
    (number,) = [n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line]
    return number


def _review(port: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["review", str(TORCH), str(port)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_the_port_reviews_clean(capsys: pytest.CaptureFixture[str]) -> None:
    """Its `linear` asks `"bias" in p`, as ports do (the head has none): review's stand-in answers
    as the torch module it resembles (it was an internal error)."""
    code, out = _review(PORT, capsys)
    assert code == 0 and "DIFFERS" not in out and "first divergence" not in out, out


@pytest.mark.parametrize("where, torch_line", [
    ("the final norm's call", "x = self.ln_f(x)"),
    ("the norm itself", "x = x + self.attn(self.ln_1(x))"),  # every norm: the first is the block's
])
def test_a_swapped_weight_and_bias_diverge_first_at_the_norm(
    where: str, torch_line: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    text = PORT.read_text()
    if where == "the final norm's call":
        swapped = '{"weight": params["ln_f"]["bias"], "bias": params["ln_f"]["weight"]}'
        planted = text.replace('layer_norm(params["ln_f"], x)', f"layer_norm({swapped}, x)")
    else:
        planted = text.replace('* p["weight"] + p["bias"]', '* p["bias"] + p["weight"]')
    assert planted != text
    port = tmp_path / "gpt_block_port.py"
    port.write_text(planted)
    code, out = _review(port, capsys)
    assert code == 1, out
    first = FIRST.search(out)
    assert first, out
    norm = _line(port, "return (x - mean) / jnp.sqrt(var + eps)")
    assert (first.group(1), int(first.group(2))) == ("gpt_block.py", _line(TORCH, torch_line)), out
    assert (first.group(3), int(first.group(4))) == ("gpt_block_port.py", norm), out
