"""`render.rules`: every equation torchax makes renders as code that re-traces to it and computes its bits.

The catalog (`tests/fuzzing/catalog.py`) is traced case by case and every equation, nested
ones included, goes through `fuzzing.harness.check_program`.  The explicit tests below pin
the forms rules choose and keep each bug found so far as a regression.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from fuzzing.catalog import CASES, Case
from fuzzing.harness import (
    Check,
    Seen,
    check_eqn,
    check_program,
    check_structure,
    program_difference,
    render_function,
)
from fuzzing.optable import DOC, Survey, documented, documented_rows, forms_cell, record
from fuzzing.regressions import F32, REGRESSIONS, program
from fuzzing.rewrites import PROOFS, prove
from fuzzing.roundtrip import roundtrip
from jax import lax
from jax.extend.core import ClosedJaxpr, Literal

from jaxside.render.rules import REWRITES, RULES, Flat, fuse, render_eqn
from jaxside.tracing import capture

# One interpreter is enough: `make test` runs this file on 3.11 only (docs/testing.md).
pytestmark = pytest.mark.one_interpreter

_SEEN = Seen()


@functools.cache
def catalog_trace(name: str) -> Any:
    return next(c for c in CASES if c.name == name).trace()


@functools.cache
def catalog_checks(name: str) -> tuple[Check, ...]:
    """`check_program` on one catalog case (once per session; equations shared across cases
    are checked once)."""
    return tuple(check_program(catalog_trace(name).jaxpr, _SEEN))


@pytest.mark.parametrize("case", [c for c in CASES if not c.fails], ids=lambda c: c.name)
def test_catalog_case_renders_exactly(case: Case) -> None:
    catalog_checks(case.name)


@pytest.mark.parametrize("case", [c for c in CASES if c.fails], ids=lambda c: c.name)
def test_catalog_case_torchax_cannot_trace(case: Case) -> None:
    """Cases torchax fails on stay in the catalog, so that we notice when it stops failing."""
    with pytest.raises(Exception):  # noqa: B017  (whatever torchax raises)
        case.trace()


def test_every_primitive_seen_is_documented_and_tested() -> None:
    checked = {c.primitive for case in CASES if not case.fails for c in catalog_checks(case.name)}
    table = documented(DOC)
    assert set(table) == checked, f"regenerate {DOC.name}: run tests/fuzzing/optable.py"
    assert all(table.values()), [name for name, tested in table.items() if not tested]


def test_each_primitive_renders_in_the_documented_forms() -> None:
    """docs/ops.md's forms are what the rules write now: a rule that falls back to a generic
    form (`lax.reduce_window(x, -jnp.inf, lax.max)` becoming `reduce_window_max_p.bind(...)`),
    spells out a default keyword, or changes a form's text, is a changed table."""
    survey = Survey()
    for case in CASES:
        if not case.fails:
            record(survey, catalog_trace(case.name).jaxpr.jaxpr)
    rendered = {name: forms_cell(forms) for name, forms in survey.forms.items()}
    documented_forms = {name: cell for name, (cell, _) in documented_rows(DOC).items()}
    changed = {name: (documented_forms.get(name), cell) for name, cell in rendered.items()
               if documented_forms.get(name) != cell}
    assert not changed, f"regenerate {DOC.name} (tests/fuzzing/optable.py) and read its diff: {changed}"


# -- helpers -------------------------------------------------------------------------------------------


def torch_eqns(fn: Callable[..., Any], *args: Any) -> list[Any]:
    """Every equation (nested ones too) of `fn` traced by `tracing.capture`."""
    return list(_walk(capture(fn, *args).jaxpr.jaxpr))


def jax_eqns(fn: Callable[..., Any], *args: Any) -> list[Any]:
    return list(_walk(jax.make_jaxpr(fn)(*args).jaxpr))


def _walk(jaxpr: Any) -> Any:
    for eqn in jaxpr.eqns:
        yield eqn
        for value in eqn.params.values():
            for sub in value if isinstance(value, tuple) else (value,):
                if isinstance(sub, ClosedJaxpr):
                    yield from _walk(sub.jaxpr)


def rendered(eqn: Any) -> str:
    """The checked rendering's expression (the last line of `def f(...)`), without `return`."""
    return check_eqn(eqn).source.splitlines()[-1].strip().removeprefix("return ")


