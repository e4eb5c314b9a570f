"""Each jaxpr equation as a JAX expression: an idiomatic form where one is exact, else the `jax.lax` call.

`render_eqn(eqn, args, emitter)` returns one `ast.expr` whose value is the equation's output
(a sequence of outputs, tuple or list, when it has several), or a `Structured` value built
otherwise.  `args` are the expressions for its operands, already named by the caller; operands
that are jaxpr literals are rendered here from the literal itself, so their dtype survives.
`RULES` maps each primitive name to its one rule; an equation without one becomes
``jax.extend.core.primitives.<name>_p.bind(*args, **params)``.

Rules live in modules by family (`elementwise`, `shapes`, `reductions`, `linalg`, `draws`,
`known_calls`, `control`, and `idioms`, whose one rule writes the runs `fuse` joined); each family
keeps its own table and `RULES` is their union, built here in that order: a primitive with two
rules is an error at import.  To add a rule, add a `@rule("name")` function to its family's module
(see docs/architecture.md).

Every rule is exact: the code it writes evaluates to the same bits under `jax.jit`, and
re-traces to the same primitive with the same params unless it is one of the `REWRITES`
(`x @ w.T`, `x` for `x * 1`), each proven bitwise by `tests/fuzzing/rewrites.py`.  Runs of
equations one `jnp` expression stages (`x[i]`, `x.at[i].set(v)`) are fused by `fuse`
(`render.rules.idioms`) before rendering.  Some tempting forms are not used:

- `x + 0.0 -> x` is not exact (`-0.0 + 0.0` is `0.0`); `x + (-0.0)` and integer `x + 0` are;
- `a / b` is true division in `jnp`, so integer `div` stays `lax.div`; `%` is floor modulo,
  so `rem` stays `lax.rem`;
- `jnp.sum` accumulates `bfloat16` in `float32`, `jnp.flip`, `jnp.round`, `jnp.clip` and
  `jnp.where` add a `jit` wrapper: those equations use `lax` functions (a `jit` equation that
  *is* such a wrapper renders as the `jnp` call, after checking that its body is identical).
"""

from __future__ import annotations

import ast
from typing import Any

from jax.extend.core import Literal

from jaxside.render.rules import control, draws, elementwise, idioms, known_calls, linalg, reductions, shapes
from jaxside.render.rules._core import REWRITES, Rule, atom_expr, call, dotted, exact
from jaxside.render.rules.emitter import (
    Emitter,
    Flat,
    Shape,
    Signature,
    Structured,
    indices,
    pack,
    shape_expr,
)
from jaxside.render.rules.fusing import fuse
from jaxside.render.rules.known_calls import function_source

__all__ = [
    "REWRITES", "RULES", "Emitter", "Flat", "Rule", "Shape", "Signature", "Structured", "atom_expr", "call",
    "dotted", "function_source", "fuse", "indices", "pack", "render_eqn", "shape_expr",
]

FAMILIES = (elementwise, shapes, reductions, linalg, draws, known_calls, control, idioms)


def _union() -> dict[str, Rule]:
    table: dict[str, Rule] = {}
    for family in FAMILIES:
        for name, fn in family.RULES.items():
            if name in table:
                raise ValueError(f"two rules for `{name}`: in {family.__name__} and before it")
            table[name] = fn
    return table


RULES: dict[str, Rule] = _union()


def render_eqn(eqn: Any, args: list[ast.expr], emitter: Emitter) -> ast.expr | Structured:
    """One expression for `eqn`'s output(s), given expressions for its operands."""
    args = [
        atom_expr(var, emitter) if isinstance(var, Literal) else arg for var, arg in zip(eqn.invars, args)
    ]
    fn = RULES.get(eqn.primitive.name, exact)
    return fn(eqn, args, emitter)
