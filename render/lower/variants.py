"""Calls of one function that differ only in shapes (q and k heads) share one def.

Defs written for the same torch function whose bodies differ only in integers that are
dimensions of their arguments are merged: each such integer becomes `x.shape[d]`.
"""

from __future__ import annotations

import ast

from render.ir import Function
from render.lower.calltree import Group
from render.lower.dims import fit, parallel_diff, size_expr


def merge_variants(level: list[Group]) -> None:
    """Calls of one function that differ only in shapes (q and k heads) share one def."""
    by_code: dict[tuple, list[Group]] = {}
    for group in level:
        if group.nodes[0].parent is not None:
            by_code.setdefault(group.nodes[0].code, []).append(group)
    for variants in by_code.values():
        if len(variants) > 1:
            _merge_shapes(variants)


def _merge_shapes(variants: list[Group]) -> None:
    """Merge defs whose bodies differ only in integers that are dimensions of their arguments."""
    functions = [g.function for g in variants]
    assert all(functions)
    first = functions[0]
    assert first is not None
    if any(
        f.params != first.params
        or f.operands != first.operands
        or f.packing != first.packing
        or f.out_slots != first.out_slots
        or f.ret_paths != first.ret_paths
        or f.state_out != first.state_out
        for f in functions
        if f is not None
    ):
        return
    trees = [_body_module(f) for f in functions if f is not None]
    differences: list[tuple[ast.AST, str, int | None, list[int]]] = []
    if not parallel_diff(trees, differences):
        return
    shapes = [f.arg_shapes for f in functions if f is not None]
    replacements = []
    for parent, attr, index, values in differences:
        found = fit(values, shapes, forms=("atom",))
        if found is None:
            return
        replacements.append((parent, attr, index, size_expr(found[1][0])))
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
