"""`annotate review` of ports laid out as real ones are: an entry file importing the port from a
module (Flax Linen) or from a package of several modules (Flax NNX, Equinox). Every port line is a
port line, labelled with its own file: each correct port passes with line-level pairs, and each bug
planted in one line of a copy (rotary sign, norm epsilon, attention scale) is named at that line of
that file. The ports in tests/ports/ were written for these tests, each in its framework's idiom."""

from __future__ import annotations

import importlib
import re
import shutil
import sys
from pathlib import Path

import pytest

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
}


def _forget(root: Path) -> None:
    """Drop the port modules imported from `root`, so a copy of the same package is imported afresh."""
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if file and Path(file).resolve().is_relative_to(root.resolve()) and Path(file) != TORCH:
            del sys.modules[name]


def _review(root: Path, framework: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    importlib.import_module(LAYOUTS[framework][0])  # part of the test extra: missing is a failure
    _forget(root)
    try:
        code = main(["review", str(TORCH), str(root / LAYOUTS[framework][1]), "-q"])
    finally:
        _forget(root)
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.mark.parametrize("framework", sorted(LAYOUTS))
def test_correct_port_pairs_lines_in_every_file(framework: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _review(PORTS, framework, capsys)
    assert code == 0, out
    assert "outputs match" in out and "DIFFERS" not in out and "first divergence" not in out, out
    table = [line.split() for line in out.splitlines() if line.startswith("tiny_decoder.py:")]
    assert len(table) > 15 and all(row[-1] == "ok" for row in table), out
    # Every file of the port computed some of torch's values, and says so under its own name.
    named = {re.sub(r":[\d,]+$", "", cell) for row in table for cell in row[1:-2]}
    assert named == {Path(file).name for file in LAYOUTS[framework][2]}, out


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
    found = re.search(r"^  port  (\S+):(\d+) ", out, re.M)
    assert found, out
    assert (found.group(1), int(found.group(2))) == (Path(file).name, hits[0] + 1), out