def forms(eqns: list[Any], primitive: str) -> list[str]:
    return [rendered(e) for e in eqns if e.primitive.name == primitive]


def f32(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0))


# -- idiomatic forms -----------------------------------------------------------------------------------


def test_arithmetic_renders_as_operators() -> None:
    eqns = torch_eqns(lambda x, y: (x + y) * 2.0 - x / y, f32(3, 4), f32(3, 4))
    # torchax scales the second operand of add and sub by their `alpha` (1.0): `x * 1` is `x`
    # (the rewrite `times_one`).
    assert [rendered(e) for e in eqns] == ["a0", "a0 + a1", "a0 * 2.0", "a0 / a1", "a0", "a0 - a1"]


def test_matmul_forms() -> None:
    assert forms(torch_eqns(lambda x, w: x @ w, f32(3, 4), f32(4, 5)), "dot_general") == ["a0 @ a1"]
    assert forms(torch_eqns(torch.bmm, f32(2, 3, 4), f32(2, 4, 5)), "dot_general") == ["a0 @ a1"]
    # F.linear contracts both last dimensions: `x @ w.T`, the transpose folded into the dot (a rewrite).
    assert forms(torch_eqns(F.linear, f32(3, 4), f32(5, 4)), "dot_general") == ["a0 @ a1.T"]
    assert forms(torch_eqns(F.linear, f32(2, 3, 4), f32(5, 4)), "dot_general") == ["a0 @ a1.T"]
    transposed = jax_eqns(lambda g, x: lax.dot_general(
        g, x, (((0,), (0,)), ((), ())), preferred_element_type=jnp.float32), _struct((5, 3)), _struct((5, 4)))
    assert forms(transposed, "dot_general") == ["a0.T @ a1"]
    scores = lambda q, k: torch.einsum("bhqd,bhkd->bhqk", q, k)  # noqa: E731
    attention = torch_eqns(scores, f32(1, 3, 4, 5), f32(1, 3, 6, 5))
    assert forms(attention, "dot_general") == ["a0 @ a1.mT"]
    # bfloat16 operands accumulated in float32: the preferred type is passed.
    bf16 = jax.ShapeDtypeStruct((3, 4), jnp.bfloat16)
    eqns = jax_eqns(lambda a, b: jnp.matmul(a, b.T, preferred_element_type=jnp.float32), bf16, bf16)
    assert forms(eqns, "dot_general") == ["jnp.matmul(a0, a1, preferred_element_type=jnp.float32)"]


def test_jit_of_a_known_function_renders_as_the_call() -> None:
    trace = capture(lambda x: (F.silu(x), F.relu(x), torch.where(x > 0, x, 0.0), x.clamp(-1, 1)), f32(3, 4))
    eqns = trace.jaxpr.jaxpr.eqns
    top = [rendered(e) for e in eqns if e.primitive.name in ("jit", "custom_jvp_call")]
    assert top == [
        "jax.nn.silu(a0)", "jax.nn.relu(a0)", "jnp.where(a0, a1, jnp.float32(0.0))", "jnp.clip(a0, -1, 1)"
    ]


def test_jnp_reductions_that_stage_a_jit_render_as_the_call() -> None:
    trace = capture(lambda x, w, i: (x.var(-1), F.layer_norm(x, (4,)), x.cumsum(1), F.embedding(i, w)),
                    f32(3, 4), f32(10, 4), torch.tensor([[1, 2, 3]]))
    top = [rendered(e) for e in trace.jaxpr.jaxpr.eqns if e.primitive.name in ("jit", "cumsum")]
    assert top == [
        "jnp.var(a0, axis=1, ddof=1)", "jnp.var(a0, axis=1, keepdims=True, ddof=0)", "jnp.cumsum(a0, axis=1)",
        "jnp.take(a0, a1, axis=0)",
    ]


