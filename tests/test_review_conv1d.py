"""`annotate review` of a model whose linear layers are transformers' `Conv1D` (GPT-2's), which keeps
its weight (in, out) where `nn.Linear` keeps (out, in): a port's leaves are fitted to the weight it
stands for, so a square one is not transposed by a guess from its shape (a false divergence) and an
(in, out) kernel is no weight 'nothing fits'. tests/ports/conv1d_block.py and its NNX and Equinox
ports; the block's (1, 1, DIM) buffer is held by both ports as a (DIM,) array, which it fits."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jaxside.annotate.cli import main

PORTS = Path(__file__).resolve().parent / "ports"
TORCH = PORTS / "conv1d_block.py"


def _review(port: Path, entry: str, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    code = main(["review", str(TORCH), str(port), "--port-entry", entry, "-q", *extra])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.mark.parametrize(("entry", "how"), [
    ("build_nnx", "3 kernels as Conv1D keeps them, (in, out), 1 without torch's axes of size 1"),
    ("build_equinox", "3 transposed from Conv1D's (in, out), 1 without torch's axes of size 1")])
def test_conv1d_weights_fit_the_port_as_the_weights_they_are(entry: str, how: str,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("flax")
    pytest.importorskip("equinox")
    code, out = _review(PORTS / "conv1d_ports.py", entry, capsys)
    assert code == 0, out
    assert re.search(rf"^weights: 7 mapped into .* \({re.escape(how)}\)$", out, re.M), out
    assert "DIFFERS" not in out and "outputs match" in out, out


def test_a_square_conv1d_kernel_used_transposed_diverges_there(capsys: pytest.CaptureFixture[str],
                                                               tmp_path: Path) -> None:
    pytest.importorskip("flax")
    pytest.importorskip("equinox")
    source = (PORTS / "conv1d_ports.py").read_text()
    port = tmp_path / "conv1d_ports.py"
    port.write_text(source.replace("return self.c_out(h)", "return (h @ self.c_out.kernel[...].T)"))
    code, out = _review(port, "build_nnx", capsys)
    assert code == 1, out
    line = next(n for n, text in enumerate(port.read_text().splitlines(), 1) if "self.c_out.kernel" in text)
    assert re.search(rf"^  port  conv1d_ports\.py:{line} ", out, re.M), out
    # As mapped: the kernel is Conv1D's weight as it is, no transpose.
    assert re.search(r"^  c_out\.kernel <- c_out\.weight$", out, re.M), out


def test_a_leaf_the_port_computes_is_kept_when_the_params_map_says_none(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """An Equinox port holding an array torch has no tensor for (a table it computes): every
    Equinox array is a weight, so review refuses it, until PARAMS_MAP maps it to None."""
    pytest.importorskip("flax")
    pytest.importorskip("equinox")
    source = (PORTS / "conv1d_ports.py").read_text()
    ramp = "        self.ramp = jnp.linspace(0.0, 0.0, 3)  # zeros, a table\n"
    table = source.replace("    gain: jax.Array\n", "    gain: jax.Array\n    ramp: jax.Array\n").replace(
        "        self.gain = jnp.ones((DIM,))\n", "        self.gain = jnp.ones((DIM,))\n" + ramp
    ).replace("* self.gain\n", "* self.gain + self.ramp.sum()\n")
    assert table.count("ramp") == 3  # declared, made, read
    port = tmp_path / "conv1d_ports.py"
    port.write_text(table)
    code, out = _review(port, "build_equinox", capsys)
    assert code == 2, out
    assert "no torch weight fits the Equinox weights ramp; map them in a --params-map file (to None: keep " \
           "the port's own" in out, out
    given = tmp_path / "map.py"
    given.write_text('PARAMS_MAP = {"ramp": None}\n')
    code, out = _review(port, "build_equinox", capsys, "--params-map", str(given))
    assert code == 0, out
    assert "1 port state kept as built" in out and "outputs match" in out, out
