"""Calls of one function that differ only in shapes (q and k heads) share one def.

Defs written for the same torch function whose bodies differ only in integers that follow the
sizes of their arguments are merged: each such integer becomes `x.shape[d]` (or `x.shape[1] * 2`,
as `render.lower.dims` fits it): blocks of a ResNet with other widths share a def.
"""

from __future__ import annotations

import ast

from render.ir import Function
from render.lower.calltree import Group
from render.lower.dims import expression, fit, parallel_diff


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
        found = fit(values, shapes)
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