def test_idioms_write_what_the_torch_code_wrote() -> None:
    """torch.einsum as `jnp.einsum` (not a plain matmul: no `@`), `x[..., 0]`, `x[:, None, :, 0]`,
    operands of lower rank without the broadcast jnp stages for them, `jnp.stack`; each one
    round-trips (the same equations, the same bits)."""
    einsum = roundtrip(REGRESSIONS["idiom_einsum"]).source
    assert "jnp.einsum('abcd,aecd->acbe', a0, a1)" in einsum  # batch axes 0 and 2
    assert "jnp.einsum('ab,abc->ca', a2, a3)" in einsum  # the transpose jnp adds, folded in
    assert "dot_general" not in einsum
    rows_times_matrix = program([((2, 3, 4), F32), ((4, 5), F32)], "v2 = torch.einsum('bij,jk->bik', v0, v1)")
    assert "a0 @ a1" in roundtrip(rows_times_matrix).source  # a plain matmul stays `@`
    forms = roundtrip(REGRESSIONS["idiom_rank_promotion_and_stack"]).source
    for expected in ("v3[..., 0]", "a1[:, None, :, 0]", "v9 * v10", "jnp.maximum(v19, v20)", "jnp.stack(",
                     "v23 / a2"):
        assert expected in forms, forms


def test_split_parts_and_unit_axes_read_as_the_torch_code_wrote() -> None:
    """torch.split and torch.chunk as one `jnp.split`, torch.unbind as one `jnp.unstack`, each part
    named; BatchNorm's statistics as `v[:, None, None]` beside the activations (rank promotion adds
    the leading axis) and as `v[None, :, None, None]` alone.  All are rewrites (`split_slices`,
    `unstack_parts`, `unit_axes`): held to the bits."""
    source = roundtrip(REGRESSIONS["idiom_split_and_unit_axes"]).source
    for expected in ("v3, v4, v5 = jnp.split(a0, [4, 6], axis=2)", "v6, v7 = jnp.split(v3, 2, axis=0)",
                     "v12 - a1[:, None, None]", "v10[None, :, None, None]",
                     "v20, v21, v22 = jnp.unstack(v5, axis=1)"):
        assert expected in source, source
    assert "jnp.reshape" not in source and ":4]" not in source and "squeeze" not in source, source


def test_index_lists_are_written_as_the_lists_torch_was_given() -> None:
    """`x[:, [-1], :]` and `x[:, [1, -2]] = v`: torch makes a constant tensor of each list; it is
    written back as the list where it is used (the candidate's own constant matched by value), not
    a module array, and round-trips (the same equations, the same bits)."""
    source = roundtrip(REGRESSIONS["idiom_index_lists"]).source
    for expected in ("[:, [-1]]", "[:, [0, 3]]", ".at[:, [1, -2]].set(", "[[1, 0], :]"):
        assert expected in source, source
    assert "const" not in source.split("):", 1)[1], source  # no constant read in the body


def test_repeat_kv_and_tril_read_as_the_torch_code_wrote() -> None:
    """HF's `repeat_kv` (`k[:, :, None].expand(...).reshape(...)`) and `repeat_interleave` as
    `jnp.repeat`; torch's decomposition of `x.tril(k)` as `jnp.tril(x, k)`, a causal mask as
    `jnp.tril` of all True.  Rewrites (`repeat_broadcasts`, `triangular_mask`): held to the bits."""
    source = roundtrip(REGRESSIONS["idiom_repeat_and_tril"]).source
    for expected in ("v4 = jnp.repeat(a0, 3, axis=1)", "v5 = jnp.repeat(a0, 3, axis=1)", "jnp.tril(a1, 1)",
                     "jnp.tril(a1, -2)", "jnp.tril(a2)", "v19 = jnp.tril(v18)"):
        assert expected in source, source
    assert "broadcast_to" not in source and "arange" not in source, source


def _tril_mask(k: int, fill: Any = 0) -> Callable[[Any], Any]:
    def fn(x: Any) -> Any:
        rows, cols = x.shape[-2:]
        mask = jnp.arange(cols, dtype=jnp.int32) - jnp.arange(rows, dtype=jnp.int32)[:, None] * 1
        return jnp.where(mask <= k, x, fill)

    return fn


@pytest.mark.parametrize(("fn", "written"), [
    (_tril_mask(1), "jnp.tril(a0, 1)"),
    (_tril_mask(1, 1), None),  # another value than zero where the mask is False
    (_tril_mask(2**30), None),  # jnp's `i + k` could overflow int32
    (lambda x: jnp.where(jnp.arange(6, dtype=jnp.int32) - jnp.arange(4, dtype=jnp.int32)[:, None] < 1, x, 0),
     None),  # `<` is no triangle jnp.tril keeps
    (lambda x, i: jnp.where(jnp.arange(6, dtype=jnp.int32) - i <= 1, x, 0), None),  # an argument, no arange
])
def test_a_mask_is_tril_only_when_it_keeps_a_triangle_of_x(fn: Any, written: str | None) -> None:
    structs = [_struct((4, 6)), _struct((4, 1), jnp.int32)][: fn.__code__.co_argcount]
    source = render_function(jax.make_jaxpr(fn)(*structs), "f", consts_as_params=True).source
    assert (written in source) if written else "jnp.tril" not in source, source


