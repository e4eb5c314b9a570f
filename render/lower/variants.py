"""Calls of one function that differ only in shapes (q and k heads) share one def.

Defs written for the same torch function whose bodies differ only in integers that are
dimensions of their arguments are merged: each such integer becomes `x.shape[d]`.
"""

from __future__ import annotations

import ast
from typing import Any

from render.ir import Function, named
from render.lower.calltree import Group, operand_values
from render.lower.paths import plain_params


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
    if not _parallel_diff(trees, differences):
        return
    shapes = [_param_shapes(g) for g in variants]
    replacements = []
    for parent, attr, index, values in differences:
        expr = _dimension_of(first.params, shapes, values)
        if expr is None:
            return
        replacements.append((parent, attr, index, expr))
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


def _parallel_diff(trees: list[ast.AST], out: list) -> bool:
    """Walk equal-shaped trees; collect int constants that differ; False on any other difference."""
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
                    if isinstance(item, ast.Constant) and _int_differs(items):
                        out.append((first, attr, i, [it.value for it in items]))
                    elif not _parallel_diff(items, out):
                        return False
                elif any(it != item for it in items):
                    return False
        elif isinstance(value, ast.AST):
            if isinstance(value, ast.Constant) and _int_differs(others):
                out.append((first, attr, None, [o.value for o in others]))
            elif not _parallel_diff(others, out):
                return False
        elif attr not in ("ctx", "lineno", "col_offset", "end_lineno", "end_col_offset") and any(
            o != value or type(o) is not type(value) for o in others
        ):
            return False
    return True


def _int_differs(nodes: list[Any]) -> bool:
    values = [n.value for n in nodes if isinstance(n, ast.Constant)]
    return len(values) == len(nodes) and all(type(v) is int for v in values) and len(set(values)) > 1


def _param_shapes(group: Group) -> dict[str, tuple[int, ...]]:
    function, node = group.function, group.nodes[0]
    assert function is not None
    values = operand_values(node, function)
    return {name: tuple(values[at].aval.shape) for name, at in plain_params(function)}


def _dimension_of(
    params: list[str], shapes: list[dict[str, tuple[int, ...]]], values: list[int]
) -> ast.expr | None:
    for param in params:
        if param in ("params", "state") or any(param not in s for s in shapes):
            continue
        ranks = {len(s[param]) for s in shapes}
        if len(ranks) != 1:
            continue
        for dim in range(ranks.pop()):
            if all(s[param][dim] == v for s, v in zip(shapes, values)):
                shape = ast.Attribute(named(param), "shape", ast.Load())
                return ast.Subscript(shape, ast.Constant(dim), ast.Load())
    return None
