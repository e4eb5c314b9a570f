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
    """Import `tests/models/<name>.py` (once) under a name of its own, `_models_<name>`, with the
    folder on `sys.path` only then: a test that runs a copy of the folder as a user would (its
    `import tiny_gpt`) must find the copy, as a new process does, not this module."""
    private = f"_models_{name}"
    if private in sys.modules:
        return sys.modules[private]
    spec = importlib.util.spec_from_file_location(private, MODELS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[private] = module
    sys.path.insert(0, str(MODELS))
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[private]
        raise
    finally:
        sys.path.remove(str(MODELS))
    return module


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
