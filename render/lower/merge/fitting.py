"""Comparing the defs of one function and fitting a number that differs to the sizes: what merging
calls (`shared_defs`) and merging programs traced at other sizes (`input_sizes`) share.

`parallel_diff` walks defs of one shape side by side and collects the numbers that differ;
`fit` finds the first operation over the arguments' dimensions that gives a number in each (`x.shape[1]`,
`x.shape[1] * 4`, `x.shape[1] // 2`, `x.shape[0] * x.shape[1]`, `x.shape[1] + 1`), and
`expression` writes it.
"""

from __future__ import annotations

import ast
from typing import Any

from jaxside.render.ir import named

Atom = tuple[str, int]
"""A dimension of a def's argument: (parameter, axis)."""
Fit = tuple[str, tuple[Atom, ...], int]
"""How a number follows the sizes: (operation, atoms, constant); operations in `OPERATIONS`."""

OPERATIONS = ("atom", "mul", "div", "prod", "add")
"""Tried in this order: `a`, `a * c`, `a // c`, `a * b`, `a + c`: the first that gives every value."""


def parallel_diff(trees: list[Any], out: list[Any], numbers: bool = False, names: bool = True) -> bool:
    """Walk equal-shaped trees; collect the int constants that differ (any numbers, with
    `numbers`) as `(parent, field, index or None, values)`; False on any other difference (in
    names too, unless not `names`: trees whose names are known to correspond)."""
    first = trees[0]
    if any(type(t) is not type(first) for t in trees):
        return False
    for attr, value in ast.iter_fields(first):
        others = [getattr(t, attr) for t in trees]
        if isinstance(value, list):
            if any(not isinstance(o, list) or len(o) != len(value) for o in others):
                return False
            for i, item in enumerate(value):
                items = [o[i] for o in others]
                if isinstance(item, ast.AST):
                    if isinstance(item, ast.Constant) and _number_differs(items, numbers):
                        out.append((first, attr, i, [it.value for it in items]))
                    elif not parallel_diff(items, out, numbers, names):
                        return False
                elif any(it != item for it in items):
                    return False
        elif isinstance(value, ast.AST):
            if isinstance(value, ast.Constant) and _number_differs(others, numbers):
                out.append((first, attr, None, [o.value for o in others]))
            elif not parallel_diff(others, out, numbers, names):
                return False
        elif attr not in ("ctx", "lineno", "col_offset", "end_lineno", "end_col_offset") and any(
            not _same(o, value) for o in others
        ) and (names or attr != "id" or not isinstance(first, ast.Name)):
            return False
    return True


def _same(a: Any, b: Any) -> bool:
    """Equal and of one type; NaN counts as the same as a NaN of the same repr."""
    return type(a) is type(b) and (a == b or (a != a and b != b and repr(a) == repr(b)))


def _number_differs(nodes: list[Any], numbers: bool) -> bool:
    types = (int, float) if numbers else (int,)
    values = [n.value for n in nodes if isinstance(n, ast.Constant)]
    # By value, and by repr too: every NaN is unequal to itself, yet the same constant each time.
    return (len(values) == len(nodes) and all(type(v) in types for v in values) and len(set(values)) > 1
            and len({repr(v) for v in values}) > 1)


def fit(
    values: list[int], shapes: list[dict[str, tuple[int, ...]]], operations: tuple[str, ...] = OPERATIONS
) -> Fit | None:
    """The first of `operations` over the arguments' dimensions that gives `values[k]` from
    `shapes[k]` for every k (the same def at each size), or None."""
    first = shapes[0]
    atoms = [
        (p, d) for p, shape in first.items() for d in range(len(shape))
        if all(p in s and len(s[p]) == len(shape) for s in shapes)
    ]

    def size(atom: Atom, k: int) -> int:
        return shapes[k][atom[0]][atom[1]]

    def gives(operation: str, used: tuple[Atom, ...], c: int) -> bool:
        return all(_value(operation, [size(a, k) for a in used], c) == v for k, v in enumerate(values))

    v0 = values[0]
    for operation in operations:
        pairs: list[tuple[Atom, ...]] = [(a,) for a in atoms]
        if operation == "prod":  # two dimensions before one squared
            pairs = [(a, b) for i, a in enumerate(atoms) for b in atoms[i + 1 :]]
            pairs += [(a, a) for a in atoms]
        for used in pairs:
            a0 = size(used[0], 0)
            c = {"mul": v0 // a0 if a0 and v0 % a0 == 0 else 0, "div": a0 // v0 if v0 else 0,
                 "add": v0 - a0}.get(operation, 0)
            if operation in ("mul", "div") and c < 2 or operation == "add" and c == 0:
                continue
            if gives(operation, used, c):
                return operation, used, c
    return None


def _value(operation: str, sizes: list[int], c: int) -> int:
    if operation == "atom":
        return sizes[0]
    if operation == "mul":
        return sizes[0] * c
    if operation == "div":
        return sizes[0] // c
    if operation == "prod":
        return sizes[0] * sizes[1]
    return sizes[0] + c


def size_expr(atom: Atom, names: dict[Atom, str] | None = None) -> ast.expr:
    """The name the def gave a dimension, else `x.shape[d]`."""
    if names and atom in names:
        return named(names[atom])
    shape = ast.Attribute(named(atom[0]), "shape", ast.Load())
    return ast.Subscript(shape, ast.Constant(atom[1]), ast.Load())


def expression(found: Fit, names: dict[Atom, str] | None = None) -> ast.expr:
    """The fitted size as source: `x.shape[1] * 4` (a dimension the def named, by its name)."""
    operation, atoms, c = found
    first = size_expr(atoms[0], names)
    if operation == "atom":
        return first
    if operation == "prod":
        return ast.BinOp(first, ast.Mult(), size_expr(atoms[1], names))
    sign: ast.operator = ast.Add() if c > 0 else ast.Sub()
    op: ast.operator = {"mul": ast.Mult(), "div": ast.FloorDiv()}.get(operation, sign)
    return ast.BinOp(first, op, ast.Constant(abs(c)))
