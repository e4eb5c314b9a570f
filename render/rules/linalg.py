"""Linear algebra: `dot_general` (`@` where exact), convolutions, `fft`, the `lax.linalg` primitives."""

from __future__ import annotations

import ast
from collections.abc import Sequence
from typing import Any

import numpy as np

from render.rules._core import (
    Rule,
    _dtype,
    _is_traced,
    _non_default,
    _promotes_to_itself,
    call,
    exact,
    kw,
    literal,
    registrar,
)
from render.rules.emitter import Emitter

RULES: dict[str, Rule] = {}
rule = registrar(RULES)


@rule("dot_general")
def _dot_general(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    p = eqn.params
    (contract_a, contract_b), (batch_a, batch_b) = p["dimension_numbers"]
    a, b = eqn.invars
    out_dtype = _dtype(eqn.outvars[0])
    default = p["preferred_element_type"] is not None and np.dtype(p["preferred_element_type"]) == _dtype(a)
    if (
        p["precision"] is None and p.get("out_sharding") is None and _is_traced(a) and _is_traced(b)
        and _promotes_to_itself(eqn) and _is_matmul(a.aval.shape, b.aval.shape, contract_a, contract_b,
                                                  batch_a, batch_b)
    ):
        if default and out_dtype == _dtype(a):
            return ast.BinOp(args[0], ast.MatMult(), args[1])
        if p["preferred_element_type"] is not None and _dtype(a) != np.bool_:
            return call("jnp.matmul", args, [kw("preferred_element_type", p["preferred_element_type"])])
    keywords = [kw("precision", p["precision"], emitter)] if p["precision"] is not None else []
    keywords.append(kw("preferred_element_type", p["preferred_element_type"]))
    if p.get("out_sharding") is not None:
        return exact(eqn, args, emitter)
    numbers = literal(((tuple(contract_a), tuple(contract_b)), (tuple(batch_a), tuple(batch_b))))
    return call("lax.dot_general", [*args, numbers], keywords)


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
        kw("dimension_numbers", p["dimension_numbers"], emitter),
        *_non_default(p, {"feature_group_count": 1, "batch_group_count": 1}),
    ]
    if p["precision"] is not None:
        keywords.append(kw("precision", p["precision"], emitter))
    if p["preferred_element_type"] is not None:
        keywords.append(kw("preferred_element_type", p["preferred_element_type"]))
    if p.get("out_sharding") is not None:
        return exact(eqn, args, emitter)
    return call("lax.conv_general_dilated", args, keywords)


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
