"""`annotate review` of ports laid out as real ones are: an entry file importing the port from a
module (Flax Linen) or from a package of several modules (Flax NNX, Equinox). Every port line is a
port line, labelled with its own file: each correct port passes with line-level pairs, and each bug
planted in one line of a copy (rotary sign, norm epsilon, attention scale wrong or forgotten) is
named at that line of that file, with a finite error. The ports in tests/ports/ were written for
these tests, each in its framework's idiom."""

from __future__ import annotations

import importlib
import re
import shutil
import sys
from pathlib import Path

import pytest
from html_rows import rows

from jaxside.annotate.cli import main

PORTS = Path(__file__).resolve().parent / "ports"
TORCH = PORTS / "tiny_decoder.py"
# framework -> (package to import, entry file, the port's own files)
LAYOUTS = {
    "nnx": ("flax", "nnx_entry.py", ("nnx_port/model.py", "nnx_port/layers.py", "nnx_port/rotary.py")),
    "linen": ("flax", "linen_entry.py", ("linen_port.py",)),
    "equinox": ("equinox", "eqx_entry.py",
                ("eqx_port/model.py", "eqx_port/attention.py", "eqx_port/norm.py")),
}
# An NNX port whose attention weights are one library call (the entry file, the rest nnx_port's).
FUSED = ("flax", "fused_entry.py", ("fused_entry.py", "nnx_port/model.py", "nnx_port/layers.py",
                                    "nnx_port/rotary.py"))
# (framework, bug) -> (file, text of the correct line, what the bug makes of it)
BUGS = {
    ("nnx", "rope"): ("nnx_port/rotary.py", "[-second, first]", "[second, -first]"),
    ("nnx", "eps"): ("nnx_port/layers.py", "keepdims=True) + self.eps)", "keepdims=True)) + self.eps"),
    ("nnx", "scale"): ("nnx_port/layers.py", "/ jnp.sqrt(self.head_dim).astype(q.dtype)", "/ self.head_dim"),
    ("linen", "rope"): ("linen_port.py", "[-second, first]", "[second, -first]"),
    ("linen", "eps"): ("linen_port.py", "keepdims=True) + self.eps)", "keepdims=True)) + self.eps"),
    ("linen", "scale"): ("linen_port.py", "* self.head_dim**-0.5", "* self.head_dim**-1.0"),
    ("equinox", "rope"): ("eqx_port/attention.py", "[-x[..., half:], x[..., :half]]",
                          "[x[..., half:], -x[..., :half]]"),
    ("equinox", "eps"): ("eqx_port/norm.py", "rsqrt(variance + self.eps)", "rsqrt(variance) + self.eps"),
    ("equinox", "scale"): ("eqx_port/attention.py", "/ jnp.sqrt(q.shape[-1])", "/ q.shape[-1]"),
    # The scale forgotten: torch's scaled scores have no port value, the masked ones come next.
    ("nnx", "no scale"): ("nnx_port/layers.py", " / jnp.sqrt(self.head_dim).astype(q.dtype)", ""),
    ("linen", "no scale"): ("linen_port.py", " * self.head_dim**-0.5", ""),
    ("equinox", "no scale"): ("eqx_port/attention.py", " / jnp.sqrt(q.shape[-1])", ""),
}


def _forget(root: Path) -> None:
    """Drop the port modules imported from `root`, so a copy of the same package is imported afresh."""
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if file and Path(file).resolve().is_relative_to(root.resolve()) and Path(file) != TORCH:
            del sys.modules[name]