@pytest.mark.parametrize(("parts", "split"), [
    (lambda x: (x[:, :2], x[:, 2:]), "jnp.split(a0, 2, axis=1)"),
    (lambda x: (x[:, 3:], x[:, :1], x[:, 1:3]), "jnp.split(a0, [1, 3], axis=1)"),  # any order
    (lambda x: (x[:, :2], x[:, 2:3]), None),  # not the whole axis
    (lambda x: (x[:, :2], x[:, 1:]), None),  # overlapping
    (lambda x: (x[:2, :2], x[:2, 2:]), None),  # each only part of the other axis
    (lambda x: (x[:, 0:4:2], x[:, 1:4:2]), None),  # strided
])
def test_slices_are_one_split_only_when_they_cut_one_axis_into_parts(parts: Any, split: str | None) -> None:
    closed = jax.make_jaxpr(parts)(_struct((3, 4)))
    source = render_function(closed, "f", consts_as_params=True).source
    assert (split in source) if split else "jnp.split" not in source, source


def test_the_parts_of_one_split_come_from_one_torch_expression() -> None:
    """`a = x[:, :2]` and `b = x[:, 2:]` on two torch lines stay two statements: `fuse` joins
    the outputs of an idiom with several only when `site` gives them one source expression."""
    closed = jax.make_jaxpr(lambda x: (x[:, :2], x[:, 2:]))(_struct((3, 4)))
    eqns, outvars = list(closed.jaxpr.eqns), list(closed.jaxpr.outvars)
    one_line = fuse(eqns, outvars, site=lambda i: "x.split(2, 1)")
    assert [e.primitive.name for e in one_line] == ["idiom", "slice"]
    assert [e.primitive.name for e in fuse(eqns, outvars, site=lambda i: f"line {i}")] == ["slice", "slice"]


def test_other_jit_renders_as_a_nested_function() -> None:
    def scaled_sine(y: Any) -> Any:
        return jnp.sin(y) * 2.0

    (eqn,) = jax.make_jaxpr(jax.jit(scaled_sine))(*_structs("f32")).jaxpr.eqns
    source = check_eqn(eqn).source
    assert "def scaled_sine_" in source and "jax.jit(scaled_sine_" in source


def test_shapes_and_casts() -> None:
    eqns = torch_eqns(
        lambda x: (x.reshape(4, 3), x.permute(1, 0), x.unsqueeze(1), x[1:3].clone(), x[:, ::2].clone(),
                   x.to(torch.bfloat16), x.sum(-1), x.amax(0)),
        f32(3, 4),
    )
    # torchax materialises a view for `clone` again; its strided slice keeps the limit jnp
    # would normalise (4, not 3), so only lax.slice is exact.
    assert [rendered(e) for e in eqns] == [
        "jnp.reshape(a0, (4, 3))", "a0.T", "a0[:, None]", "a0[1:]", "a0[1:]",
        "lax.slice(a0, (0, 0), (3, 4), strides=(1, 2))", "lax.slice(a0, (0, 0), (3, 4), strides=(1, 2))",
        "a0.astype(jnp.bfloat16)", "jnp.sum(a0, axis=1)", "jnp.max(a0, axis=0)",
    ]


def test_select_n_keeps_its_operand_order() -> None:
    """select_n(pred, on_false, on_true): lax.select takes them the other way round."""
    closed = jax.make_jaxpr(lambda p, x, y: lax.select(p, x, y))(*_structs("bool", "f32", "f32"))
    (eqn,) = closed.jaxpr.eqns
    p, x, y = closed.jaxpr.invars
    assert eqn.invars == [p, y, x]
    # Operands are named in order of first use: a1 is y, a2 is x.
    assert rendered(eqn) == "lax.select(a0, a2, a1)"


def test_comparisons_keep_their_direction() -> None:
    eqns = torch_eqns(lambda x: (x > 0.5, x >= 0.5, x < 0.5, x <= 0.5), f32(3, 4))
    assert [rendered(e) for e in eqns] == ["a0 > 0.5", "a0 >= 0.5", "a0 < 0.5", "a0 <= 0.5"]


