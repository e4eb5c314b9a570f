"""Writes at integers and slices read as the torch code wrote them: `x.at[:, 0].set(0.0)`, never a
`lax.scatter` with its dimension numbers (`render.rules.updates`).

torch's `c[:, 0] = 0.0` stages through torchax what jnp's `.at[:, 0].set(0.0)` stages (constant
start indices, a `scatter` with mode `FILL_OR_DROP`); the export writes the `.at` form only when
tracing it stages the very same equations, so it re-traces to the same scatter and the same bits.
Here: jnp programs rendered and compared bit for bit under jit (specials among the inputs), the
same after re-tracing; a torch model with several index assignments exported and run against torch.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from fuzzing.harness import program_difference, render_function
from fuzzing.regressions import REGRESSIONS
from fuzzing.rewrites import special_inputs
from fuzzing.roundtrip import roundtrip
from fuzzing.structure import jaxpr_difference
from torch import nn

import jaxside
from jaxside.render import names as naming

_ALL = slice(None)
# (index, its shape of the update, how the export writes it)
_INDICES = [
    ((_ALL, 0), (3, 5), ":, 0"),
    ((_ALL, slice(1, 3)), (3, 2, 5), ":, 1:3"),
    ((_ALL, slice(None, None, 2)), (3, 2, 5), ":, ::2"),
    ((Ellipsis, -1), (3, 4), "..., 4"),  # (jnp starts at 4 for -1; the same scatter)
    ((1, slice(2, None)), (2, 5), "1, 2:"),
    ((-1, _ALL, slice(1, 4, 2)), (4, 2), "2, :, 1::2"),
    ((_ALL, 3, slice(0, 5, 3)), (3, 2), ":, 3, ::3"),
    ((0,), (4, 5), "0"),
]


_CASES = [(*case, method) for case in _INDICES for method in ("set", "add")]
_CASES += [(*_INDICES[2], method) for method in ("multiply", "min", "max")]


@pytest.mark.parametrize(
    ("index", "shape", "written", "method"), _CASES, ids=[f"{c[2]}-{c[3]}" for c in _CASES]
)
def test_basic_index_updates_render_as_at_and_keep_the_bits(
    index: Any, shape: Any, written: str, method: str
) -> None:
    def update(x: Any, v: Any) -> Any:
        return getattr(x.at[index], method)(v)

    structs = (jax.ShapeDtypeStruct((3, 4, 5), jnp.float32), jax.ShapeDtypeStruct(shape, jnp.float32))
    closed = jax.make_jaxpr(update)(*structs)
    assert "scatter" in str(closed)
    rendered = render_function(closed, "update", consts_as_params=True)
    assert f".at[{written}].{method}(" in rendered.source, rendered.source
    assert "scatter" not in rendered.source, rendered.source
    retraced = jax.make_jaxpr(rendered.fn)(*structs)
    assert jaxpr_difference(closed.jaxpr, retraced.jaxpr, elide=True) is None
    for seed in range(2):
        inputs = [special_inputs(s, seed * 31 + i) for i, s in enumerate(structs)]
        _, problem = program_difference(closed, rendered.fn, inputs)
        assert problem is None, f"{rendered.source}\n{problem}"


def test_a_literal_written_at_an_index_is_the_literal() -> None:
    closed = jax.make_jaxpr(lambda x, b: (x.at[:, 1:3].set(-2).at[0].add(1), b.at[..., -1].set(True)))(
        jnp.zeros((3, 4), jnp.int32), jnp.zeros((2, 3, 4), jnp.bool_)
    )
    source = render_function(closed, "update").source
    for form in (".at[:, 1:3].set(-2)", ".at[0].add(1)", ".at[..., 3].set(True)"):
        assert form in source, source


def test_several_strided_axes_are_one_subscript() -> None:
    """`x.at[::2, 1::2]`: jnp stages a batch of start rows, one batch axis per strided axis."""
    structs = (jax.ShapeDtypeStruct((4, 5, 3), jnp.float32),)
    closed = jax.make_jaxpr(lambda x: x.at[::2, 1::3, 2].set(0.0))(*structs)
    source = render_function(closed, "update").source
    assert ".at[::2, 1::3, 2].set(0.0)" in source, source


class Writes(nn.Module):
    """Index assignments the way model code writes them (masks, position slots, in-place updates)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(6, 6)

    def forward(self, x: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = self.proj(x)
        first = h.clone()
        first[:, :, 0] = 0.0
        shifted = h * 2
        shifted[:, 1:3] = h[:, :2]
        strided = h.clone()
        strided[..., ::2] = -1.0
        strided[:, -1] = h[:, 0]
        bumped = h.clone()
        bumped[..., 1] += 1.0
        picked = h.clone()
        picked[idx] = 5.0
        masked = h.clone()
        masked[h > 0] = 0.0
        return first, shifted, strided, bumped, picked, masked


@pytest.fixture(scope="module")
def writes() -> Any:
    torch.manual_seed(0)
    model, x, idx = Writes().eval(), torch.randn(2, 4, 6), torch.tensor([1, 0])
    return model, (x, idx), jaxside.export(model, x, idx)


def test_index_assignments_export_as_at_and_match_torch(writes: Any) -> None:
    model, (x, idx), exported = writes
    source = exported.source
    assert "scatter" not in source and "ScatterDimensionNumbers" not in source, source
    for form in (".at[..., 0].set(0.0)", ".at[:, 1:3].set(", ".at[..., ::2].set(-1.0)", ".at[idx].set(5.0)",
                 ".at[..., 1].set("):
        assert form in source, (form, source)
    params = exported.load_params(model)
    got = jax.jit(exported.forward)(params, jnp.asarray(x.numpy()), jnp.asarray(idx.numpy()))
    with torch.no_grad():
        want = model(x, idx)
    assert len(got) == len(want)
    for mine, theirs in zip(got, want):
        np.testing.assert_allclose(np.asarray(mine), theirs.numpy(), rtol=1e-5, atol=1e-6)


def test_the_fuzzed_writes_read_as_torch_wrote_them() -> None:
    """`fuzzing.regressions`' torch program of writes (its round trip, in tests/test_fuzz.py, proves
    the re-trace and the bits): every write at integers and slices is an `.at`, none a scatter."""
    source = roundtrip(REGRESSIONS["idiom_basic_updates"]).source
    for form in (".at[:, 0].set(0.0)", ".at[1, 1:3].set(", ".at[:, ::2, 4].set(", ".at[2, :, 1::2].set(",
                 ".at[:, 2:].set(", ".at[[2, 0], :].set("):
        assert form in source, (form, source)
    assert "scatter" not in source, source


class Shift(nn.Module):
    def forward(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        c = h.clone()
        c[:, 0] = 0.0
        d = h * 2
        d[:, 1:3] = h[:, :2]
        return c, d


def test_a_slice_written_elsewhere_is_not_named_as_what_it_slices() -> None:
    """`h[:, :2]` is part of `h`, not `h`: its value is `h_slice`, never a new `h` (the input)."""
    assert naming.expression_name("h[:, :2]") == "h_slice"
    assert naming.expression_name("pairs[..., 0]") == "pairs_0"
    model, h = Shift(), torch.randn(3, 4)
    exported = jaxside.export(model, h)
    source = exported.source
    assert "c = h.at[:, 0].set(0.0)" in source and ".at[:, 1:3].set(" in source, source
    assert "h = h[" not in source and "scatter" not in source, source
    got = exported.forward(jnp.asarray(h.numpy()))
    for mine, theirs in zip(got, model(h)):
        np.testing.assert_array_equal(np.asarray(mine), theirs.numpy())
