"""Each jaxpr equation as a JAX expression: an idiomatic rule where one exists, else the exact primitive.

`render_eqn(eqn, args, emitter)` returns one `ast.expr` whose value is the equation's output
(a tuple of outputs when it has several).  `args` are the expressions for its operands,
already named by the caller.  Rules live in `RULES`, keyed by primitive name; an equation
without a rule becomes ``jax.extend.core.primitives.<name>_p.bind(*args, **params)``, which
re-traces to the very same equation, so every program renders completely.

A rule must never change a bit of the result: `x * 1.0` may become `x`, `x + 0.0` may not
(it turns -0.0 into 0.0).
"""

from __future__ import annotations

import ast
import enum
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np


class Emitter(Protocol):
    """What a rule may ask of the code generator that called it."""

    def constant(self, value: Any, hint: str) -> ast.expr:
        """An expression for an array constant (hoisted, named after `hint`)."""

    def function(self, jaxpr: Any, hint: str) -> ast.expr:
        """Emit `jaxpr` (a ClosedJaxpr) as a nested function; return an expression naming it."""

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
    fn = RULES.get(eqn.primitive.name, exact)
    return fn(eqn, args, emitter)


def exact(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr:
    """``<primitive>.bind(*args, **params)``: the equation itself, whatever it is."""
    primitive = dotted(f"jax.extend.core.primitives.{eqn.primitive.name}_p.bind")
    keywords = [ast.keyword(k, literal(v, emitter)) for k, v in eqn.params.items()]
    return call(primitive, args, keywords)


# -- building blocks for rules -----------------------------------------------------------------


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
    if isinstance(value, (int, float, np.integer, np.floating, np.bool_)):
        return _number(value)
    if isinstance(value, (tuple, list)) and not hasattr(value, "_fields"):
        node = ast.Tuple if isinstance(value, tuple) else ast.List
        return node([literal(v, emitter) for v in value], ast.Load())
    if isinstance(value, dict):
        return ast.Dict([literal(k, emitter) for k in value], [literal(v, emitter) for v in value.values()])
    if isinstance(value, (np.dtype, type)) and _is_dtype(value):
        return dtype_expr(value)
    if isinstance(value, enum.Enum):
        return dotted(f"{_public_module(type(value))}.{type(value).__name__}.{value.name}")
    if hasattr(value, "_fields"):  # NamedTuple records such as lax.GatherDimensionNumbers
        fields = [ast.keyword(f, literal(getattr(value, f), emitter)) for f in value._fields]
        return call(f"{_public_module(type(value))}.{type(value).__name__}", [], fields)
    if type(value).__name__ == "ClosedJaxpr" and emitter is not None:
        return emitter.function(value, "body")
    if isinstance(value, np.ndarray) and emitter is not None:
        return emitter.constant(value, "const")
    raise NotImplementedError(f"no source form for parameter {value!r} of type {type(value).__name__}")


def dtype_expr(dtype: Any) -> ast.expr:
    name = np.dtype(dtype).name
    return dotted(f"jnp.{name}")


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
    if isinstance(value, (int, float)) and value < 0:
        return ast.UnaryOp(ast.USub(), ast.Constant(-value))
    return ast.Constant(value)


_PUBLIC_HOMES = {"jax._src.lax": "jax.lax", "jax._src": "jax"}


def _public_module(cls: type) -> str:
    """Where a jax class is reachable publicly (`jax.lax.GatherScatterMode`)."""
    module = cls.__module__
    if module.startswith("jax._src.lax"):
        return "jax.lax"
    for prefix, home in _PUBLIC_HOMES.items():
        if module.startswith(prefix):
            return home
    return module
