"""What a run imports: a small model's annotate pays for torch, jax and torchax, not for
TorchDynamo (``torch._dynamo``, 1 to 3 s), which torch would import at torchax's first dispatch
and again when annotate puts torch's settings back."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_CAPTURE = """
import sys, torch
from jaxside.tracing import capture
from jaxside.tracing._internals import TorchaxMode
model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.GELU())
trace = capture(model, torch.ones(2, 4))
print(len(trace.jaxpr.jaxpr.eqns) > 0, "torch._dynamo" in sys.modules,
      hasattr(TorchaxMode.__torch_dispatch__.__wrapped__, "__dynamo_disable"))
"""

_ANNOTATE = """
import sys
from jaxside.annotate.cli import main
code = main([sys.argv[1], "-q", "-o", sys.argv[2]])
print(code, "torch._dynamo" in sys.modules)
"""


def _run(script: str, *args: str) -> str:
    result = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                            timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


def test_a_capture_does_not_import_torchdynamo_and_leaves_torch_as_it_was():
    assert _run(_CAPTURE) == "True False False"


def test_an_annotate_run_does_not_import_torchdynamo(tmp_path):
    out = tmp_path / "mlp_annotated.py"
    assert _run(_ANNOTATE, str(ROOT / "samples" / "mlp.py"), str(out)) == "0 False"
    assert "# jax:" in out.read_text()
