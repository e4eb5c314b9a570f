"""How a nested def for a sub-jaxpr is called: parameters and results as structures over flat positions."""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass, field

Shape = int | tuple["Shape", ...] | None
"""A structure over flat positions: an index, a tuple of structures, or Python None."""


@dataclass
class Signature:
    """How a def for a sub-jaxpr is called and what it gives back."""

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


STRUCTURE = "jaxside_structure"
"""Attribute a rule sets on the expression it returns when its value is not the flat tuple of the
equation's outputs (`lax.scan` gives `(carry, ys)`): the `Shape` of that value over the outputs."""


def structured(value: ast.expr, shape: Shape) -> ast.expr:
    """Mark `value` as having `shape` over the equation's outputs."""
    setattr(value, STRUCTURE, shape)
    return value
