"""Shared test helpers: loading the bundled samples and the test models by path; judging generated defs."""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
MODELS = ROOT / "tests" / "models"


def load_sample(name: str) -> ModuleType:
    """Import `samples/<name>.py` under the module name `<name>` (once); a missing sample fails."""
    if name in sys.modules and getattr(sys.modules[name], "__file__", None) == str(SAMPLES / f"{name}.py"):
        return sys.modules[name]
    path = SAMPLES / f"{name}.py"
    if not path.is_file():
        pytest.fail(f"missing sample {path}", pytrace=False)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_model(name: str) -> ModuleType:
    """Import `tests/models/<name>.py` as `<name>` (once), with the folder on `sys.path` only then."""
    sys.path.insert(0, str(MODELS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(MODELS))


@pytest.fixture
def sample():
    return load_sample


def assert_defs_shared(text: str) -> None:
    """No def of user code is a numbered copy of another (`residual_block` and `residual_block_1`):
    calls of one function share one def. Helpers (`_silu`, `_take_1`: a jitted library function per
    signature) are not user code."""
    names = [node.name for node in ast.walk(ast.parse(text))
             if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")]
    copies = [n for n in names if (base := re.sub(r"_\d+$", "", n)) != n and base in names]
    assert not copies and len(names) == len(set(names)), names