def test_integer_pow_is_a_power_of_an_int() -> None:
    assert forms(torch_eqns(lambda x: F.gelu(x, approximate="tanh"), f32(3)), "integer_pow") == ["a0 ** 3"]
    assert forms(jax_eqns(lambda x: x**-2, *_structs("f32")), "integer_pow") == ["a0 ** (-2)"]


# -- literals ------------------------------------------------------------------------------------------


def test_literal_operands_keep_their_dtype_whatever_the_caller_passes() -> None:
    (eqn,) = jax_eqns(lambda x: x * 2.0, *_structs("bf16"))
    assert isinstance(eqn.invars[1], Literal)
    for arg in (ast.Constant(2), ast.Constant(2.0), ast.Name("whatever", ast.Load())):
        expr = render_eqn(eqn, [ast.Name("x", ast.Load()), arg], _NoEmitter())
        assert ast.unparse(expr) == "x * 2.0"


def test_comparison_with_a_literal_on_the_left_is_typed() -> None:
    """`2.0 < x` runs `x > 2.0`: the literal is wrapped so that `lt` stays `lt`."""
    (eqn,) = jax_eqns(lambda x: lax.lt(2.0, x), *_structs("f32"))
    assert rendered(eqn) == "jnp.float32(2.0) < a0"


def test_negative_zero_and_special_literals_survive() -> None:
    eqns = jax_eqns(lambda x: (lax.sub(x, -0.0), lax.max(x, -jnp.inf), lax.mul(x, jnp.nan)), *_structs("f32"))
    assert [rendered(e) for e in eqns] == ["a0 - -0.0", "jnp.maximum(a0, -jnp.inf)", "a0 * jnp.nan"]


def test_identities_are_dropped_only_where_exact() -> None:
    """`x * 1` is `x` under jit, and so are integer `x + 0` and float `x + (-0.0)`; float `x + 0.0` is
    not (`-0.0 + 0.0` is `0.0`)."""
    eqns = jax_eqns(lambda x, i: (lax.mul(x, 1.0), lax.add(x, 0.0), lax.add(x, -0.0), lax.add(i, 0),
                                  lax.mul(1, i), lax.mul(x, jnp.float32(1.0))), *_structs("f32", "i32"))
    assert [rendered(e) for e in eqns] == ["a0", "a0 + 0.0", "a0", "a0", "a0", "a0"]


def test_negation_is_a_minus_sign() -> None:
    """torchax's `neg` is `-1 * x`: `-x` for floats and signed integers; an unsigned `x * -1`
    (a wrapped literal) or a multiply that promotes stays a multiply."""
    assert forms(torch_eqns(lambda x: -x, f32(3, 4)), "mul") == ["-a0"]
    assert forms(torch_eqns(lambda i: -i, torch.arange(4)), "mul") == ["-a0"]
    eqns = jax_eqns(lambda x, u: (lax.mul(x, -2.0), lax.mul(u, jnp.uint8(255))), *_structs("f32", "u8"))
    assert [rendered(e) for e in eqns] == ["a0 * -2.0", "a0 * 255"]


# -- regressions: each of these rendered inexactly once ---------------------------------------------------


def test_weak_and_strong_operands_are_not_promoted() -> None:
    """`jnp` promotion turns a weakly typed operand strong with an extra convert_element_type;
    an equation mixing the two (argpartition's concatenate, an add) keeps the lax function."""
    weak = jax.ShapeDtypeStruct((3,), jnp.float32, weak_type=True)
    strong = jax.ShapeDtypeStruct((3,), jnp.float32)
    eqns = jax_eqns(lambda a, b: (lax.add(a, b), lax.concatenate([a, b], 0), lax.max(a, b)), weak, strong)
    assert [rendered(e) for e in eqns] == [
        "lax.add(a0, a1)", "lax.concatenate([a0, a1], 0)", "lax.max(a0, a1)"
    ]
    assert forms(torch_eqns(lambda x: torch.kthvalue(x, 2, -1).values, f32(3, 5)), "concatenate")


def test_slice_with_explicit_unit_strides_stays_lax_slice() -> None:
    """`x[1:]` binds strides=None; torch.roll's slices carry strides=(1, 1)."""
    eqns = torch_eqns(lambda x: torch.roll(x, 1, 0), f32(3, 4))
    (eqn, *_) = [e for e in eqns if e.primitive.name == "slice"]
    assert eqn.params["strides"] == (1, 1)
    assert rendered(eqn).startswith("lax.slice(")


