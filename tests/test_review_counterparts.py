"""Which port value `annotate review` holds against a torch value no port value equals. A plain JAX
port of transformers' Llama (tests/ports/hf_llama_port.py, written for these tests) against the
torch model, each bug planted by editing one line of a copy: the first divergence names the port
line that computes the wrong value, the `concatenate` of a rotate-half with its signs swapped, not
the `split` before it (torch's halves, which torchax slices again inside its `cat`, are values the
port's halves equal); the scores line of a port that forgets the attention scale, with a finite
error, not the masked scores after it (whose fills torch's scaled scores do not have yet). The
`--html` page says what the report says after the first divergence, in its words. A port value
whose infinities the next torch value has not (an overflow) is no next step's mask: it is named."""

from __future__ import annotations

import html
import inspect
import re
from pathlib import Path

import pytest
from review_rows import line_number, review

PORTS = Path(__file__).resolve().parent / "ports"
TORCH = PORTS / "hf_llama.py"
PORT = PORTS / "hf_llama_port.py"
FIRST = re.compile(r"^first divergence:\n  torch (\S+) .*\n  port  (\S+) .*\n  max error (\S+)\n  (.*)$",
                   re.M)
BUGS = {  # bug -> (the port's line, what the bug makes of it, the text of torch's line it breaks)
    "rope": ("return jnp.concatenate([-x2, x1], axis=-1)", "return jnp.concatenate([x2, -x1], axis=-1)",
             "torch.cat((-x2, x1), dim=-1)"),
    "scale": ("scores = q @ k.transpose(0, 1, 3, 2) / jnp.sqrt(HEAD_DIM)",
              "scores = q @ k.transpose(0, 1, 3, 2)",
              "torch.matmul(query, key_states.transpose(2, 3)) * scaling"),
}


def _review(port: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    return review(TORCH, port, capsys, *extra)


def test_the_port_matches(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("transformers")
    code, out = _review(PORT, capsys)
    assert code == 0, out
    assert "DIFFERS" not in out and "first divergence" not in out and "outputs match" in out, out


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_the_first_divergence_is_the_line_that_computes_the_wrong_value(
        bug: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("transformers")
    from transformers.models.llama import modeling_llama

    good, edit, torch_text = BUGS[bug]
    source = PORT.read_text()
    assert source.count(good) == 1
    port = tmp_path / PORT.name
    port.write_text(source.replace(good, edit))
    page = tmp_path / "review.html"
    code, out = _review(port, capsys, "--html", str(page))
    assert code == 1, out
    found = FIRST.search(out)
    assert found is not None, out
    torch_line = line_number(inspect.getsource(modeling_llama).splitlines(), torch_text)
    port_line = line_number(port.read_text().splitlines(), edit)
    assert found.group(1, 2) == (f"modeling_llama.py:{torch_line}", f"{PORT.name}:{port_line}"), out
    assert 0 < float(found.group(3)) < 10, out  # the values part by a number, not by a mask's inf
    after = found.group(4)
    if bug == "scale":  # the port's scores are torch's before the scale: that step is missing
        assert after.startswith("the port's value equals torch's earlier modeling_llama.py:"
                                f"{torch_line} `torch.matmul(query, key_states.transpose(2, 3))`: "), out
    else:  # the port's queries are torch's: the bug lies after them
        queries = line_number(source.splitlines(), "return (x @ weight.T).reshape(")  # inside heads()
        assert after.startswith(f"after the port's last equal value: {PORT.name}:{queries} "), out
    # The page says the same, in the banner, its port line linked to the line's row.
    banner = re.search(r"<div class=banner id=first>(.*?)</div></div>", page.read_text(encoding="utf-8"))
    assert banner is not None
    said = re.search(r"<div class=after>(.*)", banner.group(1))
    assert said is not None and html.unescape(re.sub(r"<[^>]+>", "", said.group(1))) == after, banner.group(0)
    if bug == "rope":
        assert f"<a href='#p-L{queries}'>" in said.group(1), said.group(1)


OVERFLOW_TORCH = """import torch
from torch import nn


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 16)

    def forward(self, x):
        logits = self.proj(x) * 200.0
        return torch.log_softmax(logits, dim=-1)


def example():
    torch.manual_seed(0)
    return Head(), (torch.randn(3, 8),)
"""
OVERFLOW_PORT = """import jax.numpy as jnp


def forward(params, x):
    logits = (x @ params["proj"]["weight"].T + params["proj"]["bias"]) * 200.0
    return logits - jnp.log(jnp.sum(jnp.exp(logits), axis=-1, keepdims=True))
"""


def test_infinities_no_torch_value_has_are_no_mask(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    # The port's log-sum-exp overflows: its `exp` has infinities where torch's log_softmax has
    # numbers, and no torch value after it masks those positions. The port did not skip a step
    # there: the divergence is its `exp`, not the logits before it (equal to torch's).
    (tmp_path / "head.py").write_text(OVERFLOW_TORCH)
    (tmp_path / "head_port.py").write_text(OVERFLOW_PORT)
    code, out = review(tmp_path / "head.py", tmp_path / "head_port.py", capsys)
    assert code == 1, out
    found = FIRST.search(out)
    assert found is not None, out
    assert found.group(1, 2) == ("head.py:12", "head_port.py:6"), out
    assert found.group(4).startswith("after the port's last equal value: head_port.py:5 "), out
