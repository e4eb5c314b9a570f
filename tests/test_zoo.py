"""The model zoo's subset: five transformers models, as people run them, through annotate.

Each runs comments mode, ``--export --check`` and the export without torch (`benchmarks.zoo`);
the export is a file people commit, so `ruff check` and `ruff format --check` pass on it.
The zoo's models need the ``zoo`` extra (``pip install -e '.[zoo]'``); without transformers
these tests are skipped, and say so in the summary.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

# `benchmarks` is a folder of the repository, not an installed package.
if str(Path(__file__).resolve().parents[1]) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.zoo import run_model  # noqa: E402
from benchmarks.zoo_models import MODELS, SUBSET  # noqa: E402

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None,
    reason="THE MODEL ZOO DID NOT RUN: transformers is not installed (pip install -e '.[zoo]')",
)
RUFF = Path(sys.executable).parent / "ruff"


# The Llama runs on every interpreter (a real library model through 3.12's sys.monitoring);
# the rest of the subset once (docs/testing.md).
@pytest.mark.parametrize("name", [
    n if n == "llama" else pytest.param(n, marks=pytest.mark.one_interpreter) for n in SUBSET
])
def test_zoo_model(name, tmp_path):
    model = next(m for m in MODELS if m.name == name)
    row = run_model(model, tmp_path)
    assert row.comments == "ok", row.note
    assert "MISMATCH" not in row.check and not row.check.startswith("exit"), (row.check, row.note)
    assert float(row.check.split()[0]) <= 1e-5, row.check  # the largest error of any leaf, float32
    assert row.no_torch == "ok", row.note
    assert row.lines > 50 and row.defs >= 3
    # ruff's defaults, as in a fresh project: T5's masks (`-3.4028235e38`), Mixtral's routing
    # (`.at[i]` and `.set(v)` a line each) are laid out as `ruff format` lays them out
    export = tmp_path / name / f"{name}_jax.py"
    for command in (["check", "--isolated"], ["format", "--isolated", "--check", "--diff"]):
        done = subprocess.run([str(RUFF), *command, str(export)], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