def test_new_axis_in_the_middle_is_not_an_ellipsis() -> None:
    """(1, 2, 7) -> (1, 2, 1, 7) is `x[:, :, None]`, once rendered as `x[..., None]`."""
    (eqn,) = jax_eqns(lambda x: lax.broadcast_in_dim(x, (1, 2, 1, 7), (0, 1, 3)), _struct((1, 2, 7)))
    assert rendered(eqn) == "a0[:, :, None]"


def test_pooling_window_identity_is_a_python_value() -> None:
    """A traced identity makes lax.reduce_window bind the generic reduce_window."""
    eqns = torch_eqns(lambda x: (F.max_pool2d(x, 2), F.avg_pool2d(x, 2)), f32(1, 2, 4, 4))
    assert forms(eqns, "reduce_window_max")[0].startswith("lax.reduce_window(a0, -jnp.inf, lax.max,")
    assert forms(eqns, "reduce_window_sum")[0].startswith("lax.reduce_window(a0, 0, lax.add,")


@pytest.mark.parametrize("dtype, kind", [
    ("float32", "max"), ("float32", "min"), ("float32", "add"), ("int32", "max"), ("int32", "min"),
    ("int32", "add"), ("bool", "max"), ("bool", "min"),
])
def test_every_window_monoid_renders_with_its_identity(dtype: str, kind: str) -> None:
    """Max/min/sum windows over floats, ints and bools (pure JAX makes all of them; torch only
    float max and sum): each its own identity, so lax.reduce_window binds the same monoid."""
    identity = {"float32": {"max": -np.inf, "min": np.inf, "add": 0.0},
                "int32": {"max": -(2**31), "min": 2**31 - 1, "add": 0},
                "bool": {"max": False, "min": True}}[dtype][kind]
    monoid = {"max": lax.max, "min": lax.min, "add": lax.add}[kind]
    padded = jax_eqns(lambda x: lax.reduce_window(x, identity, monoid, (2, 2), (1, 2), ((1, 0), (0, 1))),
                      _struct((4, 6), np.dtype(dtype)))
    plain = jax_eqns(lambda x: lax.reduce_window(x, identity, monoid, (2, 3), (1, 1), "VALID"),
                     _struct((4, 6), np.dtype(dtype)))
    expected = {"max": "-jnp.inf", "min": "jnp.inf", "add": "0"} if dtype == "float32" else {
        "max": str(identity), "min": str(identity), "add": "0"}
    call = f"lax.reduce_window(a0, {expected[kind]}, lax.{kind}"
    window = "window_dimensions=(2, 2), window_strides=(1, 2), padding=((1, 0), (0, 1))"
    assert rendered(padded[0]) == f"{call}, {window})"
    assert rendered(plain[0]) == f"{call}, window_dimensions=(2, 3))"  # the defaults left out


def test_functions_that_add_a_jit_or_more_bind_the_primitive() -> None:
    """jnp.arccosh and lax.fft wrap a jit; lax.linalg.cholesky masks with tril; svd reorders."""
    eqns = torch_eqns(lambda x: (torch.acosh(x.abs() + 1), torch.fft.rfft(x)), f32(3, 8))
    assert forms(eqns, "acosh") == ["lax.acosh(a0)"]
    fft = forms(eqns, "fft")[0]
    assert fft.startswith("jax.extend.core.primitives.fft_p.bind(a0, fft_type=jax.lax.FftType")
    spd = f32(4, 4) @ f32(4, 4).T + 4 * torch.eye(4)
    eqns = torch_eqns(lambda a: (torch.linalg.cholesky(a), torch.linalg.svd(a).S), spd)
    assert forms(eqns, "cholesky") == ["jax.extend.core.primitives.cholesky_p.bind(a0)"]
    assert forms(eqns, "svd")[0].startswith("jax.extend.core.primitives.svd_p.bind(a0,")


def test_enum_params_render_as_enums() -> None:
    """IntEnum params (rounding_method) once rendered as their repr."""
    assert forms(torch_eqns(torch.round, f32(3)), "round") == [
        "lax.round(a0, rounding_method=jax.lax.RoundingMethod.TO_NEAREST_EVEN)"
    ]


