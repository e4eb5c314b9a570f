"""The torchax import shim: applied only when torchax trips on removed named-tensor overloads."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from jaxside.tracing import _compat

# One interpreter is enough: `make test` runs this file on 3.11 only (docs/testing.md).
pytestmark = pytest.mark.one_interpreter

ROOT = Path(__file__).resolve().parents[1]


def test_installed_torchax_imports_and_torch_is_left_as_it_was():
    torchax = _compat.import_torchax()
    env = torchax.default_env()
    with env:
        total = (torch.ones(3, device="jax") * 2).sum().item()
    assert total == 6.0
    if _compat.shim_applied:
        # The shim is undone after import: torch still refuses the removed overload.
        with pytest.raises(AttributeError, match="dim_Dimname"):
            torch.ops.aten.prod.dim_Dimname  # noqa: B018


def test_error_classifier():
    assert _compat.is_removed_named_overload_error(
        AttributeError("The underlying op of 'aten.prod' has no overload name 'dim_Dimname'")
    )
    assert _compat.is_removed_named_overload_error(
        AttributeError("The underlying op of 'aten.std' has no overload name 'correction_names'")
    )
    assert not _compat.is_removed_named_overload_error(
        AttributeError("The underlying op of 'aten.add' has no overload name 'Tensor_out_fancy'")
    )
    assert not _compat.is_removed_named_overload_error(KeyError("dim_Dimname"))


def run_with_fake_torchax(tmp_path: Path, amp_source: str) -> subprocess.CompletedProcess:
    """Import a stand-in torchax (its `amp` module given) through the shim, in a fresh process."""
    package = tmp_path / "torchax"
    (package / "ops").mkdir(parents=True)
    (package / "__init__.py").write_text("from torchax import amp\n")
    (package / "amp.py").write_text(textwrap.dedent(amp_source))
    (package / "decompositions.py").write_text("")
    (package / "ops" / "__init__.py").write_text("")
    (package / "ops" / "jaten.py").write_text("")
    script = textwrap.dedent(f"""
        import sys
        sys.path[:0] = [{str(tmp_path)!r}, {str(ROOT)!r}]
        from jaxside.tracing import _compat
        _compat.import_torchax()
        import torchax.amp
        print(_compat.shim_applied, getattr(torchax.amp, "POLICY", None))
    """)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)


def test_inert_when_torchax_imports_cleanly(tmp_path):
    done = run_with_fake_torchax(tmp_path, "import torch\nPOLICY = [torch.ops.aten.prod.dim_int]\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0] == "False"


def test_applied_when_torchax_names_a_removed_overload(tmp_path):
    done = run_with_fake_torchax(tmp_path, "import torch\nPOLICY = {torch.ops.aten.prod.dim_Dimname: 1}\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("True {<removed overload aten.prod.dim_Dimname>: 1}")


def test_other_import_errors_are_not_swallowed(tmp_path):
    done = run_with_fake_torchax(tmp_path, "import torch\nPOLICY = torch.ops.aten.prod.not_an_overload\n")
    assert done.returncode != 0
    assert "not_an_overload" in done.stderr
