"""Reductions: sums and products over axes, `argmax`, cumulative ops, windows, `sort`, `top_k`."""

from __future__ import annotations

import ast
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import ClosedJaxpr

from jaxside.render.rules._core import (
    Rule,
    call,
    dotted,
    dtype_expr,
    dtype_of,
    is_traced,
    kw,
    lambda_args,
    literal,
    number_literal,
    registrar,
)
from jaxside.render.rules.emitter import Emitter

RULES: dict[str, Rule] = {}
rule = registrar(RULES)


_JNP_REDUCTIONS = {
    "reduce_sum": ("jnp.sum", ("float32", "float64", "int32", "uint32", "int64", "uint64", "complex64")),
    "reduce_prod": ("jnp.prod", ("float32", "float64", "int32", "uint32", "int64", "uint64", "complex64")),
    "reduce_max": ("jnp.max", None),
    "reduce_min": ("jnp.min", None),
    "reduce_and": ("jnp.all", ("bool",)),
    "reduce_or": ("jnp.any", ("bool",)),
}


@rule("reduce_sum", "reduce_prod", "reduce_max", "reduce_min", "reduce_and", "reduce_or", "reduce_xor")
def _reduce(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    name = eqn.primitive.name
    axes = tuple(eqn.params["axes"])
    extra = {k: v for k, v in eqn.params.items() if k != "axes" and v is not None}
    idiom, dtypes = _JNP_REDUCTIONS.get(name, (None, ()))
    x = eqn.invars[0]
    if idiom and axes and not extra and is_traced(x) and (dtypes is None or dtype_of(x).name in dtypes):
        axis = number_literal(axes[0]) if len(axes) == 1 else literal(axes)
        return call(idiom, [args[0]], [ast.keyword("axis", axis)])
    keywords = [kw(k, v, emitter) for k, v in extra.items()]
    return call(f"lax.{name}", [args[0], literal(axes)], keywords)


@rule("argmax", "argmin")
def _argmax(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    (axis,) = eqn.params["axes"]
    x = eqn.invars[0]
    name = eqn.primitive.name
    if is_traced(x) and _jnp_argmax(name, tuple(x.aval.shape), x.aval.dtype, axis) == eqn.params:
        return call(f"jnp.{name}", [args[0]], [kw("axis", axis)])  # (the one equation it stages)
    index_dtype = dtype_expr(eqn.params["index_dtype"])
    return call(f"lax.{eqn.primitive.name}", [args[0], number_literal(axis), index_dtype])


@functools.lru_cache(maxsize=256)
def _jnp_argmax(name: str, shape: tuple[int, ...], dtype: Any, axis: int) -> dict[str, Any] | None:
    """The params of the one `argmax` (`argmin`) `jnp.argmax(x, axis=axis)` stages, or None."""
    try:
        fn = getattr(jnp, name)
        staged = jax.make_jaxpr(lambda x: fn(x, axis=axis))(jax.ShapeDtypeStruct(shape, dtype))
    except Exception:  # not for this operand
        return None
    eqns = staged.jaxpr.eqns
    return dict(eqns[0].params) if len(eqns) == 1 and eqns[0].primitive.name == name else None


@rule("cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp")
def _cumulative(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    keywords = [kw("axis", eqn.params["axis"])]
    if eqn.params["reverse"]:
        keywords.append(kw("reverse", True))
    return call(f"lax.{eqn.primitive.name}", args, keywords)


@rule("reduce_window_sum", "reduce_window_max", "reduce_window_min")
def _reduce_window_monoid(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    name = eqn.primitive.name
    dtype = dtype_of(eqn.invars[0])
    init, computation = _monoid(name.removeprefix("reduce_window_"), dtype)
    return call("lax.reduce_window", [args[0], init, dotted(computation)], _window_args(eqn.params))


def _monoid(kind: str, dtype: np.dtype) -> tuple[ast.expr, str]:
    """The identity and the `lax` function `lax.reduce_window` recognises as this monoid.

    The identity must be a concrete Python value: a `jnp` scalar would be traced, and then
    `lax.reduce_window` binds the generic `reduce_window` instead.
    """
    if kind == "sum":
        return number_literal(0), "lax.add"
    if jnp.issubdtype(dtype, jnp.inexact):
        inf = dotted("jnp.inf")
        return (ast.UnaryOp(ast.USub(), inf) if kind == "max" else inf), f"lax.{kind}"
    if dtype == np.bool_:
        return ast.Constant(kind != "max"), f"lax.{kind}"
    info = np.iinfo(dtype)
    return number_literal(int(info.min if kind == "max" else info.max)), f"lax.{kind}"


def _window_args(params: dict[str, Any]) -> list[ast.keyword]:
    """`lax.reduce_window`'s window keywords, leaving out those at their defaults."""
    dims = tuple(params["window_dimensions"])
    ones, no_padding = (1,) * len(dims), ((0, 0),) * len(dims)
    keywords = [kw("window_dimensions", dims)]
    for key, default in (("window_strides", ones), ("padding", no_padding), ("base_dilation", ones),
                         ("window_dilation", ones)):
        value = tuple(params[key])  # padding: a tuple of (low, high) pairs, as the default
        if value != default:
            keywords.append(kw(key, value))
    return keywords


@rule("reduce_window")
def _reduce_window(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    p = eqn.params
    n = len(args) // 2
    body = emitter.function(ClosedJaxpr(p["jaxpr"], p["consts"]), "window_reducer")
    if n == 1:
        return call("lax.reduce_window", [args[0], args[1], body], _window_args(p))
    left: list[ast.expr] = [ast.Subscript(dotted("a"), ast.Constant(i), ast.Load()) for i in range(n)]
    right: list[ast.expr] = [ast.Subscript(dotted("b"), ast.Constant(i), ast.Load()) for i in range(n)]
    reducer = ast.Lambda(lambda_args(["a", "b"]), call(body, left + right))
    operands_, inits = ast.Tuple(list(args[:n]), ast.Load()), ast.Tuple(list(args[n:]), ast.Load())
    return call("lax.reduce_window", [operands_, inits, reducer], _window_args(p))


@rule("sort")
def _sort(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    p = eqn.params
    keywords = [kw("dimension", p["dimension"]), kw("is_stable", p["is_stable"])]
    if len(args) == 1:
        return call("lax.sort", args, keywords)
    operands_ = ast.Tuple(list(args), ast.Load())
    return call("lax.sort", [operands_], [*keywords, kw("num_keys", p["num_keys"])])


@rule("top_k")
def _top_k(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    keywords = [kw("axis", v) for k, v in eqn.params.items() if k == "axis"]
    return call("lax.top_k", [args[0], number_literal(eqn.params["k"])], keywords)
