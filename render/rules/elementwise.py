"""Elementwise primitives: unary math, operators and comparisons, `max`/`min`, `select_n`, conversions."""

from __future__ import annotations

import ast
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax.extend.core import Literal

from jaxside.render.rules._core import (
    Rule,
    call,
    dtype_expr,
    dtype_of,
    exact,
    is_float,
    is_traced,
    kw,
    loose,
    number_literal,
    promotes_to_itself,
    registrar,
    rewritten,
    typed_literal,
)
from jaxside.render.rules.emitter import Emitter

RULES: dict[str, Rule] = {}
rule = registrar(RULES)


_JNP_FLOAT_UNARY = {
    "exp": "jnp.exp", "exp2": "jnp.exp2", "log": "jnp.log", "log1p": "jnp.log1p", "expm1": "jnp.expm1",
    "sin": "jnp.sin", "cos": "jnp.cos", "tan": "jnp.tan", "tanh": "jnp.tanh",
    "asin": "jnp.arcsin", "acos": "jnp.arccos", "atan": "jnp.arctan",
    "sinh": "jnp.sinh", "cosh": "jnp.cosh", "asinh": "jnp.arcsinh",
    "atanh": "jnp.arctanh", "sqrt": "jnp.sqrt", "cbrt": "jnp.cbrt", "logistic": "jax.nn.sigmoid",
    "floor": "jnp.floor", "ceil": "jnp.ceil", "is_finite": "jnp.isfinite", "square": "jnp.square",
    "sign": "jnp.sign", "abs": "jnp.abs",
}
# ... and these also for signed integers.
_SIGNED_INT_UNARY = ("square", "sign", "abs")
# Float-only primitives with no exact `jnp` form (or whose `jnp` form promotes): the `lax` function.
_LAX_UNARY = (
    "acosh", "rsqrt", "erf", "erfc", "erf_inv", "lgamma", "digamma", "bessel_i0e", "bessel_i1e",
    "population_count", "clz", "real", "imag", "stop_gradient",
) + tuple(_JNP_FLOAT_UNARY)