def test_custom_jvp_renders_as_the_function_that_defines_it() -> None:
    """Found by name and source location, so its derivative rule comes along (checked by JVP)."""
    eqns = torch_eqns(lambda x, y: (torch.logaddexp(x, y), torch.linalg.det(x @ x.T)), f32(4, 4), f32(4, 4))
    assert forms(eqns, "custom_jvp_call") == [
        "jnp.logaddexp(a0, a1)", "jax._src.numpy.linalg._det(a0)", "jax._src.numpy.linalg._slogdet_lu(a0)"
    ]


def test_private_primitive_binds_from_where_jax_keeps_it() -> None:
    """platform_index (inside jnp.diagonal) has no public home."""
    eqns = torch_eqns(torch.trace, f32(4, 4))
    assert forms(eqns, "platform_index") == [
        "jax._src.lax.control_flow.platform_index_p.bind(platforms=(('mosaic',), None))"
    ]


# -- every elementwise and shape rule, across dtypes and weak types ---------------------------------------
# torchax traces reach these rules with any dtype (uint8 images, int8, bool masks, bfloat16
# weights) and with weakly typed values; the idiomatic forms are exact only for some of them.

_SWEEP_DTYPES = (
    jnp.float32, jnp.bfloat16, jnp.float16, jnp.int32, jnp.int8, jnp.uint8, jnp.uint32, jnp.bool_
)
_UNARY: list[Callable[[Any], Any]] = [
    lax.exp, lax.exp2, lax.log, lax.log1p, lax.expm1, lax.sin, lax.cos, lax.tan, lax.tanh, lax.asin, lax.acos,
    lax.atan, lax.sinh, lax.cosh, lax.asinh, lax.acosh, lax.atanh, lax.sqrt, lax.rsqrt, lax.cbrt,
    lax.logistic,
    lax.floor, lax.ceil, lax.is_finite, lax.square, lax.sign, lax.abs, lax.neg, lax.bitwise_not, lax.erf,
    lax.population_count, lax.clz, lax.stop_gradient, jnp.copy, lax.round,
    lambda x: lax.integer_pow(x, 2), lambda x: lax.integer_pow(x, -1),
    lambda x: lax.reduce_sum(x, (1,)), lambda x: lax.reduce_max(x, (0,)), lambda x: lax.reduce_min(x, (0, 1)),
    lambda x: lax.reduce_prod(x, (1,)), lambda x: lax.reduce_and(x, (1,)), lambda x: lax.reduce_or(x, (1,)),
    lambda x: lax.argmax(x, 1, jnp.int32), lambda x: lax.cumsum(x, 1),
    lambda x: lax.cummax(x, 0, reverse=True),
    lambda x: lax.sort(x, 1), lambda x: lax.top_k(x, 2), lambda x: lax.transpose(x, (1, 0)),
    lambda x: lax.rev(x, (0,)), lambda x: lax.broadcast_in_dim(x, (4, 2, 3), (1, 2)),
    lambda x: lax.broadcast_in_dim(x, (2, 1, 3), (0, 2)), lambda x: lax.slice(x, (0, 1), (2, 3)),
]
_BINARY: list[Callable[[Any, Any], Any]] = [
    lax.add, lax.sub, lax.mul, lax.div, lax.rem, lax.pow, lax.max, lax.min, lax.bitwise_and, lax.bitwise_or,
    lax.bitwise_xor, lax.eq, lax.ne, lax.lt, lax.le, lax.gt, lax.ge, lax.atan2, lax.nextafter, lax.shift_left,
    lax.shift_right_arithmetic, lax.shift_right_logical, lambda a, b: lax.concatenate([a, b], 1),
    lambda a, b: lax.select(a > b, a, b), lambda a, b: lax.dot_general(a, b, (((1,), (1,)), ((), ()))),
]


