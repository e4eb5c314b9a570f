"""The exported module is a file people commit: `ruff check` and `ruff format --check` pass on it.

`render.layout` lays statements out the way `ruff format` does; here ruff itself judges every
golden export and statements built at random from the forms the exporter writes.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from jaxside.render.layout import format_body

RUFF = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
EXPORTS = sorted((ROOT / "tests" / "golden" / "export").glob("*.py"))
pytestmark = pytest.mark.skipif(not Path(RUFF).exists(), reason="ruff is not installed")


def _ruff(*args: str, text: str | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([RUFF, *args], input=text, capture_output=True, text=True, cwd=cwd)


@pytest.mark.parametrize("path", EXPORTS, ids=lambda p: p.name)
def test_golden_exports_pass_ruff_as_ruff_formats_them(path):
    """ruff's defaults (`--isolated`: no project settings), as in a fresh project."""
    formatted = _ruff("format", "--isolated", "-", text=path.read_text(encoding="utf-8"))
    assert formatted.returncode == 0, formatted.stderr
    assert formatted.stdout == path.read_text(encoding="utf-8")
    checked = _ruff("check", "--isolated", "--select", "E4,E7,E9,F,W,I,UP", str(path))
    assert checked.returncode == 0, checked.stdout


def test_every_golden_export_is_checked():
    assert len(EXPORTS) >= 10


# -- statements of the forms the exporter writes, at a width that makes them break ------------------

CASES = """
x = aaaaaaaaaaa + bbbbbbbbbbbb * cccccccc(dddddddddddddddddddddd, eeeeeeeeeeeeeeeeeeeeeeeee)
x = aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa + bbbbbbbbbb(ddddddddddddd, eeeeeeeeeeeee)
x = f(aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa, bbbbbbbbbbbbb) + g(bbbbb)
x = aaa + bbb + cccccccccccccccccc(dddddddddddddddddddddddddddddddddddddddddddddd, e)
x = a[b + 1:], a[-1:], a[:, :x.shape[1]], a[::2], a ** 2, a.b ** 2, a[1] ** 2, f(a) ** 2
x = aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.at[bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb].set(ccccccccccccccccccc)
x = fooooooooooooooooooooooooooooooooooooooooooooooooooooooooo(xxxxxxxxxxxxxxxxxxxx, yyyyyyyy)[0]
x = aaaaaaaaaaaaaaaaaaaaaaaaaaa < bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb and cccccccccccccccccccccccc is not None
x = -aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa * (bbbbbbbbbbbbbbbbbbbbbbbbbbb + ccccccccccccccccccccc)
x = (aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa + bbbbbbbbbbbbbbbbbbbbbbbbbbb).reshape(ccccccccccccc)
x = aaaa * ccccccccccccccccccccccccccccccccccccccccccccc[bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb]
x = [aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa for aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa in bbbbbbbbbbbbbbbbbbbbbbbbbbbbb]
x = {"layers": [{"keys": keys, "values": values} for keys, values in past_key_values_list]}
x = ffffffffff(aaaaaaaaaaaaaaaaaaaaa(b) for b in cccccccccccccccccccccccc if ddddddddddddddddddd)
x = {'aaaaaaaaaaa': bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb, 'c': ddddddddddddddddddddddd}
(aaaaaaaaaaaaa, bbbbbbbbbbbbbbbbbbbb), cccccccccccccccccccccccc = fooooooo(x, y)
y, z = lax.while_loop(lambda c: c[0] < 10, lambda c: (c[0] + 1, c[1] * 2.0), (0, x))
for aaaaaaaaaaaaaaaaa, bbbbbbbbbbbbbbbbbbbbbbbb in zip(cccccccccccccccccccccc, dddddddddddddddddd):
    pass
def inner(aaaaaaaaaa, bbbbbbbbbbbbb, cccccccccccc, ddddddddddddddd, eeee, fffffffffffffffffffff):
    return aaaaaaaaaa, bbbbbbbbbbbbb, cccccccccccc, ddddddddddddddd, eeeeeeeeeeeeeee
if downsampleeeeeeeeeeeeeeeeeeeeeeeeeeee:
    shortcut = fooooooooooooooooooooooooooooooo(xxxxxxxxxxxxxxxxxxxxxxxxxx, yyyyyyyyyyyyyyyyy)
else:
    shortcut = x
if not has_skip:
    x = x + shortcut
return aaaaaaaaaaaaaaaaaaaaaaaaa, fooooooooooooooooo(bbbbbbbbbbbbbbbbbbbbbbbbbbbbbb)
x = g(aaaaaaaaaaaaaa[jnp.zeros((bbbbbbbbbbbbbbbbbbbbbbbb.shape[0],), jnp.int32).at[ccccccccc].set(d)], 3)
x = g(xxxxxxxx, (aaaaaaaaaaaaaaaaaaaaaa + bbbbbbbbbbbbbbbbbbbbbb).at[cccccccccccccccccc].set(dddddddd))
x = g(xxxxxxxx, aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.at[cccccccccccccccccccccccc].set(d))
x = g(xxxxxxxx, fffffffffff(aaaaaaaaaaaaa).reshape(-1).astype(jnp.float32).sum(axis=0), yyyyyyyyyyyy)
x = jnp.where(mmmmmmmmmmmmmmmmmmmmmmmmmm, xxxxxxxxxxxxxxxxxxxxxx, -3.4028235e+38) + 1e+16 * yyyyyyyyyyyy
x = jnp.sum(jnp.abs(params["conv"]["parametrizations"]["weight"]["original1"]) ** config.ntensors)
x = -aaaa**2 + (~bbbb**cccc) * f(-(xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx ** yyyyyyyyyyyyyyyyyyyyyyy))
"""


@pytest.mark.parametrize("width", [60, 88])
def test_statements_are_laid_out_as_ruff_formats_them(width):
    """ruff leaves each statement as laid out, at widths that break it in different places: call
    chains in brackets in its fluent style (`zeros(n)` then `.at[i]` and `.set(v)` a line each,
    as HF's MoE routing exports), numbers as it writes them (`-3.4028235e38`, T5's and Gemma 2's
    masks), `**` starting a line like any operator (wav2vec2's weight norm) and in parentheses
    after a unary operator (`-(x**2)`), a comprehension's clauses on one line inside its broken
    brackets when they fit there (the cache an HF decoder's loop collects)."""
    body = ast.parse("def f():\n" + "".join("    " + line + "\n" for line in CASES.strip().splitlines())).body
    source = "def f():\n" + "\n".join(format_body(body[0].body, 4, width, function=True)) + "\n"
    formatted = _ruff("format", "--isolated", "--line-length", str(width), "-", text=source)
    assert formatted.returncode == 0, formatted.stderr
    assert formatted.stdout == source


def test_a_comprehension_breaks_at_for_only_where_its_line_between_brackets_is_too_long():
    """ruff breaks a comprehension's brackets first: HF's returned cache stays one line inside them."""
    cache = "{'layers': [{'keys': keys, 'values': values} for keys, values in past_key_values]}"
    line = f"return {{'logits': logits, 'past_key_values': {cache}}}"
    body = ast.parse("def f():\n    " + line + "\n").body
    source = "def f():\n" + "\n".join(format_body(body[0].body, 4, 88, function=True)) + "\n"
    assert '{"keys": keys, "values": values} for keys, values in past_key_values\n' in source, source
    formatted = _ruff("format", "--isolated", "-", text=source)
    assert formatted.returncode == 0 and formatted.stdout == source, formatted.stdout
