"""Linear algebra: `dot_general` (`@` where exact), convolutions, `fft`, the `lax.linalg` primitives."""

from __future__ import annotations

import ast
from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxside.render.rules._core import (
    Rule,
    call,
    dtype_of,
    exact,
    is_traced,
    kw,
    literal,
    non_default,
    promotes_to_itself,
    registrar,
    rewritten,
)
from jaxside.render.rules.emitter import Emitter

RULES: dict[str, Rule] = {}
rule = registrar(RULES)


@rule("dot_general")
def _dot_general(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    p = eqn.params
    found = matmul(eqn, args)
    if found is not None:
        node, flipped = found
        return rewritten("matmul_transposed", node, emitter) if flipped else node
    keywords = [kw("precision", p["precision"], emitter)] if p["precision"] is not None else []
    keywords.append(kw("preferred_element_type", p["preferred_element_type"]))
    if p.get("out_sharding") is not None:
        return exact(eqn, args, emitter)
    (contract_a, contract_b), (batch_a, batch_b) = p["dimension_numbers"]
    numbers = literal(((tuple(contract_a), tuple(contract_b)), (tuple(batch_a), tuple(batch_b))))
    return call("lax.dot_general", [*args, numbers], keywords)


def matmul(eqn: Any, args: list[ast.expr]) -> tuple[ast.expr, bool] | None:
    """`a @ b` (or `jnp.matmul(a, b, preferred_element_type=...)`) for a `dot_general` that is a
    plain matmul, perhaps of a transposed operand (then True: the rewrite `matmul_transposed`);
    None when it is not one."""
    p = eqn.params
    (contract_a, contract_b), (batch_a, batch_b) = p["dimension_numbers"]
    a, b = eqn.invars
    out_dtype = dtype_of(eqn.outvars[0])
    default = p["preferred_element_type"] is not None and np.dtype(p["preferred_element_type"]) == dtype_of(a)
    if not (
        p["precision"] is None and p.get("out_sharding") is None and is_traced(a) and is_traced(b)
        and promotes_to_itself(eqn)
    ):
        return None
    for flip_a, flip_b in ((False, False), (False, True), (True, False)):
        shape_a, ca, ba = _transposed(a.aval.shape, contract_a, batch_a, flip_a)
        shape_b, cb, bb = _transposed(b.aval.shape, contract_b, batch_b, flip_b)
        if shape_a is None or shape_b is None or not _is_matmul(shape_a, shape_b, ca, cb, ba, bb):
            continue
        left, right = _flip(args[0], a, flip_a), _flip(args[1], b, flip_b)
        if default and out_dtype == dtype_of(a):
            return ast.BinOp(left, ast.MatMult(), right), flip_a or flip_b
        if p["preferred_element_type"] is not None and dtype_of(a) != np.bool_ and not (flip_a or flip_b):
            # (bfloat16 accumulated in float32 through a transpose: not the same bits, so no rewrite)
            keywords = [kw("preferred_element_type", p["preferred_element_type"])]
            return call("jnp.matmul", [left, right], keywords), False
        return None
    return None


def _transposed(shape: Sequence[int], contract: Sequence[int], batch: Sequence[int], flip: bool) -> tuple[
    Any, tuple[int, ...], tuple[int, ...]
]:
    """Shape and dimension numbers of an operand seen through `.T` (2-d) or `.mT` (the last two
    axes swapped); a None shape when the operand has fewer than two axes."""
    if not flip:
        return tuple(shape), tuple(contract), tuple(batch)
    n = len(shape)
    if n < 2:
        return None, (), ()
    swap = {n - 2: n - 1, n - 1: n - 2}
    new_shape = list(shape)
    new_shape[-2], new_shape[-1] = shape[-1], shape[-2]
    return tuple(new_shape), tuple(swap.get(d, d) for d in contract), tuple(swap.get(d, d) for d in batch)


def _flip(node: ast.expr, var: Any, flip: bool) -> ast.expr:
    if not flip:
        return node
    return ast.Attribute(node, "T" if len(var.aval.shape) == 2 else "mT", ast.Load())


def _is_matmul(shape_a: Sequence[int], shape_b: Sequence[int], ca: Sequence[int], cb: Sequence[int],
               ba: Sequence[int], bb: Sequence[int]) -> bool:
    """Whether these dimension numbers are what `a @ b` binds for these shapes (no reshapes)."""
    na, nb = len(shape_a), len(shape_b)
    if na == 0 or nb == 0:
        return False
    if na == 1 or nb == 1:
        return not ba and not bb and tuple(ca) == (na - 1,) and tuple(cb) == (max(nb - 2, 0),) and (
            na <= 2 and nb <= 2
        )
    if nb == 2 and na > 2:  # a stack of rows times one matrix: no batch dimensions
        return not ba and not bb and tuple(ca) == (na - 1,) and tuple(cb) == (0,)
    if na != nb or tuple(shape_a[:-2]) != tuple(shape_b[:-2]):
        return False
    batch = tuple(range(na - 2))
    return tuple(ba) == batch and tuple(bb) == batch and tuple(ca) == (na - 1,) and tuple(cb) == (nb - 2,)


@rule("conv_general_dilated")
def _conv(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    p = eqn.params
    ones = (1,) * len(p["window_strides"])
    keywords = [
        kw("window_strides", tuple(p["window_strides"])),
        kw("padding", tuple(tuple(x) for x in p["padding"])),
        *[kw(k, tuple(p[k])) for k in ("lhs_dilation", "rhs_dilation") if tuple(p[k]) != ones],
        kw("dimension_numbers", _conv_layout(p["dimension_numbers"]) or p["dimension_numbers"], emitter),
        *non_default(p, {"feature_group_count": 1, "batch_group_count": 1}),
    ]
    if p["precision"] is not None:
        keywords.append(kw("precision", p["precision"], emitter))
    if p["preferred_element_type"] is not None:
        keywords.append(kw("preferred_element_type", p["preferred_element_type"]))
    if p.get("out_sharding") is not None:
        return exact(eqn, args, emitter)
    plain = tuple(p["lhs_dilation"]) == ones == tuple(p["rhs_dilation"]) and len(keywords) == 3
    if plain and _conv_layout(p["dimension_numbers"]) is not None:  # torch's layout, lax.conv's default
        return call("lax.conv", args, keywords[:2])  # (`lax.conv(x, w, window_strides, padding)`)
    return call("lax.conv_general_dilated", args, keywords)


_SPATIAL = {1: "H", 2: "HW", 3: "DHW"}


def _conv_layout(numbers: Any) -> tuple[str, str, str] | None:
    """`("NCHW", "OIHW", "NCHW")`, the strings a person writes, for torch's layout (every spec in
    order); lax turns them back into the same `ConvDimensionNumbers`."""
    specs = (numbers.lhs_spec, numbers.rhs_spec, numbers.out_spec)
    n = len(numbers.lhs_spec)
    if n - 2 not in _SPATIAL or any(tuple(s) != tuple(range(n)) for s in specs):
        return None
    spatial = _SPATIAL[n - 2]
    return f"NC{spatial}", f"OI{spatial}", f"NC{spatial}"


@rule("fft")
def _fft(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    # `lax.fft` wraps the primitive in a `jit` (a `jit` named `fft` renders as that call).
    return exact(eqn, args, emitter)


# `lax.linalg` functions that bind their primitive and nothing else, with the params they take.
# `cholesky` (it masks the result with `tril`) and `svd` (it reorders the outputs) bind exactly.
_LINALG = {
    "eigh": ("lower", "sort_eigenvalues", "subset_by_index"),
    "qr": ("pivoting", "full_matrices", "use_magma"),
    "lu": (),
    "triangular_solve": ("left_side", "lower", "transpose_a", "conjugate_a", "unit_diagonal"),
    "householder_product": (),
    "lu_pivots_to_permutation": ("permutation_size",),
    "eig": ("compute_left_eigenvectors", "compute_right_eigenvectors", "use_magma"),
    "tridiagonal_solve": (),
}


@rule(*_LINALG)
def _linalg(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    name = eqn.primitive.name
    known = _LINALG[name]
    params = dict(eqn.params)
    if set(params) - set(known):
        return exact(eqn, args, emitter)
    keywords = [kw(k, params[k], emitter) for k in known if k in params]
    if name == "eigh":
        keywords.append(kw("symmetrize_input", False))  # the primitive never symmetrizes
    return call(f"lax.linalg.{name}", args, keywords)


@rule("ragged_dot_general")
def _ragged_dot(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    """`lax.ragged_dot(lhs, rhs, group_sizes)` (rows of `lhs` in consecutive groups, one `rhs`
    matrix per group) when the params are the ones that call binds; the exact bind otherwise."""
    p = eqn.params
    numbers = p["ragged_dot_dimension_numbers"]
    lhs, rhs = eqn.invars[0].aval, eqn.invars[1].aval
    default = (
        len(eqn.invars) == 3 and lhs.ndim == 2 and rhs.ndim == 3
        and numbers.dot_dimension_numbers == (((1,), (1,)), ((), ()))
        and tuple(numbers.lhs_ragged_dimensions) == (0,) and tuple(numbers.rhs_group_dimensions) == (0,)
        and p.get("group_offset") is None and p.get("out_sharding") is None
    )
    if not default:
        return exact(eqn, args, emitter)
    keywords = [kw("precision", p["precision"], emitter)] if p["precision"] is not None else []
    if p["preferred_element_type"] is not None:
        keywords.append(kw("preferred_element_type", p["preferred_element_type"]))
    return call("lax.ragged_dot", args, keywords)
