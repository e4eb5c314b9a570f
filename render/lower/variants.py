"""Calls of one function that differ only in shapes (q and k heads) share one def.

Defs written for the same torch function whose bodies differ only in integers that follow the
sizes of their arguments are merged: each such integer becomes `x.shape[d]` (or `x.shape[1] * 2`):
blocks of a ResNet with other widths share a def. Comparing defs and fitting numbers to sizes
(`parallel_diff`, `fit`) live here; `render.lower.dims` does the same across programs traced at
other input sizes.
"""

from __future__ import annotations

import ast
from typing import Any

from jaxside.render.ir import Function, named
from jaxside.render.lower.calltree import Group

Atom = tuple[str, int]
"""A dimension of a def's argument: (parameter, axis)."""
Fit = tuple[str, tuple[Atom, ...], int]
"""How a number follows the sizes: (kind, atoms, constant); kinds in `_FORMS`."""

_FORMS = ("atom", "mul", "div", "prod", "add")
"""Tried in this order: `a`, `a * c`, `a // c`, `a * b`, `a + c`: the first that gives every value."""


def merge_variants(level: list[Group]) -> None:
    """Calls of one function that differ only in shapes (q and k heads) share one def."""
    by_code: dict[tuple, list[Group]] = {}
    for group in level:
        if group.nodes[0].parent is not None:
            by_code.setdefault(group.nodes[0].code, []).append(group)
    for variants in by_code.values():
        kinds: list[list[Group]] = []  # with and without a downsample branch: two kinds
        for group in variants:
            kind = next((k for k in kinds if _alike(k[0], group)), None)
            if kind is None:
                kinds.append([group])
            else:
                kind.append(group)
        for kind in kinds:
            if len(kind) > 1:
                _merge_shapes(kind)


def _alike(a: Group, b: Group) -> bool:
    """Whether two defs of one function are called alike and differ at most in integers."""
    f, g = a.function, b.function
    assert f is not None and g is not None
    return (
        f.params == g.params and f.operands == g.operands and f.packing == g.packing
        and f.out_slots == g.out_slots and f.ret_paths == g.ret_paths and f.state_out == g.state_out
        and parallel_diff([_body_module(f), _body_module(g)], [])
    )


def _merge_shapes(variants: list[Group]) -> None:
    """Merge defs whose bodies differ only in integers that follow the sizes of their arguments."""
    functions = [g.function for g in variants]
    first = functions[0]
    assert first is not None
    trees = [_body_module(f) for f in functions if f is not None]
    differences: list[tuple[ast.AST, str, int | None, list[int]]] = []
    if not parallel_diff(trees, differences):
        return
    shapes = [f.arg_shapes for f in functions if f is not None]
    replacements = []
    for parent, attr, index, values in differences:
        found = fit(values, shapes, forms=("atom", "mul"))  # a width, twice a width: not a stride
        if found is None:
            return
        replacements.append((parent, attr, index, expression(found)))
    for parent, attr, index, expr in replacements:
        if index is None:
            setattr(parent, attr, expr)
        else:
            getattr(parent, attr)[index] = expr
    for group in variants[1:]:
        assert group.function is not None
        first.calls += group.function.calls
        group.function = first


def _body_module(function: Function) -> ast.Module:
    body: list[ast.stmt] = [s.node() for s in function.body]
    if function.returns is not None:
        body.append(ast.Return(function.returns))
    return ast.Module(body, [])


# -- comparing defs -------------------------------------------------------------------------------


def parallel_diff(trees: list[Any], out: list, numbers: bool = False) -> bool:
    """Walk equal-shaped trees; collect the int constants that differ (any numbers, with
    `numbers`) as `(parent, field, index or None, values)`; False on any other difference."""
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
                    elif not parallel_diff(items, out, numbers):
                        return False
                elif any(it != item for it in items):
                    return False
        elif isinstance(value, ast.AST):
            if isinstance(value, ast.Constant) and _number_differs(others, numbers):
                out.append((first, attr, None, [o.value for o in others]))
            elif not parallel_diff(others, out, numbers):
                return False
        elif attr not in ("ctx", "lineno", "col_offset", "end_lineno", "end_col_offset") and any(
            o != value or type(o) is not type(value) for o in others
        ):
            return False
    return True


def _number_differs(nodes: list[Any], numbers: bool) -> bool:
    kinds = (int, float) if numbers else (int,)
    values = [n.value for n in nodes if isinstance(n, ast.Constant)]
    return len(values) == len(nodes) and all(type(v) in kinds for v in values) and len(set(values)) > 1


# -- fitting a number ---------------------------------------------------------------------------------


def fit(
    values: list[int], shapes: list[dict[str, tuple[int, ...]]], forms: tuple[str, ...] = _FORMS
) -> Fit | None:
    """The first form in `forms` over the arguments' dimensions that gives `values[k]` from
    `shapes[k]` for every k (the same def at each size), or None."""
    first = shapes[0]
    atoms = [
        (p, d) for p, shape in first.items() for d in range(len(shape))
        if all(p in s and len(s[p]) == len(shape) for s in shapes)
    ]

    def size(atom: Atom, k: int) -> int:
        return shapes[k][atom[0]][atom[1]]

    def gives(kind: str, used: tuple[Atom, ...], c: int) -> bool:
        return all(_value(kind, [size(a, k) for a in used], c) == v for k, v in enumerate(values))

    v0 = values[0]
    for kind in forms:
        pairs: list[tuple[Atom, ...]] = [(a,) for a in atoms]
        if kind == "prod":  # two dimensions before one squared
            pairs = [(a, b) for i, a in enumerate(atoms) for b in atoms[i + 1 :]]
            pairs += [(a, a) for a in atoms]
        for used in pairs:
            a0 = size(used[0], 0)
            c = {"mul": v0 // a0 if a0 and v0 % a0 == 0 else 0, "div": a0 // v0 if v0 else 0,
                 "add": v0 - a0}.get(kind, 0)
            if kind in ("mul", "div") and c < 2 or kind == "add" and c == 0:
                continue
            if gives(kind, used, c):
                return kind, used, c
    return None


def _value(kind: str, sizes: list[int], c: int) -> int:
    if kind == "atom":
        return sizes[0]
    if kind == "mul":
        return sizes[0] * c
    if kind == "div":
        return sizes[0] // c
    if kind == "prod":
        return sizes[0] * sizes[1]
    return sizes[0] + c


def size_expr(atom: Atom, names: dict[Atom, str] | None = None) -> ast.expr:
    """The name the def gave a dimension, else `x.shape[d]`."""
    if names and atom in names:
        return named(names[atom])
    shape = ast.Attribute(named(atom[0]), "shape", ast.Load())
    return ast.Subscript(shape, ast.Constant(atom[1]), ast.Load())


def expression(found: Fit, names: dict[Atom, str] | None = None) -> ast.expr:
    kind, atoms, c = found
    first = size_expr(atoms[0], names)
    if kind == "atom":
        return first
    if kind == "prod":
        return ast.BinOp(first, ast.Mult(), size_expr(atoms[1], names))
    op: ast.operator = {"mul": ast.Mult(), "div": ast.FloorDiv()}.get(kind, ast.Add() if c > 0 else ast.Sub())
    return ast.BinOp(first, op, ast.Constant(abs(c)))
