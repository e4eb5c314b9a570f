"""Names the exports give what torch leaves unnamed, each export run against torch: a value hoisted
out of a loop's unrolled calls is named for the tensor it is made of (`shift`), never for the loop
variable the torch call passed (`i`); a class-style class keeps no flag it only hands to a child
(LeViT's `Transformer`); further defs of one torch method are methods named for what sets them
apart (`forward_no_residual`, `forward_tanh`), never after the functional defs (`stage_forward_1`).

tests/models/style_names.py is written for this, in the style of vit-pytorch's LeViT (LeViT itself
is not installed here: it showed all three when run from a fetched copy, by hand)."""

from __future__ import annotations

import ast
import functools

import pytest
from conftest import load_model

from jaxside.annotate.check import check_export, load_module
from jaxside.annotate.check_modules import runner
from jaxside.annotate.export import module_source
from jaxside.annotate.loading import Entry
from jaxside.render.lower import lower
from jaxside.render.module import render_program
from jaxside.tracing import capture

SOURCE = "tests/models/style_names.py"


@functools.cache
def _lowered() -> tuple[object, tuple, object]:
    model, args = load_model("style_names").build()
    return model, args, lower(capture(model, *args))  # static sizes: the names are the same, faster


@functools.cache
def _matches_torch(style: str = "functional") -> str:
    """The export's text, once it ran under `jax.jit` and matched torch leaf by leaf."""
    model, args, program = _lowered()
    if style == "functional":
        text, run = render_program(program, source=SOURCE), None
    else:
        text, run = module_source(program, SOURCE, style, model), runner(style)
    report = check_export(load_module(text), program, Entry(model, args, {}), run=run)
    assert report.ok, report.table()
    return text


def _class(text: str, name: str) -> ast.ClassDef:
    return next(n for n in ast.parse(text).body if isinstance(n, ast.ClassDef) and n.name == name)


def _methods(klass: ast.ClassDef) -> list[str]:
    return [n.name for n in klass.body if isinstance(n, ast.FunctionDef)]


def _attributes(klass: ast.ClassDef) -> set[str]:
    """What the class declares: Equinox's fields, NNX's `self.x = ...` in `__init__`."""
    fields = {n.target.id for n in klass.body
              if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    init = next((n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    stores = {t.attr for n in ast.walk(init) if isinstance(n, ast.Assign) for t in n.targets
              if isinstance(t, ast.Attribute)} if init is not None else set()
    return fields | stores


@pytest.mark.parametrize("style", ["functional", "nnx"])
def test_a_value_hoisted_out_of_a_loops_calls_is_named_for_its_tensor(style):
    text = _matches_torch(style)
    read = 'params["shift"]' if style == "functional" else "self.shift[...]"
    for factor in (" * 0.0", "", " * 2.0"):
        assert any(f"\n{indent}shift = {read}{factor}\n" in text for indent in (" " * 4, " " * 8)), text
    assert f"i = {read}" not in text, text  # never the loop variable `self.refine(x, i)` passed
    if style == "functional":
        assert "def refine_forward(params, x, shift):" in text, text


@pytest.mark.parametrize("style", ["nnx", "equinox"])
def test_a_flag_a_class_only_hands_to_its_child_is_not_kept(style):
    text = _matches_torch(style)
    stage, mixer = _class(text, "Stage"), _class(text, "Mixer")
    passed = {"transpose_n", "transpose_n_1"}  # the heads' numbers: the mixer's to keep
    assert not passed & _attributes(stage), ast.unparse(stage)
    assert passed <= _attributes(mixer), ast.unparse(mixer)
    assert "transpose_n" not in ast.unparse(stage), ast.unparse(stage)


@pytest.mark.parametrize("style", ["nnx", "equinox"])
def test_further_defs_of_one_method_are_named_for_what_sets_them_apart(style):
    text = _matches_torch(style)
    assert _methods(_class(text, "Stage")) == [*(["__init__"] if style == "nnx" else []), "__call__",
                                               "forward_no_residual"]
    assert _methods(_class(text, "Gate"))[-2:] == ["__call__", "forward_tanh"]
    assert "self.stages[1].forward_no_residual(" in text and "self.gates[1].forward_tanh(" in text, text
    assert "stage_forward_1" not in text and "gate_forward_1" not in text, text
