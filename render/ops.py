"""Each jaxpr equation as a JAX expression: an idiomatic form where one is exact, else the `jax.lax` call.

`render_eqn(eqn, args, emitter)` returns one `ast.expr` whose value is the equation's output
(a sequence of outputs, tuple or list, when it has several).  `args` are the expressions for its operands,
already named by the caller; operands that are jaxpr literals are rendered here from the
literal itself, so their dtype survives.  Rules live in `RULES`, keyed by primitive name; an
equation without one becomes ``jax.extend.core.primitives.<name>_p.bind(*args, **params)``.

Every rule is exact: the code it writes re-traces to the same primitive with the same params
and evaluates to the same bits (`tests/test_ops.py` proves it on real torchax equations).
That is why some tempting forms are not used:

- `x + 0.0 -> x` and `x * 1.0 -> x` are not exact (`-0.0`; XLA flushes denormals when it runs
  the multiply eagerly), so neither is simplified away;
- `a / b` is true division in `jnp`, so integer `div` stays `lax.div`; `%` is floor modulo,
  so `rem` stays `lax.rem`;
- `jnp.sum` accumulates `bfloat16` in `float32`, `jnp.flip`, `jnp.round`, `jnp.clip` and
  `jnp.where` add a `jit` wrapper: those equations use `lax` functions (a `jit` equation that
  *is* such a wrapper renders as the `jnp` call, after checking that its body is identical).
"""

from __future__ import annotations

import ast
import enum
import functools
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import ClosedJaxpr, Jaxpr, Literal


class Emitter(Protocol):
    """What a rule may ask of the code generator that called it."""

    def constant(self, value: Any, hint: str) -> ast.expr:
        """An expression for an array constant (hoisted, named after `hint`)."""

    def function(self, jaxpr: Any, hint: str) -> ast.expr:
        """Emit `jaxpr` (a ClosedJaxpr) as a nested function; return an expression naming it.

        The function takes the jaxpr's invars positionally and returns its one output, or a
        tuple of its outputs when it has several (or none).
        """

    def inline(self, jaxpr: Any, args: list[ast.expr], hint: str) -> list[ast.expr]:
        """Emit `jaxpr`'s equations in the current body; return its outputs as expressions."""


Rule = Callable[[Any, list[ast.expr], Emitter], ast.expr]
RULES: dict[str, Rule] = {}


def rule(*names: str) -> Callable[[Rule], Rule]:
    def register(fn: Rule) -> Rule:
        for name in names:
            RULES[name] = fn
        return fn

    return register


