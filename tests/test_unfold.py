"""A folded call that makes its statement sprawl gets a line and a name of its own
(`render.lower.unfold`), and only where that takes fewer lines; what is computed is unchanged."""

from __future__ import annotations

import ast

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from jaxside.annotate.check import check_export, load_module
from jaxside.annotate.check_modules import runner
from jaxside.annotate.export import module_source
from jaxside.annotate.loading import Entry
from jaxside.render.ir import Fold, Function, Statement, fold
from jaxside.render.layout import MODULE_WIDTH
from jaxside.render.lower import lower
from jaxside.render.lower.unfold import unfold
from jaxside.render.module import render_program
from jaxside.render.names import Scope
from jaxside.tracing import capture


class _Norm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.rand(16) + 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.weight


class _Project(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(16, 32)
        self.down = nn.Linear(32, 16)

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x))) * gate


class _Residual(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mlp_norm = _Norm()
        self.mlp = _Project()

    def forward(self, hidden_states: torch.Tensor, attention_bias: torch.Tensor) -> torch.Tensor:
        h = hidden_states + self.mlp(self.mlp_norm(hidden_states), hidden_states)
        return F.softmax(h @ hidden_states.transpose(-1, -2) * 0.25 + attention_bias, dim=-1) @ hidden_states


def _export(model: nn.Module, *args: torch.Tensor) -> tuple[str, object]:
    text = render_program(lower(capture(model, *args)), source="test")
    module = load_module(text)
    got = jax.jit(module.forward)(module.load_params(model), *(jnp.asarray(a.numpy()) for a in args))
    with torch.no_grad():
        np.testing.assert_allclose(np.asarray(got), model(*args).numpy(), rtol=1e-5, atol=1e-5)
    return text, module


def test_a_sprawling_call_is_named_by_its_torch_call_site_and_a_jax_nn_call_by_its_function():
    torch.manual_seed(0)
    text, _ = _export(_Residual().eval(), torch.randn(2, 8, 16), torch.randn(8, 8))
    lines = [line.strip() for line in text.splitlines()]
    # `self.mlp_norm(hidden_states)`: named as torch names the call, on a line of its own.
    assert 'mlp_norm_hidden_states = norm_forward(params["mlp_norm"], hidden_states)' in lines
    assert 'mlp = project_forward(params["mlp"], mlp_norm_hidden_states, hidden_states)' in lines
    # The softmax that made `return` sprawl, under the name of its function.
    assert any(line.startswith("softmax = jax.nn.softmax(") for line in lines)
    assert "return softmax @ hidden_states" in lines
    assert all(len(line) <= MODULE_WIDTH for line in text.splitlines())


def _function(source: str) -> Function:
    """One def of `source`'s statements; each call named `part*` in them is marked as folded."""
    body = []
    for node in ast.parse(source).body:
        assert isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
        for call in ast.walk(node.value):
            callee = call.func.id if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) else ""
            if callee.startswith("part"):
                fold(call, Fold(callee + "_value", [], None))
        body.append(Statement([node.targets[0].id], node.value, [], None))
    return Function("f", [], ["x"], body, None, Scope())


def test_a_part_is_named_only_where_that_takes_fewer_lines():
    long_args = ", ".join(f"argument_number_{i}" for i in range(6))
    function = _function(
        f"y = outer_function(part_a(x), {long_args})\n"  # named, the call would still be split
        "w = outer_function(part_c(x, x, x, x, x, x, x, x, x, x), x, x, x, x, x, x, x, x, x, x, x, x, x)\n"
        # the same, but the part would be named like the statement: kept folded
        "part_d_value = outer_function(part_d(x, x, x, x, x, x, x, x, x, x), x, x, x, x, x, x, x, x, x, x)\n"
    )
    unfold(function)
    written = [ast.unparse(s.plain()) for s in function.body]
    assert written[0].startswith("y = outer_function(part_a(x), ")
    assert written[-3:] == [
        "part_c_value = part_c(x, x, x, x, x, x, x, x, x, x)",
        "w = outer_function(part_c_value, x, x, x, x, x, x, x, x, x, x, x, x, x)",
        "part_d_value = outer_function(part_d(x, x, x, x, x, x, x, x, x, x), x, x, x, x, x, x, x, x, x, x)",
    ]


@pytest.mark.parametrize("style", ["nnx", "equinox"])
def test_a_class_style_folds_back_a_part_its_shorter_lines_fit(style):
    """`unfold` decides at the functional export's lines (`params["mlp"]` reads, indent 4); a
    method reads `self.mlp` at indent 8, and takes back a part that fits there."""
    torch.manual_seed(0)
    model, args = _Residual().eval(), (torch.randn(2, 8, 16), torch.randn(8, 8))
    program = lower(capture(model, *args))
    functional = render_program(program, source="test")
    assert "mlp_norm_hidden_states = norm_forward(" in functional, functional
    text = module_source(program, "test", style, model)
    lines = [line.strip() for line in text.splitlines()]
    assert "mlp_norm_hidden_states" not in text, text
    assert "mlp = self.mlp(self.mlp_norm(hidden_states), hidden_states)" in lines, text
    # folded back, `return jax.nn.softmax(...) @ hidden_states` would be split still: kept apart
    assert "return softmax @ hidden_states" in lines, text
    report = check_export(load_module(text), program, Entry(model, args, {}), run=runner(style))
    assert report.ok, report.table()
