"""Standard streams as users have them: an ASCII-only stdout, FILE on /dev/stdin, -q and -v for review.

Each run is a real `python -m jaxside` process, since the encoding of stdout and what stdin is
are the process's own.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

# One interpreter is enough: `make test` runs this file on 3.11 only (docs/testing.md).
pytestmark = pytest.mark.one_interpreter

MODEL = "import torch\n\ndef f(x):\n    größe = torch.tanh(x)\n    return größe * 2\n\n" \
        "def example():\n    return f, (torch.ones(3),)\n"
PORT = "import jax.numpy as jnp\n\ndef forward(x):\n    größe = jnp.tanh(x)\n    return größe * 2\n"
ASCII = {"PYTHONIOENCODING": "ascii", "LC_ALL": "C", "LANG": "C"}


def _annotate(args: list[str], cwd: Path, env: dict[str, str] | None = None,
              stdin: Path | None = None) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    with open(stdin or os.devnull, "rb") as given:
        return subprocess.run([sys.executable, "-m", "jaxside", *args], cwd=cwd, env=environment,
                              stdin=given, capture_output=True)


def test_an_ascii_only_stdout_gets_the_files_own_bytes(tmp_path):
    (tmp_path / "mödel.py").write_text(MODEL, encoding="utf-8")
    done = _annotate(["mödel.py", "-q"], tmp_path, ASCII)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert "    größe = torch.tanh(x)  # größe = jnp.tanh(x)" in done.stdout.decode("utf-8")
    assert done.stderr == b""


def test_file_on_dev_stdin(tmp_path):
    (tmp_path / "model.py").write_text(MODEL, encoding="utf-8")
    done = _annotate(["/dev/stdin", "--export", "-q"], tmp_path, stdin=tmp_path / "model.py")
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert "größe = jnp.tanh(x)" in done.stdout.decode("utf-8")


def test_review_is_quiet_with_q_and_says_each_phase_with_v(tmp_path):
    (tmp_path / "mödel.py").write_text(MODEL, encoding="utf-8")
    (tmp_path / "port.py").write_text(PORT, encoding="utf-8")
    quiet = _annotate(["review", "mödel.py", "port.py", "-q"], tmp_path, ASCII)
    assert quiet.returncode == 0, quiet.stderr.decode(errors="replace")
    assert quiet.stderr == b""
    report = quiet.stdout.decode("utf-8")
    assert "mödel.py:4" in report and report.endswith("outputs match\n")
    loud = _annotate(["review", "mödel.py", "port.py", "-v"], tmp_path)
    assert loud.returncode == 0
    phases = loud.stderr.decode().splitlines()
    assert [p.split(" (")[0] for p in phases] == [
        "annotate: loading torch and jax", "annotate: tracing mödel.py", "annotate: tracing the port port.py",
        "annotate: running both sides", "annotate: comparing values",
    ]
    assert all(p.endswith(" s)") for p in phases)
