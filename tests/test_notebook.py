"""Notebooks: a model defined in an IPython cell traces with its names, and a `Trace` shows itself.

IPython keeps each cell's source in `linecache` under a name that is not a path
(`<ipython-input-1-...>`); `inspect.getfile` fails for classes defined there. The cells run in
IPython's own `InteractiveShell`, in a separate interpreter (the shell takes over the process).
"""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys

import pytest
from conftest import ROOT

pytest.importorskip("IPython")

CELLS = [
    '''
import torch
from torch import nn

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        hidden = self.proj(x)
        gated = torch.sigmoid(hidden) * x
        return gated + 1.0
''',
    '''
from jaxside.tracing import capture as bare_capture

shown = get_ipython().display_formatter.format
plain = shown(bare_capture(Block(), torch.randn(2, 8)))[0].get("text/html")  # no view registered yet
from jaxside import capture as top_capture  # docs/usage.md: this registers the view

registered = shown(top_capture(Block(), torch.randn(2, 8)))[0].get("text/html")
''',
    '''
import jaxside.render.html
from jaxside.render.comments import annotate_file
from jaxside.render.lower import lower
from jaxside.render.module import render_program
from jaxside.tracing import capture

trace = capture(Block(), torch.randn(2, 8))
program = lower(trace)
formats, _ = get_ipython().display_formatter.format(trace)
result = {
    "file": trace.root.file,
    "module": render_program(program, source="a cell"),
    "annotated": annotate_file(program),
    "page": jaxside.render.html.side_by_side(program),
    "repr": formats["text/plain"],
    "html": formats.get("text/html"),
    "plain": plain,
    "registered": registered,
}
''',
    # The Python API on a model and a port typed in cells.
    '''
import jax
import jaxside

torch.manual_seed(0)
block, x = Block(), torch.randn(2, 8)
exported = jaxside.export(block, x)
''',
    '''
def port(params, x):
    hidden = x @ params["proj"]["weight"].T + params["proj"]["bias"]
    gated = jax.nn.sigmoid(hidden) * x
    return gated - 1.0
''',
    '''
report = jaxside.review(block, port, x)
params = exported.load_params(block)
shown = get_ipython().display_formatter.format
result["api"] = {
    "export": shown(exported)[0], "review": shown(report)[0], "checked": exported.check().ok,
    "jit": jax.jit(exported.forward)(params, x.numpy()).ravel().tolist(), "torch": block(x).ravel().tolist(),
    "first": report.first_divergence.port, "ok": report.ok,
}
''',
]

SCRIPT = """
import json, sys
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
for cell in json.loads(sys.argv[1]):
    outcome = shell.run_cell(cell)
    if not outcome.success:
        raise SystemExit(repr(outcome.error_in_exec or outcome.error_before_exec))
print(json.dumps(shell.user_ns["result"]))
"""


@pytest.fixture(scope="module")
def result() -> dict:
    done = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(CELLS)], capture_output=True,
                          text=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_values_are_named_after_the_cell_locals(result):
    assert result["file"].startswith("<ipython-input-")
    module = result["module"]
    assert "hidden = " in module and "gated = jax.nn.sigmoid(hidden) * x" in module
    assert "dot_general = " not in module and "add = " not in module


def test_comments_and_the_page_read_the_cell(result):
    annotated = result["annotated"]
    assert "        gated = torch.sigmoid(hidden) * x  # gated = jax.nn.sigmoid(hidden) * x" in annotated
    assert annotated.startswith("import torch\nfrom torch import nn\n")  # the cell as IPython keeps it
    assert "gated" in result["page"] and "sigmoid" in result["page"]


def test_a_trace_shows_a_short_repr_and_the_page(result):
    assert result["repr"].startswith("<Trace of Block (torch): ") and len(result["repr"]) < 200
    assert result["html"].startswith("<iframe srcdoc=") and "sigmoid" in result["html"]


def test_importing_capture_from_jaxside_registers_the_view(result):
    assert result["plain"] is None  # jaxside.tracing alone: the notebook shows the repr
    assert result["registered"].startswith("<iframe srcdoc=") and "sigmoid" in result["registered"]


def test_the_api_exports_and_reviews_code_typed_in_cells(result):
    api = result["api"]
    assert api["checked"] and api["jit"] == pytest.approx(api["torch"], rel=1e-5, abs=1e-6)
    assert api["export"]["text/plain"].startswith("<Export of Block: forward(params, x), 1 defs")
    assert "sigmoid" in api["export"]["text/html"]
    assert not api["ok"] and api["first"][0].startswith("<ipython-input-") and api["first"][1] == 4
    assert "outputs DIVERGE" in api["review"]["text/plain"]
    page = html.unescape(api["review"]["text/html"].partition('srcdoc="')[2])
    shown = html.unescape(re.sub("<[^>]+>", "", page))
    assert "return gated - 1.0" in shown  # the port's cell, read from IPython's linecache