@rule(*_LAX_UNARY)
def _unary(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    name = eqn.primitive.name
    params = dict(eqn.params)
    (x,) = eqn.invars
    idiom = _JNP_FLOAT_UNARY.get(name)
    accuracy = params.pop("accuracy", None)
    if idiom and accuracy is None and not params and is_traced(x) and (
        is_float(x) or (name in _SIGNED_INT_UNARY and jnp.issubdtype(dtype_of(x), jnp.signedinteger))
    ):
        return call(idiom, args)
    keywords = [kw("accuracy", accuracy, emitter)] if accuracy is not None else []
    keywords += [kw(k, v, emitter) for k, v in params.items()]
    return call(f"lax.{name}", args, keywords)


@rule("neg")
def _neg(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    if is_traced(eqn.invars[0]) and dtype_of(eqn.invars[0]) != np.bool_:
        return ast.UnaryOp(ast.USub(), args[0])
    return call("lax.neg", args)


@rule("not")
def _not(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    if is_traced(eqn.invars[0]):
        return ast.UnaryOp(ast.Invert(), args[0])
    return call("lax.bitwise_not", args)


@rule("round")
def _round(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    return call("lax.round", args, [kw("rounding_method", eqn.params["rounding_method"], emitter)])


@rule("reduce_precision")
def _reduce_precision(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    return call("lax.reduce_precision", args, [kw(k, v) for k, v in eqn.params.items()])


@rule("copy")
def _copy(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    # A JAX array is immutable: its copy is the value itself (torchax's `x.to(copy=True)`,
    # `jnp.array(x)` inside a library function), written as the operand.
    return rewritten("copy_is_value", args[0], emitter)


@rule("integer_pow")
def _integer_pow(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    (x,), y = eqn.invars, eqn.params["y"]
    # `x ** y` binds integer_pow for a Python int exponent (negative ones only for floats).
    if is_traced(x) and (y >= 0 or is_float(x)) and dtype_of(x) != np.bool_:
        return ast.BinOp(args[0], ast.Pow(), number_literal(y))
    return call("lax.integer_pow", args, [kw("y", y)])


_OPERATORS: dict[str, ast.operator] = {
    "add": ast.Add(), "sub": ast.Sub(), "mul": ast.Mult(), "div": ast.Div(),
    "and": ast.BitAnd(), "or": ast.BitOr(), "xor": ast.BitXor(), "pow": ast.Pow(),
}
_COMPARISONS: dict[str, ast.cmpop] = {
    "eq": ast.Eq(), "ne": ast.NotEq(), "lt": ast.Lt(), "le": ast.LtE(), "gt": ast.Gt(), "ge": ast.GtE(),
}
_LAX_BINARY = {
    "add": "add", "sub": "sub", "mul": "mul", "div": "div", "and": "bitwise_and", "or": "bitwise_or",
    "xor": "bitwise_xor", "pow": "pow", "eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt",
    "ge": "ge",
}


@rule(*_OPERATORS, *_COMPARISONS)
def _binary(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    name = eqn.primitive.name
    a, b = eqn.invars
    params = {k: v for k, v in eqn.params.items() if v is not None}
    identity = _identity_operand(eqn)
    if identity is not None and not params:
        return rewritten(_IDENTITY_REWRITES[name], args[identity], emitter)
    negated = _negated_operand(eqn)
    if negated is not None and not params:
        return rewritten("times_minus_one", ast.UnaryOp(ast.USub(), args[negated]), emitter)
    left, right = loose(eqn, args, 0), loose(eqn, args, 1)
    if name in _COMPARISONS and isinstance(a, Literal):
        # A Python number on the left flips the comparison (`2.0 < x` runs `x > 2.0`): type it.
        left = typed_literal(a)
    if params or not promotes_to_itself(eqn, [left, right]) or not _operator_exact(name, eqn):
        keywords = [kw(k, v, emitter) for k, v in params.items()]
        return call(f"lax.{_LAX_BINARY[name]}", args, keywords)
    if name in _COMPARISONS:
        return ast.Compare(left, [_COMPARISONS[name]], [right])
    return ast.BinOp(left, _OPERATORS[name], right)


_IDENTITY_REWRITES = {
    "mul": "times_one", "add": "plus_zero", "and": "logical_identity", "or": "logical_identity",
}


def _identity_operand(eqn: Any) -> int | None:
    """The operand `x` of `x * 1`, `1 * x`, integer `x + 0`, float `x + (-0.0)`, boolean
    `x & True` or `x | False`, when the result is `x` itself (same type, weak type included): its
    index; else None."""
    name = eqn.primitive.name
    if name not in _IDENTITY_REWRITES:
        return None
    for i, j in ((0, 1), (1, 0)):
        x, other = eqn.invars[i], eqn.invars[j]
        if not is_traced(x) or not isinstance(other, Literal) or np.ndim(other.val) != 0:
            continue
        if x.aval != eqn.outvars[0].aval:
            continue
        value = np.asarray(other.val)
        if name in ("and", "or"):
            if dtype_of(x) == np.bool_ and value.dtype == np.bool_ and bool(value) == (name == "and"):
                return i
            continue
        if not (_is_real(x) and _is_real(other)):
            continue
        if name == "mul" and value == 1:
            return i
        integer = jnp.issubdtype(dtype_of(x), jnp.integer)
        if name == "add" and value == 0 and (integer or bool(np.signbit(value))):
            return i
    return None


def _negated_operand(eqn: Any) -> int | None:
    """The operand `x` of float or signed `x * -1` or `-1 * x` whose result is `-x` itself (same
    type, weak type included): its index; else None."""
    if eqn.primitive.name != "mul":
        return None
    for i, j in ((0, 1), (1, 0)):
        x, other = eqn.invars[i], eqn.invars[j]
        if not is_traced(x) or not isinstance(other, Literal) or np.ndim(other.val) != 0:
            continue
        signed = jnp.issubdtype(dtype_of(x), jnp.floating) or jnp.issubdtype(dtype_of(x), jnp.signedinteger)
        if signed and x.aval == eqn.outvars[0].aval and np.asarray(other.val) == -1:
            return i
    return None


def _is_real(var: Any) -> bool:
    return bool(jnp.issubdtype(dtype_of(var), jnp.integer) or jnp.issubdtype(dtype_of(var), jnp.floating))


def _operator_exact(name: str, eqn: Any) -> bool:
    """Whether the `jnp` operator binds exactly this primitive for these operand types."""
    dtype = dtype_of(eqn.invars[0])
    if name == "div":
        return jnp.issubdtype(dtype, jnp.inexact)  # `/` is true division
    if name in ("and", "or", "xor"):
        return dtype == np.bool_ or jnp.issubdtype(dtype, jnp.integer)
    if name in ("add", "sub", "mul"):
        return dtype != np.bool_  # jnp turns `+` on bools into `or`
    if name == "pow":  # `x ** 2.0` binds pow; an int exponent binds integer_pow, int `x` a loop
        return jnp.issubdtype(dtype, jnp.inexact) and jnp.issubdtype(dtype_of(eqn.invars[1]), jnp.inexact)
    return True


@rule("max", "min")
def _max_min(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    name = {"max": "jnp.maximum", "min": "jnp.minimum"}[eqn.primitive.name]
    operands_ = [loose(eqn, args, 0), loose(eqn, args, 1)]
    if promotes_to_itself(eqn, operands_) and dtype_of(eqn.invars[0]) != np.bool_:
        return call(name, operands_)
    return call(f"lax.{eqn.primitive.name}", args)


@rule(
    "rem", "atan2", "nextafter", "complex", "shift_left", "shift_right_arithmetic",
    "shift_right_logical", "igamma", "igammac", "igamma_grad_a", "random_gamma_grad", "polygamma",
    "zeta", "mulhi",
)
def _lax_binary(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    keywords = [kw(k, v, emitter) for k, v in eqn.params.items() if v is not None]
    return call(f"lax.{eqn.primitive.name}", args, keywords)


@rule("conj")
def _conj(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    return call("lax.conj", args)


@rule("select_n")
def _select_n(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    # select_n(pred, on_false, on_true): lax.select takes them the other way round.
    if len(args) == 3 and dtype_of(eqn.invars[0]) == np.bool_:
        return call("lax.select", [args[0], args[2], args[1]])
    return call("lax.select_n", args)


@rule("clamp")
def _clamp(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    return call("lax.clamp", args)


@rule("convert_element_type")
def _convert(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    (x,), params = eqn.invars, eqn.params
    if params.get("weak_type") or params.get("sharding") is not None:
        return exact(eqn, args, emitter)
    dtype = dtype_expr(params["new_dtype"])
    if is_traced(x) and not (x.aval.weak_type and dtype_of(x) == np.dtype(params["new_dtype"])):
        return call(ast.Attribute(args[0], "astype", ast.Load()), [dtype])
    return call("lax.convert_element_type", [args[0], dtype])


@rule("bitcast_convert_type")
def _bitcast(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    return call("lax.bitcast_convert_type", [*args, dtype_expr(eqn.params["new_dtype"])])
