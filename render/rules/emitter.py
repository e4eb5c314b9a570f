"""What a rule may ask of the code generator that runs it, and how a nested def is called.

A rule gets the equation, the expressions for its operands and an `Emitter`.  Every emitter
declares what it can do: `nests` says whether it writes sub-jaxprs as defs nested in the one
being written (`nested`, `used`, `custom_jvp` work); rules for loops, branches and calls write
their idiomatic form only then, and the exact primitive (or a flat form) otherwise.

A rule returns an `ast.expr` whose value is the equation's output (a tuple of its outputs when it
has several), or a `Structured` value when it is built otherwise (`lax.scan` gives `(carry, ys)`).
"""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass, field
from typing import Any, Protocol

Shape = int | tuple["Shape", ...] | None
"""A structure over flat positions: an index, a tuple of structures, or Python None."""


@dataclass
class Signature:
    """How a def for a sub-jaxpr is called and what it gives back.

    Its Python parameters are invar indices, tuples of them (`def step(state): x, previous =
    state`) or None; `returns` is the structure of what it returns; `closure` holds the invars it
    reads from the enclosing def instead (a loop's constants, closed over as the code that built
    the loop did: JAX lifts them back out, so the loop re-traces the same).
    """

    params: list[Shape]
    returns: Shape
    closure: dict[int, ast.expr] = field(default_factory=dict)
    """Invars read from the enclosing def: invar index -> the expression there."""
    names: list[str] = field(default_factory=list)
    """Fallback names for the parameters, in order (`carry`, `x`)."""
    skip: frozenset[int] = frozenset()
    """Equations (by index) the call itself makes again (`fori_loop`'s `i + 1`): not written."""
    leaf_names: dict[int, str] = field(default_factory=dict)
    """Fallback names of the invars a tuple parameter unpacks to (`x_dot` for a tangent)."""
    doc: str | None = None


@dataclass
class Structured:
    """A rule's value that is not the flat tuple of the equation's outputs: `shape` says which
    output sits where in it (`lax.scan`'s `(carry, ys)`)."""

    value: ast.expr
    shape: Shape


def pack(indices: range | list[int], empty: Shape = ()) -> Shape:
    """One index alone, several as a tuple, none as `empty`."""
    items = list(indices)
    if not items:
        return empty
    return items[0] if len(items) == 1 else tuple(items)


def shape_expr(shape: Shape, leaves: list[ast.expr]) -> ast.expr:
    """The expression with `shape`'s structure over `leaves` (by index)."""
    if shape is None:
        return ast.Constant(None)
    if isinstance(shape, int):
        return copy.deepcopy(leaves[shape])
    return ast.Tuple([shape_expr(s, leaves) for s in shape], ast.Load())


def indices(shape: Shape) -> list[int]:
    if shape is None:
        return []
    if isinstance(shape, int):
        return [shape]
    return [i for s in shape for i in indices(s)]


class Emitter(Protocol):
    """What a rule may ask of the code generator that called it."""

    nests: bool
    """Whether this emitter writes sub-jaxprs as nested defs (`nested`, `used`, `custom_jvp`)."""

    def constant(self, value: Any, hint: str) -> ast.expr:
        """An expression for an array constant (hoisted, named after `hint`)."""

    def function(self, jaxpr: Any, hint: str) -> ast.expr:
        """Emit `jaxpr` (a ClosedJaxpr) as a function; return an expression naming it.

        The function takes the jaxpr's invars positionally and returns its one output, or a
        tuple of its outputs when it has several (or none).
        """

    def inline(self, jaxpr: Any, args: list[ast.expr], hint: str) -> list[ast.expr]:
        """Emit `jaxpr`'s equations in the current body; return its outputs as expressions."""

    def nested(self, jaxpr: Any, hint: str, signature: Signature) -> ast.expr:
        """Write `jaxpr` as a def nested in the current one; return the expression naming it."""

    def used(self, var: Any) -> bool:
        """Whether a value of the equation being written is read afterwards."""

    def custom_jvp(self, eqn: Any) -> ast.expr | None:
        """A `jax.custom_jvp` def with its rule for the function `eqn` calls, if the trace has it."""

    def rewrote(self, name: str) -> None:
        """The rule took the rewrite `name` (see `render.rules.REWRITES`): same bits under jit,
        not the same equation."""


class Flat:
    """The capabilities of an emitter that writes no nested defs: rules fall back to flat forms."""

    nests = False

    def nested(self, jaxpr: Any, hint: str, signature: Signature) -> ast.expr:
        raise NotImplementedError("this emitter writes no nested defs")

    def used(self, var: Any) -> bool:
        return True

    def custom_jvp(self, eqn: Any) -> ast.expr | None:
        return None

    def rewrote(self, name: str) -> None:
        return None