def _review(root: Path, framework: str, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    package, entry, _ = FUSED if framework == "fused" else LAYOUTS[framework]
    importlib.import_module(package)  # part of the test extra: missing is a failure
    _forget(root)
    try:
        code = main(["review", str(TORCH), str(root / entry), "-q", *extra])
    finally:
        _forget(root)
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.mark.parametrize("framework", sorted(LAYOUTS))
def test_correct_port_pairs_lines_in_every_file(framework: str, capsys: pytest.CaptureFixture[str],
                                                tmp_path: Path) -> None:
    page = tmp_path / "review.html"
    code, out = _review(PORTS, framework, capsys, "--html", str(page))
    assert code == 0, out
    assert "outputs match" in out and "DIFFERS" not in out and "first divergence" not in out, out
    table = [line.split() for line in out.splitlines() if line.startswith("tiny_decoder.py:")]
    assert len(table) > 15 and all(row[-1] == "ok" for row in table), out
    # Every file of the port computed some of torch's values, and says so under its own name.
    named = {re.sub(r":[\d,]+$", "", cell) for row in table for cell in row[1:-2]}
    assert named == {Path(file).name for file in LAYOUTS[framework][2]}, out
    # The page: a section per port file, each paired row showing its own file's line.
    text = page.read_text(encoding="utf-8")
    sections = re.findall(r"<th colspan=5>([^<]+)</th>", text)
    files = {Path(file).name: PORTS / file for file in LAYOUTS[framework][2]}
    assert set(sections) >= set(files) - {"linen_port.py"}, sections  # one file: no sections
    shown = sections or ["linen_port.py"]
    paired = [row for row in rows(text) if "ok" in row.classes]
    assert paired
    for row in paired:
        section, line = re.fullmatch(r"p(\d*)-L(\d+)", row.id).groups()
        source = files[shown[int(section or 0)]].read_text().splitlines()
        assert row.cells[4].strip() == source[int(line) - 1].strip(), row


@pytest.mark.parametrize(("framework", "bug"), sorted(BUGS))
def test_planted_bug_is_named_at_its_file_and_line(framework: str, bug: str, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    file, good, bad = BUGS[(framework, bug)]
    root = tmp_path / "ports"
    shutil.copytree(PORTS, root, ignore=shutil.ignore_patterns("__pycache__"))
    lines = (root / file).read_text().splitlines(keepends=True)
    hits = [n for n, line in enumerate(lines) if good in line]
    assert len(hits) == 1, hits
    lines[hits[0]] = lines[hits[0]].replace(good, bad)
    (root / file).write_text("".join(lines))
    code, out = _review(root, framework, capsys)
    assert code == 1, out
    found = re.search(r"^  port  (\S+):(\d+) .*\n  max error (\S+)$", out, re.M)
    assert found, out
    assert (found.group(1), int(found.group(2))) == (Path(file).name, hits[0] + 1), out
    assert float(found.group(3)) < 100, out  # a number: never a mask's fill against a score


def test_library_attention_call_is_one_unit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Flax's `dot_product_attention_weights` computes torch's scores, mask and softmax lines in one
    expression: the correct port reports no difference; a bug in that call is named there."""
    code, out = _review(PORTS, "fused", capsys)
    assert code == 0, out
    assert "DIFFERS" not in out and "first divergence" not in out and "outputs match" in out, out
    root = tmp_path / "ports"
    shutil.copytree(PORTS, root, ignore=shutil.ignore_patterns("__pycache__"))
    entry = root / "fused_entry.py"
    text = entry.read_text()
    assert text.count("attention_weights(q, k,") == 1
    entry.write_text(text.replace("attention_weights(q, k,", "attention_weights(q * 2.0, k,"))
    code, out = _review(root, "fused", capsys)
    assert code == 1, out
    line = next(n for n, t in enumerate(entry.read_text().splitlines(), 1) if "q * 2.0" in t)
    assert re.search(rf"^  port  fused_entry.py:{line} ", out, re.M), out


# How the port returns its logits: as Hugging Face's Flax `ModelOutput` (an OrderedDict registered
# with torch's pytree without keys, unknown to JAX), a NamedTuple, a flax struct dataclass.
RETURNS = {
    "keyless": ("import collections\nimport torch.utils._pytree as torch_pytree\n\n\n"
                "class Out(collections.OrderedDict):\n    pass\n\n\n"
                "torch_pytree.register_pytree_node(Out, lambda o: (list(o.values()), list(o)),\n"
                "                                  lambda values, names: Out(zip(names, values)))\n",
                "Out(logits=logits, hidden_states=None)", "['logits']"),
    "namedtuple": ("from typing import NamedTuple\n\nimport jax\n\n\n"
                   "class Out(NamedTuple):\n    logits: jax.Array\n    aux: tuple\n",
                   "Out(logits, ())", ".logits"),
    "struct": ("import jax\nfrom flax import struct\n\n\n"
               "@struct.dataclass\nclass Out:\n    logits: jax.Array\n    extra: dict\n",
               "Out(logits=logits, extra={'scaled': logits * 2})", ".logits"),
}


@pytest.mark.parametrize("kind", sorted(RETURNS))
def test_port_output_pytrees_compare_leaf_by_leaf(kind: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    head, made, path = RETURNS[kind]
    entry = tmp_path / f"returns_{kind}.py"
    entry.write_text(f"{head}\nfrom nnx_port.model import Decoder\nfrom flax import nnx\n\n\n"
                     "class Wrapped(Decoder):\n    def __call__(self, tokens):\n"
                     f"        logits = super().__call__(tokens)\n        return {made}\n\n\n"
                     "def build():\n    return Wrapped(nnx.Rngs(0))\n")
    sys.path.insert(0, str(PORTS))
    try:
        _forget(PORTS)
        code = main(["review", str(TORCH), str(entry), "-q"])
    finally:
        sys.path.remove(str(PORTS))
        _forget(PORTS)
    out = capsys.readouterr()
    assert code == 0, out.out + out.err
    assert re.search(rf"^  output +float32\[1, 6, 24\] +<- {re.escape(path)}  max abs \S+  ok$", out.out,
                     re.M), out.out


def _loader_review(entry: Path, capsys: pytest.CaptureFixture[str], name: str) -> tuple[int, str]:
    sys.path.insert(0, str(PORTS))
    try:
        _forget(PORTS)
        code = main(["review", str(TORCH), str(entry), "-q", "--port-weights", name])
    finally:
        sys.path.remove(str(PORTS))
        _forget(PORTS)
    out = capsys.readouterr()
    return code, out.out + out.err


def test_port_weights_loader_is_checked_leaf_by_leaf(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The port's own converter fills the port; a correct one passes, one that copies a square
    kernel without its transpose is named: the leaf, what it holds, and the loader line."""
    code, out = _loader_review(PORTS / "loader_entry.py", capsys, "load_from_torch")
    assert code == 0, out
    assert "load_from_torch: every leaf as review's mapping makes it" in out and "outputs match" in out, out
    good = 'weight(prefix + "self_attn.o_proj.weight").T'
    lines = (PORTS / "loader_entry.py").read_text().splitlines(keepends=True)
    (hit,) = [n for n, line in enumerate(lines) if good in line]
    lines[hit] = lines[hit].replace(good, good[:-2])
    broken = tmp_path / "loader_entry.py"
    broken.write_text("".join(lines))
    code, out = _loader_review(broken, capsys, "load_from_torch")
    assert code == 1, out
    o_proj = "layers.0.self_attn.o_proj"
    assert (f"  {o_proj}.kernel holds {o_proj}.weight where review's mapping makes {o_proj}.weight.T "
            f"(made at loader_entry.py:{hit + 1})") in out, out
    assert "load_from_torch: 1 leaf unlike review's mapping:" in out, out


def test_port_weights_names_a_missing_loader(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _loader_review(PORTS / "loader_entry.py", capsys, "convert")
    assert code == 2
    assert out.strip().splitlines() == [out.strip()], out  # one line, naming the port file
    assert re.match(r"error: \S*loader_entry.py: defines no function convert; ", out), out


def test_torch_lines_carry_their_own_file(capsys: pytest.CaptureFixture[str]) -> None:
    """TORCH_FILE an entry file importing the model: each torch line is named by the file it is in
    (the model's), with that file's line number, never by the entry file's name."""
    _forget(PORTS)
    try:
        code = main(["review", str(PORTS / "torch_entry.py"), str(PORTS / "nnx_entry.py"), "-q"])
    finally:
        _forget(PORTS)
    out = capsys.readouterr().out
    assert code == 0, out
    rows = [line.split()[0] for line in out.splitlines() if re.match(r"^\S+\.py:\d+ ", line)]
    assert len(rows) > 15 and all(row.startswith("tiny_decoder.py:") for row in rows), out
    rotated = next(n for n, text in enumerate(TORCH.read_text().splitlines(), 1)
                   if "torch.cat((-second, first)" in text)
    assert f"tiny_decoder.py:{rotated}" in rows, out


def test_mask_fills_that_agree_are_equal() -> None:
    """torch's `finfo.min` where the port writes `-inf` (or `-1e10`) fills a mask alike; a fill
    against a number, or fills of opposite signs, still differ."""
    import numpy as np

    from jaxside.annotate.review.align import close, error

    lowest = np.finfo(np.float32).min
    torch_scores = np.array([0.5, lowest, lowest + 1.0], np.float32)
    for port_scores in ([0.5, -np.inf, -np.inf], [0.5, -1e10, -np.inf]):
        port = np.array(port_scores, np.float32)
        assert close(torch_scores, port, 1e-5, 1e-6) and error(torch_scores, port) == 0.0
    assert not close(torch_scores, np.array([0.5, -np.inf, 3.0], np.float32), 1e-5, 1e-6)
    assert not close(torch_scores, np.array([0.5, np.inf, -np.inf], np.float32), 1e-5, 1e-6)


def test_port_weights_names_a_leaf_of_another_shape(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A Linen loader that copies a non-square kernel without its transpose: one line, at the loader line."""
    entry = tmp_path / "linen_loader.py"
    entry.write_text("import jax.numpy as jnp\nfrom flax.core import unfreeze\n"
                     "from linen_port import Decoder\n\n\n"
                     "def build():\n    return Decoder()\n\n\n"
                     "def load(port, state_dict):\n    module, variables = port\n"
                     "    params = unfreeze(variables['params'])\n"
                     "    gate = jnp.asarray(state_dict['layers.0.mlp.gate_proj.weight'].numpy())\n"
                     "    params['layers_0']['gate_proj']['kernel'] = gate\n"
                     "    return {'params': params}\n")
    code, out = _loader_review(entry, capsys, "load")
    assert code == 2, out
    assert out.strip().splitlines() == [out.strip()], out
    made = next(n for n, text in enumerate(entry.read_text().splitlines(), 1) if "gate = " in text)
    assert re.match(rf"error: {re.escape(str(entry))}:{made}: load gave params.layers_0.gate_proj.kernel the "
                    r"shape \[40, 16\], where the port was built with \[16, 40\]; ", out), out
