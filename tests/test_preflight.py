"""The command line's own expressions are checked before torch or jax is imported (a typo costs
a fraction of a second, not the seconds of the imports)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# Runs the command in a fresh interpreter and reports which engines it had imported by the end.
_PROBE = textwrap.dedent("""
    import sys
    from jaxside.annotate.cli import main
    code = main(sys.argv[1:])
    print("imported:", sorted({"torch", "jax"} & set(sys.modules)))
    sys.exit(code)
""")


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("preflight") / "model.py"
    path.write_text("import torch\n\n\nclass Net(torch.nn.Module):\n    def forward(self, x):\n"
                    "        return x * 2\n")
    return path


@pytest.mark.parametrize(("flag", "text", "says"), [
    ("--entry", "Net(", "--entry 'Net(' is not a Python expression ('(' was never closed)"),
    ("--inputs", "(torch.randn(2),", "--inputs '(torch.randn(2),' is not a Python expression"),
    ("--kwargs", "dict(a=", "--kwargs 'dict(a=' is not a Python expression"),
    ("--setup", "model.setup_caches(1,", "--setup 'model.setup_caches(1,' is not Python"),
])
def test_an_expression_that_does_not_parse_is_refused_before_the_imports(model, flag, text, says):
    run = subprocess.run([sys.executable, "-c", _PROBE, str(model), flag, text],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    (line,) = run.stderr.splitlines()
    assert line.startswith(f"error: {model}: {says}")
    assert run.stdout == "imported: []\n"


def test_expressions_that_parse_go_on_to_the_imports(model):
    run = subprocess.run([sys.executable, "-c", _PROBE, str(model), "--entry", "Net()", "--inputs",
                          "(torch.ones(2),)", "--kwargs", "{}", "--setup", "model.eval()", "-q"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("import torch")
    assert run.stdout.endswith("imported: ['jax', 'torch']\n")