def render_eqn(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    """One expression for `eqn`'s output(s), given expressions for its operands."""
    args = [
        atom_expr(var, emitter) if isinstance(var, Literal) else arg for var, arg in zip(eqn.invars, args)
    ]
    fn = RULES.get(eqn.primitive.name, exact)
    return fn(eqn, args, emitter)


def exact(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    """``<primitive>.bind(*args, **params)``: the equation itself, whatever it is.

    Jaxpr-valued params become ``jax.make_jaxpr(<nested function>)(<operand types>)``.
    """
    primitive = ast.Attribute(dotted(primitive_path(eqn.primitive)), "bind", ast.Load())
    keywords = [ast.keyword(k, _param_expr(k, v, emitter)) for k, v in eqn.params.items()]
    return call(primitive, args, keywords)


def _param_expr(key: str, value: Any, emitter: Emitter) -> ast.expr:
    if isinstance(value, ClosedJaxpr):
        return staged_jaxpr(value, key, emitter)
    if hasattr(value, "_fields"):
        fields = [ast.keyword(f, _param_expr(f, getattr(value, f), emitter)) for f in value._fields]
        return call(class_path(type(value)), [], fields)
    if isinstance(value, (tuple, list)) and any(isinstance(v, ClosedJaxpr) for v in value):
        return ast.Tuple([_param_expr(key, v, emitter) for v in value], ast.Load())
    return literal(value, emitter)


def staged_jaxpr(closed: Any, hint: str, emitter: Emitter) -> ast.expr:
    """`jax.make_jaxpr(fn)(jax.ShapeDtypeStruct(...), ...)`: a ClosedJaxpr rebuilt from source."""
    fn = emitter.function(closed, hint)
    return call(call("jax.make_jaxpr", [fn]), [aval_expr(v.aval) for v in closed.jaxpr.invars])


def aval_expr(aval: Any) -> ast.expr:
    keywords = [kw("weak_type", True)] if getattr(aval, "weak_type", False) else []
    return call("jax.ShapeDtypeStruct", [literal(tuple(aval.shape)), dtype_expr(aval.dtype)], keywords)


# Where primitives live publicly; the last resort is the jax module that defines them.
_PRIMITIVE_HOMES = ("jax.extend.core.primitives", "jax.lax", "jax.lax.linalg")


@functools.cache
def primitive_path(primitive: Any) -> str:
    """A dotted path to the primitive object, public when jax exports it."""
    for home in _PRIMITIVE_HOMES:
        module = importlib.import_module(home)
        for name in dir(module):
            if name.endswith("_p") and getattr(module, name) is primitive:
                return f"{home}.{name}"
    for module_name, module in sorted(sys.modules.items()):
        if module_name.startswith("jax.") and module is not None:
            for name in dir(module):
                if name.endswith("_p") and getattr(module, name, None) is primitive:
                    return f"{module_name}.{name}"
    raise NotImplementedError(f"cannot find where jax keeps the primitive {primitive.name!r}")


# -- operands ---------------------------------------------------------------------------------------


def atom_expr(var: Any, emitter: Emitter | None = None) -> ast.expr:
    """A jaxpr literal as source that traces back to the same literal, dtype and weak type included.

    A weakly typed literal is a bare Python number (that is what made it weak); any other is
    wrapped in its dtype, `jnp.float32(2.0)`, so `jnp` promotion cannot change it.
    """
    value, aval = var.val, var.aval
    if np.ndim(value) != 0:
        if emitter is None:
            raise NotImplementedError(f"no source form for array literal {var}")
        return emitter.constant(np.asarray(value), "const")
    dtype = np.dtype(aval.dtype)
    if dtype == np.bool_:
        return ast.Constant(bool(value))
    number = scalar(value, dtype)
    if aval.weak_type:
        return number
    return call(dtype_expr(dtype), [number])


def typed_literal(var: Any) -> ast.expr:
    """A scalar literal wrapped in its dtype even when weakly typed: `jnp.float32(2.0)`."""
    dtype = np.dtype(var.aval.dtype)
    if dtype == np.bool_:
        return call("jnp.bool_", [ast.Constant(bool(var.val))])
    return call(dtype_expr(dtype), [scalar(var.val, dtype)])


def scalar(value: Any, dtype: Any) -> ast.expr:
    """A Python number that converts back to exactly `value` in `dtype`: `0.1`, not `0.10000000149011612`."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iub":
        return _number(int(value))
    if dtype.kind == "c":
        return ast.Call(ast.Name("complex", ast.Load()), [scalar(value.real, np.float64), scalar(
            value.imag, np.float64)], [])
    as_float = float(value)
    if np.isfinite(as_float) and as_float != 0.0:
        short = float(str(dtype.type(value)))
        if np.array(short).astype(dtype).tobytes() == np.array(value, dtype).tobytes():
            as_float = short
    return _number(as_float)


def loose(eqn: Any, args: list[ast.expr], i: int) -> ast.expr:
    """Operand `i` for a `jnp` operator: a literal may drop its dtype wrapper when the other
    operand, a traced non-weak array of the same dtype, decides the result type anyway."""
    var = eqn.invars[i]
    if not isinstance(var, Literal) or var.aval.weak_type:
        return args[i]
    others = [v for j, v in enumerate(eqn.invars) if j != i]
    if any(
        not isinstance(v, Literal) and not v.aval.weak_type and v.aval.dtype == var.aval.dtype for v in others
    ):
        value = args[i]
        if isinstance(value, ast.Call) and len(value.args) == 1:
            return value.args[0]
    return args[i]


def _promotes_to_itself(eqn: Any, args: Sequence[ast.expr] | None = None) -> bool:
    """Whether `jnp` type promotion, given these operand expressions, leaves the operands alone.

    All share one dtype, at least one is traced, and each traced one already has the result's
    weak type (weak only if every operand is: a bare Python number is, a `jnp.float32(2.0)` is
    not).  Otherwise `jnp` converts a traced operand, an equation the original does not have.
    """
    traced = [v for v in eqn.invars if _is_traced(v)]
    if not traced or len({_dtype(v) for v in eqn.invars}) != 1:
        return False
    args = args if args is not None else [ast.Name("_", ast.Load())] * len(eqn.invars)
    weak = all(v.aval.weak_type if _is_traced(v) else _is_python_number(a) for v, a in zip(eqn.invars, args))
    return all(v.aval.weak_type == weak for v in traced)


def _is_python_number(node: ast.expr) -> bool:
    """`2.0`, `-1`, `jnp.inf`, `-jnp.inf`: source that is a Python scalar (so weakly typed)."""
    if isinstance(node, ast.UnaryOp):
        node = node.operand
    return isinstance(node, ast.Constant) or (isinstance(node, ast.Attribute) and node.attr in ("inf", "nan"))


def _is_traced(var: Any) -> bool:
    return not isinstance(var, Literal)


def _dtype(var: Any) -> np.dtype:
    return np.dtype(var.aval.dtype)


def _is_float(var: Any) -> bool:
    return jnp.issubdtype(var.aval.dtype, jnp.inexact)


# -- elementwise ------------------------------------------------------------------------------------

# Primitives whose `jnp` (or `jax.nn`) function is a direct bind for float operands with default params.
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
    "population_count", "clz", "real", "imag", "is_finite", "stop_gradient",
) + tuple(_JNP_FLOAT_UNARY)


@rule(*_LAX_UNARY)
def _unary(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    name = eqn.primitive.name
    params = dict(eqn.params)
    (x,) = eqn.invars
    idiom = _JNP_FLOAT_UNARY.get(name)
    accuracy = params.pop("accuracy", None)
    if idiom and accuracy is None and not params and _is_traced(x) and (
        _is_float(x) or (name in _SIGNED_INT_UNARY and jnp.issubdtype(_dtype(x), jnp.signedinteger))
    ):
        return call(idiom, args)
    keywords = [kw("accuracy", accuracy, emitter)] if accuracy is not None else []
    keywords += [kw(k, v, emitter) for k, v in params.items()]
    return call(f"lax.{name}", args, keywords)


@rule("neg")
def _neg(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    if _is_traced(eqn.invars[0]) and _dtype(eqn.invars[0]) != np.bool_:
        return ast.UnaryOp(ast.USub(), args[0])
    return call("lax.neg", args)


@rule("not")
def _not(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    if _is_traced(eqn.invars[0]):
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
    return call("jnp.copy", args)


@rule("integer_pow")
def _integer_pow(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    (x,), y = eqn.invars, eqn.params["y"]
    # `x ** y` binds integer_pow for a Python int exponent (negative ones only for floats).
    if _is_traced(x) and (y >= 0 or _is_float(x)) and _dtype(x) != np.bool_:
        return ast.BinOp(args[0], ast.Pow(), _number(y))
    return call("lax.integer_pow", args, [kw("y", y)])


_OPERATORS: dict[str, ast.operator] = {
    "add": ast.Add(), "sub": ast.Sub(), "mul": ast.Mult(), "div": ast.Div(),
    "and": ast.BitAnd(), "or": ast.BitOr(), "xor": ast.BitXor(),
}
_COMPARISONS: dict[str, ast.cmpop] = {
    "eq": ast.Eq(), "ne": ast.NotEq(), "lt": ast.Lt(), "le": ast.LtE(), "gt": ast.Gt(), "ge": ast.GtE(),
}
_LAX_BINARY = {
    "add": "add", "sub": "sub", "mul": "mul", "div": "div", "and": "bitwise_and", "or": "bitwise_or",
    "xor": "bitwise_xor", "eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge",
}


@rule(*_OPERATORS, *_COMPARISONS)
def _binary(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    name = eqn.primitive.name
    a, b = eqn.invars
    params = {k: v for k, v in eqn.params.items() if v is not None}
    left, right = loose(eqn, args, 0), loose(eqn, args, 1)
    if name in _COMPARISONS and isinstance(a, Literal):
        # A Python number on the left flips the comparison (`2.0 < x` runs `x > 2.0`): type it.
        left = typed_literal(a)
    if params or not _promotes_to_itself(eqn, [left, right]) or not _operator_exact(name, eqn):
        keywords = [kw(k, v, emitter) for k, v in params.items()]
        return call(f"lax.{_LAX_BINARY[name]}", args, keywords)
    if name in _COMPARISONS:
        return ast.Compare(left, [_COMPARISONS[name]], [right])
    return ast.BinOp(left, _OPERATORS[name], right)


def _operator_exact(name: str, eqn: Any) -> bool:
    """Whether the `jnp` operator binds exactly this primitive for these operand types."""
    dtype = _dtype(eqn.invars[0])
    if name == "div":
        return jnp.issubdtype(dtype, jnp.inexact)  # `/` is true division
    if name in ("and", "or", "xor"):
        return dtype == np.bool_ or jnp.issubdtype(dtype, jnp.integer)
    if name in ("add", "sub", "mul"):
        return dtype != np.bool_  # jnp turns `+` on bools into `or`
    return True


@rule("max", "min")
def _max_min(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    name = {"max": "jnp.maximum", "min": "jnp.minimum"}[eqn.primitive.name]
    operands_ = [loose(eqn, args, 0), loose(eqn, args, 1)]
    if _promotes_to_itself(eqn, operands_) and _dtype(eqn.invars[0]) != np.bool_:
        return call(name, operands_)
    return call(f"lax.{eqn.primitive.name}", args)


@rule(
    "rem", "pow", "atan2", "nextafter", "complex", "shift_left", "shift_right_arithmetic",
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
    if len(args) == 3 and _dtype(eqn.invars[0]) == np.bool_:
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
    if _is_traced(x) and not (x.aval.weak_type and _dtype(x) == np.dtype(params["new_dtype"])):
        return call(ast.Attribute(args[0], "astype", ast.Load()), [dtype])
    return call("lax.convert_element_type", [args[0], dtype])


@rule("bitcast_convert_type")
def _bitcast(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    return call("lax.bitcast_convert_type", [*args, dtype_expr(eqn.params["new_dtype"])])


# -- shapes -----------------------------------------------------------------------------------------


@rule("broadcast_in_dim")
def _broadcast_in_dim(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    params = eqn.params
    shape, dims = tuple(params["shape"]), tuple(params["broadcast_dimensions"])
    x = eqn.invars[0]
    if params.get("sharding") is not None or len(eqn.invars) != 1:
        return exact(eqn, args, emitter)
    in_shape = tuple(x.aval.shape)
    if isinstance(x, Literal) and not x.aval.weak_type and not dims:
        return _full(shape, x)
    if _is_traced(x) and in_shape == shape and dims == tuple(range(len(shape))):
        return args[0]  # jax binds nothing for an identity broadcast
    if _is_traced(x) and in_shape and len(shape) > len(in_shape) and all(
        shape[d] == n for d, n in zip(dims, in_shape)
    ) and dims == tuple(sorted(dims)) and all(shape[d] == 1 for d in range(len(shape)) if d not in dims):
        return _new_axes(args[0], shape, dims)
    if _is_traced(x) and dims == tuple(range(len(shape) - len(in_shape), len(shape))) and (
        in_shape == shape[len(shape) - len(in_shape):]
    ):
        return call("jnp.broadcast_to", [args[0], literal(shape)])
    return call("lax.broadcast_in_dim", [args[0], literal(shape), literal(dims)])


def _full(shape: tuple[int, ...], value: Any) -> ast.expr:
    """`jnp.zeros(shape, dtype)`, `jnp.ones(...)` or `jnp.full(shape, value, dtype)` for a typed scalar."""
    dtype = np.dtype(value.aval.dtype)
    number = np.asarray(value.val, dtype)
    if dtype != np.bool_ and number == 0 and not np.signbit(number):
        return call("jnp.zeros", [literal(shape), dtype_expr(dtype)])
    if dtype != np.bool_ and number == 1:
        return call("jnp.ones", [literal(shape), dtype_expr(dtype)])
    fill = ast.Constant(bool(number)) if dtype == np.bool_ else scalar(number, dtype)
    return call("jnp.full", [literal(shape), fill, dtype_expr(dtype)])


def _new_axes(x: ast.expr, shape: tuple[int, ...], dims: tuple[int, ...]) -> ast.expr:
    """`x[None]`, `x[:, None]`, `x[..., None]`: size-1 axes inserted where `dims` skips."""
    items: list[ast.expr] = [ast.Slice() if d in dims else ast.Constant(None) for d in range(len(shape))]
    trailing = 0
    while items and _is_full(items[-1]):
        items.pop()
        trailing += 1
    leading = 0
    while leading < len(items) and _is_full(items[leading]):
        leading += 1
    if not trailing and leading >= 2:
        items = [ast.Constant(Ellipsis), *items[leading:]]
    index = items[0] if len(items) == 1 else ast.Tuple(items, ast.Load())
    return ast.Subscript(x, index, ast.Load())


@rule("reshape")
def _reshape(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    params = eqn.params
    if params.get("sharding") is not None or len(eqn.invars) != 1:
        return exact(eqn, args, emitter)
    shape = literal(tuple(params["new_sizes"]))
    if params.get("dimensions") is not None:
        return call("lax.reshape", [args[0], shape, literal(tuple(params["dimensions"]))])
    return call("jnp.reshape", [args[0], shape])


@rule("squeeze")
def _squeeze(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    dims = tuple(eqn.params["dimensions"])
    axis = _number(dims[0]) if len(dims) == 1 else literal(dims)
    return call("jnp.squeeze", [args[0]], [ast.keyword("axis", axis)])


@rule("transpose")
def _transpose(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    perm = tuple(eqn.params["permutation"])
    if perm == (1, 0):
        return ast.Attribute(args[0], "T", ast.Load())
    if perm == tuple(range(len(perm))):
        return args[0]  # jax binds nothing for an identity permutation
    return call("jnp.transpose", [args[0], literal(perm)])


@rule("rev")
def _rev(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    return call("lax.rev", [args[0], literal(tuple(eqn.params["dimensions"]))])


@rule("pad")
def _pad(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    config = tuple(tuple(c) for c in eqn.params["padding_config"])
    return call("lax.pad", [args[0], args[1], literal(config)])


@rule("concatenate")
def _concatenate(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    dimension = eqn.params["dimension"]
    if all(_is_traced(v) for v in eqn.invars) and _promotes_to_itself(eqn):
        return call("jnp.concatenate", [ast.List(list(args), ast.Load())], [kw("axis", dimension)])
    return call("lax.concatenate", [ast.List(list(args), ast.Load()), _number(dimension)])


@rule("split")
def _split(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    sizes = literal(tuple(eqn.params["sizes"]))
    parts = call("lax.split", [args[0], sizes], [kw("axis", eqn.params["axis"])])
    if len(eqn.outvars) == 1:
        return ast.Subscript(parts, ast.Constant(0), ast.Load())
    return parts


@rule("stack")
def _stack(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    return call("lax.stack", [ast.List(list(args), ast.Load())], [kw("axis", eqn.params["axis"])])


@rule("unstack")
def _unstack(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    parts = call("lax.unstack", args, [kw("axis", eqn.params["axis"])])
    if len(eqn.outvars) == 1:
        return ast.Subscript(parts, ast.Constant(0), ast.Load())
    return parts


@rule("tile")
def _tile(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    return call("lax.tile", [args[0], literal(tuple(eqn.params["reps"]))])


@rule("slice")
def _slice(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    params = eqn.params
    start, limit = tuple(params["start_indices"]), tuple(params["limit_indices"])
    strides = params["strides"]
    x = eqn.invars[0]
    # `x[a:b]` binds strides=None when every step is 1, the steps themselves otherwise.
    steps = tuple(strides) if strides is not None else (1,) * len(start)
    basic = (strides is None) == all(s == 1 for s in steps)
    if basic and _is_traced(x) and _slice_is_basic(tuple(x.aval.shape), start, limit, steps):
        return ast.Subscript(args[0], _slice_index(x.aval.shape, start, limit, steps), ast.Load())
    keywords = [kw("strides", tuple(strides))] if strides is not None else []
    return call("lax.slice", [args[0], literal(start), literal(limit)], keywords)


def _slice_is_basic(shape: tuple[int, ...], start: tuple, limit: tuple, steps: tuple) -> bool:
    """Whether `x[a:b:s, ...]` binds exactly this `slice`: jnp normalises the limit to the last
    element taken plus one, and binds nothing for a slice that takes everything."""
    for n, a, b, s in zip(shape, start, limit, steps):
        count = -(-(b - a) // s)
        if not 0 <= a < b <= n or count <= 0:
            return False
        if s != 1 and b != a + (count - 1) * s + 1:
            return False
    return any(a != 0 or b != n or s != 1 for n, a, b, s in zip(shape, start, limit, steps))


def _slice_index(shape: Sequence[int], start: tuple, limit: tuple, steps: tuple) -> ast.expr:
    items: list[ast.expr] = []
    for n, a, b, s in zip(shape, start, limit, steps):
        items.append(ast.Slice(
            _number(a) if a else None,
            _number(b) if b != n else None,
            _number(s) if s != 1 else None,
        ))
    while len(items) > 1 and _is_full(items[-1]):
        items.pop()
    return items[0] if len(items) == 1 else ast.Tuple(items, ast.Load())


def _is_full(item: ast.expr) -> bool:
    return isinstance(item, ast.Slice) and item.lower is None and item.upper is None and item.step is None


@rule("dynamic_slice")
def _dynamic_slice(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    sizes = literal(tuple(eqn.params["slice_sizes"]))
    indices = ast.Tuple(list(args[1:]), ast.Load())
    return call("lax.dynamic_slice", [args[0], indices, sizes], [kw("allow_negative_indices", False)])


@rule("dynamic_update_slice")
def _dynamic_update_slice(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    indices = ast.Tuple(list(args[2:]), ast.Load())
    keywords = [kw("allow_negative_indices", False)]
    return call("lax.dynamic_update_slice", [args[0], args[1], indices], keywords)


@rule("gather")
def _gather(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    p = eqn.params
    keywords = [
        kw("dimension_numbers", p["dimension_numbers"], emitter),
        kw("slice_sizes", tuple(p["slice_sizes"])),
        *_non_default(p, {"indices_are_sorted": False, "unique_indices": False}),
        kw("mode", p["mode"], emitter),
        *_non_default(p, {"fill_value": None}),
    ]
    return call("lax.gather", args, keywords)


def _non_default(params: dict[str, Any], defaults: dict[str, Any]) -> list[ast.keyword]:
    """Keywords for the params that differ from the function's defaults."""
    return [kw(k, params[k]) for k, default in defaults.items() if params[k] != default]


_SCATTERS = {
    "scatter": "scatter", "scatter-add": "scatter_add", "scatter_add": "scatter_add",
    "scatter-sub": "scatter_sub", "scatter_sub": "scatter_sub", "scatter-mul": "scatter_mul",
    "scatter_mul": "scatter_mul", "scatter-min": "scatter_min", "scatter_min": "scatter_min",
    "scatter-max": "scatter_max", "scatter_max": "scatter_max",
}


@rule(*_SCATTERS)
def _scatter(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    p = eqn.params
    keywords = [
        *_non_default(p, {"indices_are_sorted": False, "unique_indices": False}),
        kw("mode", p["mode"], emitter),
    ]
    fn = f"lax.{_SCATTERS[eqn.primitive.name]}"
    return call(fn, [*args, literal(p["dimension_numbers"], emitter)], keywords)


@rule("iota")
def _iota(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    p = eqn.params
    if p.get("sharding") is not None:
        return exact(eqn, args, emitter)
    shape = tuple(p["shape"])
    if len(shape) == 1:
        return call("lax.iota", [dtype_expr(p["dtype"]), _number(shape[0])])
    return call("lax.broadcasted_iota", [dtype_expr(p["dtype"]), literal(shape), _number(p["dimension"])])


# -- reductions -------------------------------------------------------------------------------------

# `jnp` reductions that bind exactly one primitive for these dtypes (no accumulation upcast).
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
    if idiom and axes and not extra and _is_traced(x) and (dtypes is None or _dtype(x).name in dtypes):
        axis = _number(axes[0]) if len(axes) == 1 else literal(axes)
        return call(idiom, [args[0]], [ast.keyword("axis", axis)])
    keywords = [kw(k, v, emitter) for k, v in extra.items()]
    return call(f"lax.{name}", [args[0], literal(axes)], keywords)


@rule("argmax", "argmin")
def _argmax(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    (axis,) = eqn.params["axes"]
    index_dtype = dtype_expr(eqn.params["index_dtype"])
    return call(f"lax.{eqn.primitive.name}", [args[0], _number(axis), index_dtype])


@rule("cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp")
def _cumulative(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    keywords = [kw("axis", eqn.params["axis"])]
    if eqn.params["reverse"]:
        keywords.append(kw("reverse", True))
    return call(f"lax.{eqn.primitive.name}", args, keywords)


@rule("reduce_window_sum", "reduce_window_max", "reduce_window_min")
def _reduce_window_monoid(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    name = eqn.primitive.name
    dtype = _dtype(eqn.invars[0])
    init, computation = _monoid(name.removeprefix("reduce_window_"), dtype)
    return call("lax.reduce_window", [args[0], init, dotted(computation)], _window_args(eqn.params))


def _monoid(kind: str, dtype: np.dtype) -> tuple[ast.expr, str]:
    """The identity and the `lax` function `lax.reduce_window` recognises as this monoid.

    The identity must be a concrete Python value: a `jnp` scalar would be traced, and then
    `lax.reduce_window` binds the generic `reduce_window` instead.
    """
    if kind == "sum":
        return _number(0), "lax.add"
    if jnp.issubdtype(dtype, jnp.inexact):
        inf = dotted("jnp.inf")
        return (ast.UnaryOp(ast.USub(), inf) if kind == "max" else inf), f"lax.{kind}"
    if dtype == np.bool_:
        return ast.Constant(kind != "max"), f"lax.{kind}"
    info = np.iinfo(dtype)
    return _number(int(info.min if kind == "max" else info.max)), f"lax.{kind}"


def _window_args(params: dict[str, Any]) -> list[ast.keyword]:
    """`lax.reduce_window`'s window keywords, leaving out those at their defaults."""
    dims = tuple(params["window_dimensions"])
    ones, no_padding = (1,) * len(dims), ((0, 0),) * len(dims)
    keywords = [kw("window_dimensions", dims)]
    for key, default in (("window_strides", ones), ("padding", no_padding), ("base_dilation", ones),
                         ("window_dilation", ones)):
        value = tuple(tuple(p) for p in params[key]) if key == "padding" else tuple(params[key])
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
    left = [ast.Subscript(ast.Name("a", ast.Load()), ast.Constant(i), ast.Load()) for i in range(n)]
    right = [ast.Subscript(ast.Name("b", ast.Load()), ast.Constant(i), ast.Load()) for i in range(n)]
    reducer = ast.Lambda(_lambda_args(["a", "b"]), call(body, left + right))
    operands_, inits = ast.Tuple(list(args[:n]), ast.Load()), ast.Tuple(list(args[n:]), ast.Load())
    return call("lax.reduce_window", [operands_, inits, reducer], _window_args(p))


def _lambda_args(names: list[str]) -> ast.arguments:
    return ast.arguments([], [ast.arg(n) for n in names], None, [], [], None, [])


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
    return call("lax.top_k", [args[0], _number(eqn.params["k"])], keywords)


# -- linear algebra ---------------------------------------------------------------------------------


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


# -- random numbers ---------------------------------------------------------------------------------


@rule("random_wrap")
def _random_wrap(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    return call("jax.random.wrap_key_data", args, [kw("impl", eqn.params["impl"].name)])


@rule("random_unwrap")
def _random_unwrap(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    return call("jax.random.key_data", args)


@rule("random_seed")
def _random_seed(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    return call("jax.random.key", args, [kw("impl", eqn.params["impl"].name)])


@rule("random_split")
def _random_split(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    shape = tuple(eqn.params["shape"])
    return call("jax.random.split", [args[0], _number(shape[0]) if len(shape) == 1 else literal(shape)])


@rule("random_fold_in")
def _random_fold_in(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    return call("jax.random.fold_in", args)


@rule("random_bits")
def _random_bits(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    p = eqn.params
    dtype = np.dtype(f"uint{p['bit_width']}")
    return call("jax.random.bits", [args[0], literal(tuple(p["shape"])), dtype_expr(dtype)])


# -- control flow and calls -------------------------------------------------------------------------


@rule("jit", "pjit")
def _jit(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    p = eqn.params
    known = _known_call(eqn, args)
    if known is not None:
        return known
    fn = emitter.function(p["jaxpr"], p["name"])
    keywords = []
    if p.get("inline"):
        keywords.append(kw("inline", True))
    if p.get("keep_unused"):
        keywords.append(kw("keep_unused", True))
    donated = tuple(i for i, d in enumerate(p.get("donated_invars", ())) if d)
    if donated:
        keywords.append(kw("donate_argnums", donated))
    return call(call("jax.jit", [fn], keywords), args)


@rule("while")
def _while(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    p = eqn.params
    n_cond, n_body = p["cond_nconsts"], p["body_nconsts"]
    cond_consts, body_consts, init = args[:n_cond], args[n_cond:n_cond + n_body], args[n_cond + n_body:]
    cond = emitter.function(p["cond_jaxpr"], "cond")
    body = emitter.function(p["body_jaxpr"], "body")
    # The loop closes over the consts, as the code that built it did: jax lifts them back out.
    carry: list[ast.expr] = [_CARRY] if len(init) == 1 else [ast.Starred(_CARRY, ast.Load())]
    cond_fn = ast.Lambda(_lambda_args([_CARRY.id]), call(cond, [*cond_consts, *carry]))
    body_fn = ast.Lambda(_lambda_args([_CARRY.id]), call(body, [*body_consts, *carry]))
    start = init[0] if len(init) == 1 else ast.Tuple(list(init), ast.Load())
    return call("lax.while_loop", [cond_fn, body_fn, start])


_CARRY = ast.Name("carry_", ast.Load())


@rule("custom_jvp_call", "custom_vjp_call")
def _custom_call(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    known = _known_call(eqn, args)
    if known is not None:
        return known
    # Last resort, exact forward only: the body runs as is, its derivative rule is lost.
    outs = emitter.inline(eqn.params["call_jaxpr"], args, eqn.primitive.name)
    return outs[0] if len(outs) == 1 else ast.Tuple(outs, ast.Load())


# Known `jax.numpy` / `jax.nn` / `jax.lax` functions that torchax calls and that stage one `jit`
# (or `custom_jvp_call`) equation, by the name that equation carries: a matching equation renders
# as the call itself.  The match is checked by tracing the call on the equation's operand types
# (with each keyword-argument variant in turn) and comparing the one equation it stages.
_KNOWN_CALLS: dict[str, str] = {
    "_where": "jnp.where", "clip": "jnp.clip", "silu": "jax.nn.silu", "relu": "jax.nn.relu",
    "relu6": "jax.nn.relu6", "gelu": "jax.nn.gelu", "sigmoid": "jax.nn.sigmoid",
    "softplus": "jax.nn.softplus", "log_sigmoid": "jax.nn.log_sigmoid", "elu": "jax.nn.elu",
    "celu": "jax.nn.celu", "selu": "jax.nn.selu", "hard_tanh": "jax.nn.hard_tanh",
    "leaky_relu": "jax.nn.leaky_relu", "hard_sigmoid": "jax.nn.hard_sigmoid",
    "hard_silu": "jax.nn.hard_silu", "mish": "jax.nn.mish", "sparse_plus": "jax.nn.sparse_plus",
    "remainder": "jnp.remainder", "floor_divide": "jnp.floor_divide", "power": "jnp.power",
    "_flip": "jnp.flip", "round": "jnp.round", "isnan": "jnp.isnan", "isinf": "jnp.isinf",
    "logaddexp": "jnp.logaddexp", "logaddexp2": "jnp.logaddexp2", "fmod": "jnp.fmod",
    "hypot": "jnp.hypot", "copysign": "jnp.copysign", "signbit": "jnp.signbit", "trunc": "jnp.trunc",
    "fmax": "jnp.fmax", "fmin": "jnp.fmin", "true_divide": "jnp.true_divide", "arctan2": "jnp.arctan2",
    "arccosh": "jnp.arccosh", "gcd": "jnp.gcd", "lcm": "jnp.lcm", "log10": "jnp.log10",
    "log2": "jnp.log2", "i0": "jnp.i0", "nan_to_num": "jnp.nan_to_num", "tril": "jnp.tril",
    "triu": "jnp.triu", "isclose": "jnp.isclose", "reciprocal": "jnp.reciprocal",
    "heaviside": "jnp.heaviside", "sinc": "jnp.sinc", "outer": "jnp.outer", "kron": "jnp.kron",
    "matmul": "jnp.matmul", "diagonal": "jnp.diagonal", "_diag": "jnp.diag", "trace": "jnp.trace",
    "take": "jnp.take", "fft": "lax.fft", "det": "jnp.linalg.det", "slogdet": "jnp.linalg.slogdet",
    "inv": "jnp.linalg.inv", "solve": "jnp.linalg.solve", "pinv": "jnp.linalg.pinv",
    "cholesky": "jnp.linalg.cholesky", "eigh": "jnp.linalg.eigh", "eigvalsh": "jnp.linalg.eigvalsh",
    "logsumexp": "jax.nn.logsumexp", "softmax": "jax.nn.softmax", "log_softmax": "jax.nn.log_softmax",
    "standardize": "jax.nn.standardize",
}


# A way to call a known function: the names of trailing operands passed by keyword, and
# static keyword arguments (that the equation's operands do not show).
Variant = tuple[tuple[str, ...], tuple[tuple[str, Any], ...]]


def _variants(eqn: Any) -> list[Variant]:
    """How to try calling the function behind `eqn`: static arguments read from its body where
    they show, a few common values where they do not."""
    name = _call_name(eqn)
    body = eqn.params.get("jaxpr")
    if name == "fft" and body is not None and len(body.jaxpr.eqns) == 1:
        inner = body.jaxpr.eqns[0].params
        return [((), (("fft_type", inner["fft_type"]), ("fft_lengths", tuple(inner["fft_lengths"]))))]
    if name in ("diagonal", "_diag", "trace"):
        key = "k" if name == "_diag" else "offset"
        return [((), ())] + [((), ((key, k),)) for k in (1, -1, 2, -2)]
    if name in ("tril", "triu"):
        return [((), ())] + [((), (("k", k),)) for k in (1, -1, 2, -2)]
    if name == "clip":  # torch.clamp(x, max=m) is jnp.clip(x, max=m): the bound is no `min`
        return [((), ()), (("max",), ())]
    return [((), ())]


def _known_call(eqn: Any, args: list[ast.expr]) -> ast.expr | None:
    """`jnp.where(c, x, y)` for an equation that is exactly that call's `jit` (or custom_jvp)."""
    signature = _atom_signature(eqn.invars)
    for path in _call_candidates(eqn):
        for names, static in _variants(eqn):
            staged = _stage_call(path, signature, names, static)
            if staged is not None and same_eqn(staged, eqn):
                split = len(args) - len(names)
                keywords = [ast.keyword(n, a) for n, a in zip(names, args[split:])]
                return call(path, args[:split], keywords + [kw(k, v) for k, v in static])
    return None


def _call_candidates(eqn: Any) -> list[str]:
    """Paths of functions that may have staged `eqn`: by its name, then by where it was defined.

    A custom derivative rule can only be reproduced by calling the very function that has it,
    so for `custom_jvp_call` a private function (`jax._src.numpy.linalg._det`) is a candidate
    too; a `jit` body renders as a nested function just as exactly.
    """
    candidates = []
    known = _KNOWN_CALLS.get(_call_name(eqn) or "")
    if known is not None and _resolve(known) is not None:
        candidates.append(known)
    body = eqn.params.get("call_jaxpr", eqn.params.get("jaxpr"))
    source = _function_source(body) if isinstance(body, ClosedJaxpr) else None
    found = _function_path(source) if source else None
    if found is not None and found not in candidates:
        public = not found.startswith("jax._src.")
        if public or eqn.primitive.name in ("custom_jvp_call", "custom_vjp_call"):
            candidates.append(found)
    return candidates


# Where public jax functions live, and the short names generated code imports them under.
_PUBLIC_NAMESPACES = ("jax.nn", "jax.numpy", "jax.numpy.linalg", "jax.numpy.fft", "jax.lax", "jax.lax.linalg",
                      "jax.random")
_ALIASES = (("jax.numpy.", "jnp."), ("jax.lax.", "lax."))


@functools.cache
def _function_path(source: str) -> str | None:
    """A dotted path to the function defined at `source` (``name at file:line``), public if it can be."""
    name, _, location = source.partition(" at ")
    file = location.rsplit(":", 1)[0]
    for module_name, module in list(sys.modules.items()):
        if not module_name.startswith("jax.") or getattr(module, "__file__", None) != file:
            continue
        target = getattr(module, name, None)
        if target is None:
            continue
        path = _public_path(target) or f"{module_name}.{name}"
        for prefix, alias in _ALIASES:
            if path.startswith(prefix):
                return alias + path.removeprefix(prefix)
        return path
    return None


def _public_path(target: Any) -> str | None:
    for home in _PUBLIC_NAMESPACES:
        module = importlib.import_module(home)
        for attr in dir(module):
            if not attr.startswith("_") and getattr(module, attr, None) is target:
                return f"{home}.{attr}"
    return None


def _call_name(eqn: Any) -> str | None:
    if eqn.primitive.name in ("jit", "pjit"):
        return eqn.params.get("name")
    if eqn.primitive.name == "custom_jvp_call":
        return _function_name(eqn.params["call_jaxpr"])
    return None


def _function_name(closed: Any) -> str | None:
    """The name of the Python function a jaxpr was traced from (`relu`), from its debug info."""
    info = getattr(closed.jaxpr, "debug_info", None)
    source = getattr(info, "func_src_info", None) or ""
    return source.split(" at ")[0] or None


def _function_source(closed: Any) -> str | None:
    """Where that function is defined (`relu at .../jax/_src/nn/functions.py:71`)."""
    info = getattr(closed.jaxpr, "debug_info", None)
    return getattr(info, "func_src_info", None)


def _resolve(path: str) -> Any:
    target: Any = {"jax": jax, "jnp": jnp, "lax": jax.lax}.get(path.split(".")[0])
    for part in path.split(".")[1:]:
        target = getattr(target, part, None)
    return target


def _atom_signature(invars: Sequence[Any]) -> tuple:
    """Hashable operand description: avals for traced operands, the value for literals."""
    return tuple(
        ("literal", np.dtype(v.aval.dtype).name, v.aval.weak_type,
         np.asarray(v.val).item() if np.ndim(v.val) == 0 else None) if isinstance(v, Literal)
        else ("var", tuple(v.aval.shape), str(v.aval.dtype), v.aval.weak_type)
        for v in invars
    )


@functools.lru_cache(maxsize=1024)
def _stage_call(path: str, signature: tuple, names: tuple[str, ...] = (), static: tuple = ()) -> Any:
    """The jaxpr `path(*operands, **static)` stages (the last operands passed as `names`) for
    operands like these, if it is one equation."""
    fn = _resolve(path)
    traced = [s for s in signature if s[0] == "var"]
    structs = [jax.ShapeDtypeStruct(s[1], s[2], weak_type=s[3]) for s in traced]

    def staged(*values: Any) -> Any:
        it = iter(values)
        operands_ = [next(it) if s[0] == "var" else _literal_value(s) for s in signature]
        split = len(operands_) - len(names)
        return fn(*operands_[:split], **dict(zip(names, operands_[split:])), **dict(static))

    try:
        closed = jax.make_jaxpr(staged)(*structs)
    except Exception:  # the call does not accept these operands: not this function
        return None
    if len(closed.jaxpr.eqns) != 1 or closed.consts:
        return None
    return closed.jaxpr


def _literal_value(signature: tuple) -> Any:
    _, dtype, weak, value = signature
    if dtype == "bool":
        return bool(value)
    if weak:
        return value
    return np.dtype(dtype).type(value)


def same_eqn(staged: Any, eqn: Any) -> bool:
    """Whether the one equation of `staged` (a Jaxpr) is `eqn`: primitive, params, operand wiring."""
    (other,) = staged.eqns
    if other.primitive != eqn.primitive or len(other.invars) != len(eqn.invars):
        return False
    positions = {v: i for i, v in enumerate(staged.invars)}
    traced = iter(range(len(staged.invars)))
    for mine, theirs in zip(eqn.invars, other.invars):
        if isinstance(mine, Literal):
            if not isinstance(theirs, Literal) or not _same_literal(mine, theirs):
                return False
        elif isinstance(theirs, Literal) or positions.get(theirs) != next(traced):
            return False
    if [v.aval for v in other.outvars] != [v.aval for v in eqn.outvars]:
        return False
    return _same_params(other.params, eqn.params)


def _same_literal(a: Any, b: Any) -> bool:
    values = np.asarray(a.val), np.asarray(b.val)
    return a.aval.dtype == b.aval.dtype and np.array_equal(*values, equal_nan=True)


# Params of custom_jvp_call / custom_vjp_call holding the derivative rule: per-trace thunks that
# compare unequal across traces.  The function they belong to is identified by where it is
# defined, which `call_jaxpr`'s debug info records.
_RULE_PARAMS = frozenset({"jvp_jaxpr_fun", "fwd_jaxpr_thunk", "bwd", "out_trees"})


def _same_params(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if set(a) != set(b):
        return False
    if _RULE_PARAMS & set(a) and _function_source(a["call_jaxpr"]) != _function_source(b["call_jaxpr"]):
        return False
    return all(k == "name" or k in _RULE_PARAMS or same_value(a[k], b[k]) for k in a)


def same_value(a: Any, b: Any) -> bool:
    """Structural equality of equation params: jaxprs by structure, arrays by value."""
    if isinstance(a, ClosedJaxpr) and isinstance(b, ClosedJaxpr):
        return same_jaxpr(a.jaxpr, b.jaxpr) and len(a.consts) == len(b.consts) and all(
            same_value(x, y) for x, y in zip(a.consts, b.consts)
        )
    if isinstance(a, Jaxpr) and isinstance(b, Jaxpr):
        return same_jaxpr(a, b)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)) and not hasattr(a, "_fields"):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, (np.ndarray, jax.Array)) or isinstance(b, (np.ndarray, jax.Array)):
        return np.shape(a) == np.shape(b) and np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)
    try:
        return bool(a == b)
    except Exception:
        return a is b


def same_jaxpr(a: Any, b: Any) -> bool:
    """Whether two jaxprs compute the same thing the same way (var names aside)."""
    if len(a.invars) != len(b.invars) or len(a.eqns) != len(b.eqns) or len(a.constvars) != len(b.constvars):
        return False
    env: dict[Any, Any] = {}
    for x, y in zip([*a.constvars, *a.invars], [*b.constvars, *b.invars]):
        if x.aval != y.aval:
            return False
        env[x] = y
    for ea, eb in zip(a.eqns, b.eqns):
        if ea.primitive != eb.primitive or len(ea.invars) != len(eb.invars):
            return False
        for x, y in zip(ea.invars, eb.invars):
            if isinstance(x, Literal) != isinstance(y, Literal):
                return False
            if isinstance(x, Literal) and not _same_literal(x, y):
                return False
            if not isinstance(x, Literal) and env.get(x) is not y:
                return False
        if not _same_params(ea.params, eb.params) or [v.aval for v in ea.outvars] != [
            v.aval for v in eb.outvars
        ]:
            return False
        env.update(zip(ea.outvars, eb.outvars))
    return all(
        (_same_literal(x, y) if isinstance(x, Literal) else env.get(x) is y)
        for x, y in zip(a.outvars, b.outvars)
    ) and len(a.outvars) == len(b.outvars)


# -- building blocks for rules ----------------------------------------------------------------------


def dotted(path: str) -> ast.expr:
    """`a.b.c` as an expression."""
    head, *rest = path.split(".")
    node: ast.expr = ast.Name(head, ast.Load())
    for part in rest:
        node = ast.Attribute(node, part, ast.Load())
    return node


def call(fn: ast.expr | str, args: list[ast.expr], keywords: list[ast.keyword] | None = None) -> ast.Call:
    return ast.Call(dotted(fn) if isinstance(fn, str) else fn, list(args), keywords or [])


def kw(name: str, value: Any, emitter: Emitter | None = None) -> ast.keyword:
    return ast.keyword(name, literal(value, emitter))


def literal(value: Any, emitter: Emitter | None = None) -> ast.expr:
    """Source for a parameter value: Python scalars and containers, dtypes, enums, lax records."""
    if isinstance(value, ast.AST):
        return value
    if value is None or isinstance(value, (bool, str)):
        return ast.Constant(value)
    if isinstance(value, enum.Enum):
        return dotted(f"{class_path(type(value))}.{value.name}")
    if isinstance(value, (int, float, np.integer, np.floating, np.bool_)):
        return _number(value)
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "biuf":
        return _number(value.item())
    if isinstance(value, (tuple, list)) and not hasattr(value, "_fields"):
        node = ast.Tuple if isinstance(value, tuple) else ast.List
        return node([literal(v, emitter) for v in value], ast.Load())
    if isinstance(value, dict):
        return ast.Dict([literal(k, emitter) for k in value], [literal(v, emitter) for v in value.values()])
    if isinstance(value, (np.dtype, type)) and _is_dtype(value):
        return dtype_expr(value)
    if hasattr(value, "_fields"):  # NamedTuple records such as lax.GatherDimensionNumbers
        fields = [ast.keyword(f, literal(getattr(value, f), emitter)) for f in value._fields]
        return call(class_path(type(value)), [], fields)
    if type(value).__name__ == "ClosedJaxpr" and emitter is not None:
        return emitter.function(value, "body")
    if isinstance(value, np.ndarray) and emitter is not None:
        return emitter.constant(value, "const")
    raise NotImplementedError(f"no source form for parameter {value!r} of type {type(value).__name__}")


def dtype_expr(dtype: Any) -> ast.expr:
    name = np.dtype(dtype).name
    return dotted(f"jnp.{name}" if name != "bool" else "jnp.bool_")


def _is_dtype(value: Any) -> bool:
    try:
        np.dtype(value)
    except TypeError:
        return False
    return True


def _number(value: Any) -> ast.expr:
    value = value.item() if isinstance(value, np.generic) else value
    if isinstance(value, float) and not np.isfinite(value):
        text = "inf" if value > 0 else "-inf" if value < 0 else "nan"
        return dotted(f"jnp.{text}") if text != "-inf" else ast.UnaryOp(ast.USub(), dotted("jnp.inf"))
    if isinstance(value, (int, float)) and (value < 0 or (value == 0 and np.signbit(value))):
        return ast.UnaryOp(ast.USub(), ast.Constant(-value))
    return ast.Constant(value)


@functools.cache
def class_path(cls: type) -> str:
    """Where a jax class is reachable, publicly if it is (`jax.lax.GatherScatterMode`)."""
    for home in ("jax.lax", "jax.lax.linalg", "jax"):
        if getattr(importlib.import_module(home), cls.__name__, None) is cls:
            return f"{home}.{cls.__name__}"
    return f"{cls.__module__}.{cls.__qualname__}"