def _sweep_eqns(dtype: Any) -> list[Any]:
    """Equations of every rule above on operands of `dtype` (strong, weak, and literal ones)."""
    strong, weak = _struct((2, 3), dtype), jax.ShapeDtypeStruct((2, 3), dtype, weak_type=True)
    scalar = np.array(2, dtype)
    calls: list[tuple[Callable[..., Any], tuple[Any, ...]]] = [(f, (strong,)) for f in _UNARY]
    for f in _BINARY:
        calls += [(f, (strong, strong)), (lambda x, f=f: f(x, scalar), (strong,)),
                  (lambda x, f=f: f(scalar, x), (strong,))]
        if dtype in (jnp.float32, jnp.int32):  # the dtypes a Python number can be
            calls += [(f, (weak, strong)), (lambda x, f=f: f(x, 2), (strong,)),
                      (lambda x, f=f: f(2, x), (weak,)), (lambda x, f=f: f(x, scalar), (weak,))]
    for target in _SWEEP_DTYPES:
        convert = functools.partial(lax.convert_element_type, new_dtype=target)
        calls += [(convert, (strong,)), (convert, (weak,))]
    eqns = []
    for fn, args in calls:
        try:
            eqns += jax_eqns(fn, *args)
        except (TypeError, ValueError):  # not defined for this dtype
            continue
    return eqns


@pytest.mark.parametrize("dtype", _SWEEP_DTYPES, ids=lambda d: np.dtype(d).name)
def test_rules_retrace_exactly_across_dtypes(dtype: Any) -> None:
    eqns = _sweep_eqns(dtype)
    assert len(eqns) > 50
    for eqn in eqns:
        check_structure(eqn)


# -- loops and branches run on real values --------------------------------------------------------------
# `check_program` runs loops' equations on random values only inside their bodies (a loop need
# not end on random values); these run whole loops as torchax's jnp functions build them.


@pytest.mark.parametrize(
    "fn, args",
    [
        (jnp.gcd, (np.array([12, 18, -7, 0], np.int32), np.array([8, 27, 21, 5], np.int32))),
        (lambda x: lax.while_loop(lambda c: c[0] < 10, lambda c: (c[0] + 1, c[1] * 1.5), (0, x)),
         (np.arange(3, dtype=np.float32),)),
        (lambda p, x: lax.cond(p, jnp.sin, jnp.cos, x), (np.bool_(True), np.arange(3, dtype=np.float32))),
        (lambda x: lax.scan(lambda c, v: (c + v, c * v), 0.0, x), (np.arange(4, dtype=np.float32),)),
        (lambda x: jnp.searchsorted(np.array([0.0, 1.0, 2.0], np.float32), x),
         (np.array([0.5, 1.5], np.float32),)),
    ],
    ids=["gcd", "while", "cond", "scan", "searchsorted"],
)
def test_control_flow_runs_exactly(fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    closed = jax.make_jaxpr(fn)(*args)
    for check in check_program(closed):
        assert check.primitive in RULES or check.source
    program = render_function(closed, "program", consts_as_params=True)
    _, problem = program_difference(closed, program.fn, args)
    assert problem is None, f"{program.source}\n{problem}"


# -- small helpers ---------------------------------------------------------------------------------------

_DTYPES = {"f32": jnp.float32, "bf16": jnp.bfloat16, "bool": jnp.bool_, "i32": jnp.int32, "u8": jnp.uint8}


def _struct(shape: tuple[int, ...], dtype: Any = jnp.float32) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, dtype)


def _structs(*dtypes: str) -> list[jax.ShapeDtypeStruct]:
    return [_struct((3, 4), _DTYPES[d]) for d in dtypes]


class _NoEmitter(Flat):
    def constant(self, value: Any, hint: str) -> ast.expr:
        raise AssertionError("no constants expected")

    def function(self, jaxpr: Any, hint: str) -> ast.expr:
        raise AssertionError("no sub-jaxprs expected")

    def inline(self, jaxpr: Any, args: list[ast.expr], hint: str) -> list[ast.expr]:
        raise AssertionError("no sub-jaxprs expected")


# -- rewrites: the same bits under jit, not the same equation -------------------------------------------


@pytest.mark.parametrize("name", sorted(REWRITES))
def test_rewrite_is_proven_bitwise_under_jit(name: str) -> None:
    assert prove(name) >= len(PROOFS[name]) > 0


def test_every_rewrite_is_documented() -> None:
    text = DOC.read_text()
    assert set(PROOFS) == set(REWRITES)
    assert all(f"| `{name}` |" in text for name in REWRITES), f"regenerate {DOC.name}"


def test_a_rewrite_not_taken_keeps_the_primitive() -> None:
    """A float `x + 0.0` is no rewrite (-0.0 + 0.0 is 0.0): it re-traces as itself."""
    (eqn,) = jax_eqns(lambda x: lax.add(x, 0.0), *_structs("f32"))
    assert check_eqn(eqn).rewrites == []
